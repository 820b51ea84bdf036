"""``acp-relay connect``'s bridge: one editor's stdio and one relay WebSocket, both ways.

An editor launches ``acp-relay connect URL`` as if it were the agent. Stdin is read
with the pump ``serve`` uses (:mod:`relay.streams.pump`), with the same limits and
backpressure, into the link to the relay (:class:`relay.client.link.ends.Link`), which
writes the relay's lines to stdout: plain, each line one text frame, or resumable
(:mod:`relay.client.link.opening` opens it as the relay chooses). Stdin is read only once
the link is open, so whatever the editor writes early waits in its pipe. When the
connection cannot be made or ends, every request the editor has in flight
(:mod:`relay.client.link.inflight`), and every later one, is answered with the JSON-RPC error of
:mod:`relay.client.link.editorerrors`, until the editor closes stdin. Stdout carries protocol lines
only; diagnostics go to stderr through :mod:`relay.observe.logs`, and the ticket
(:mod:`relay.client.link.ticketsource`) never appears in them. The stdio itself is
:mod:`relay.streams.stdio`'s.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Coroutine, Sequence
from contextlib import suppress
from typing import Any, TypeVar

from websockets.asyncio.client import ClientConnection
from websockets.frames import CloseCode

from relay.acp.outcome import Forward, Outcome
from relay.client.link.dialing import CLOSE_TIMEOUT, DialConfig, close_failure, ticket_for
from relay.client.link.editorerrors import Failure, closing_unanswered, stopped_unanswered
from relay.client.link.ends import Link
from relay.client.link.inflight import InFlight, request_id
from relay.client.link.opening import open_link
from relay.core.resumeprofile import Welcome
from relay.observe import logs
from relay.observe.logs import Logger
from relay.observe.observer import Counters, PumpObserver
from relay.streams.pipewriter import LineWriter
from relay.streams.pump import lines_to_frames
from relay.streams.stdio import editor_stdio

__all__ = ["Bridge", "run_bridge"]

T = TypeVar("T")
ANSWER_WAIT_SECONDS = 10.0  # from stdin's end, how long connect waits for answers owed
STOPPED = "stopped"  # why connect closes when SIGTERM or SIGINT stopped it


# -- the bridge -----------------------------------------------------------------------


class Bridge:
    """One editor's stdio and one relay socket, from the connect to the editor's EOF."""

    def __init__(
        self,
        config: DialConfig,
        stdin: asyncio.StreamReader,
        stdout: asyncio.StreamWriter,
        signals: Sequence[int] = (),
    ) -> None:
        self.config = config
        self.signals = signals  # the signals that stopped connect, as they come
        self.stdin = stdin
        self.stdout = stdout
        self.in_flight = InFlight()
        self.failure: Failure | None = None
        self.ticket: str | None = None
        self.up = Counters()  # editor -> relay (including lines answered here)
        self.down = Counters()  # relay -> editor
        self.answered = 0  # editor requests answered here with the failure
        self.log: Logger = logs.get_logger("relay.connect", url=config.url)
        self.answers_settled = asyncio.Event()  # set when no editor request awaits an answer
        self.observer = _RelayObserver(self)
        self.link: Link = _NoLink(self)  # the relay's, once opened; again _NoLink if it fails
        self._untracked = False
        self.stdin_ended_at: float | None = None  # time.monotonic() at stdin's end
        self.cut_short: Failure | None = None  # a stop's answer to requests owed, if any

    async def run(self, stop: asyncio.Event) -> int:
        """Connect, then carry lines until the editor closes stdin or ``stop``; exit status."""
        started = time.monotonic()
        status = 0
        if await _unless_stopped(self._open(), stop):
            status = await self._serve_editor(stop)
        if self.cut_short is not None:  # stopped while the editor was owed answers
            status = self.cut_short.exit_status
        self.log.info(
            "connect finished",
            exit_status=status,
            messages_from_editor=self.up.messages,
            bytes_from_editor=self.up.bytes,
            dropped_from_editor=self.up.dropped,
            messages_to_editor=self.down.messages,
            bytes_to_editor=self.down.bytes,
            answered_with_error=self.answered,
            duration=round(time.monotonic() - started, 3),
        )
        return status

    async def _open(self) -> None:
        """The ticket, then the link the relay's choice makes; or the editor told why not."""
        ticket = await ticket_for(self.config)
        if isinstance(ticket, Failure):
            await self.fail(ticket)
            return
        self.ticket_fetched(ticket)
        self.log.info("connecting", ticket_in=self.config.ticket_in)
        opened = await open_link(self, ticket, self.stdout)
        if isinstance(opened, Failure):
            await self.fail(opened)
            return
        self.link = opened

    async def _serve_editor(self, stop: asyncio.Event) -> int:
        """Read stdin to its end: lines go to the relay, or get the failure as an answer."""
        upstream = asyncio.create_task(self._read_editor())
        try:
            if await self.link.run(upstream, stop):
                return 0
            await _unless_stopped(asyncio.shield(upstream), stop)
            return self.failure.exit_status if self.failure is not None else 0
        finally:
            upstream.cancel()
            await asyncio.gather(upstream, return_exceptions=True)

    async def _read_editor(self) -> None:
        """Every stdin line, in order, into :meth:`send_frames`, until EOF (a read error
        counts as one)."""
        try:
            await lines_to_frames(
                self.stdin, self, max_bytes=self.config.max_message_bytes, observer=self.observer
            )
        except OSError as exc:
            self.log.warning("reading stdin failed", reason=str(exc))
        finally:
            self.stdin_ended_at = time.monotonic()

    async def carry(
        self,
        ws: ClientConnection,
        downstream: Coroutine[Any, Any, bool],
        upstream: asyncio.Task[None],
        stop: asyncio.Event,
    ) -> Failure | None:
        """Carry lines both ways over ``ws`` until the editor is done (None: the socket is then
        closed with 1000) or the socket is lost (why). ``downstream`` brings the relay's
        lines (the link's: plain, or the resume profile's records) and is True once the
        socket is gone; ``upstream`` reads the editor's."""
        receiving = asyncio.create_task(downstream)
        stopping = asyncio.create_task(stop.wait())
        lost = False
        try:
            await asyncio.wait({upstream, receiving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if upstream.done() and not stopping.done():
                await self._await_answers(receiving, stop)
            lost = receiving.done() and receiving.result()
            if not lost:
                await self._close_socket(ws, receiving)
        finally:
            stopping.cancel()
            receiving.cancel()
            await asyncio.gather(stopping, receiving, return_exceptions=True)
        if lost:
            return close_failure(ws, self.config)
        if stop.is_set():  # after the close: what the relay sent before it was passed on
            await self.answer_owed(STOPPED)
        return None

    async def _await_answers(self, downstream: asyncio.Task[Any], stop: asyncio.Event) -> None:
        """Stdin ended: wait for the answers still owed (until ANSWER_WAIT_SECONDS from the
        end, never past ``stop``).

        A request sent before the end is answered by the agent, or here with an error
        saying why, never dropped.
        """
        if not self.in_flight:
            return
        self.log.info("stdin ended: waiting for answers", requests=len(self.in_flight))
        self.answers_settled.clear()
        settled = asyncio.create_task(self.answers_settled.wait())
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait(
                {settled, stopping, downstream},
                timeout=self._answer_wait_left(),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            settled.cancel()
            stopping.cancel()
        if self.in_flight and not downstream.done() and not stop.is_set():
            await self.answer_owed(f"no answer within {ANSWER_WAIT_SECONDS:g} s")

    def _answer_wait_left(self) -> float:
        """Seconds left of the wait for answers owed, which counts from stdin's end."""
        ended = self.stdin_ended_at if self.stdin_ended_at is not None else time.monotonic()
        return max(ended + ANSWER_WAIT_SECONDS - time.monotonic(), 0.0)

    async def client_gone(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> str:
        """While the relay is away: return once the editor no longer waits for it, saying why.

        That is at ``stop``; at stdin's end when no request is owed an answer; else once
        the wait for answers (ANSWER_WAIT_SECONDS from stdin's end) is over.
        """
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({upstream, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not stop.is_set() and self.in_flight:
                await asyncio.wait({stopping}, timeout=self._answer_wait_left())
        finally:
            stopping.cancel()
        if stop.is_set():
            return STOPPED
        if not self.in_flight:
            return "stdin ended"
        return f"the relay was lost and not back within {ANSWER_WAIT_SECONDS:g} s of stdin's end"

    async def answer_owed(self, why: str) -> None:
        """connect is closing: every request still owed an answer gets the closing error,
        or, when a signal stopped it (``why`` is STOPPED), the error saying so."""
        if why == STOPPED:
            signal_number = self.signals[0] if self.signals else None
            failure = stopped_unanswered(self.config.url, signal_number)
        else:
            failure = closing_unanswered(self.config.url, why)
        owed = self.in_flight.settle_all()
        if owed and why == STOPPED:
            self.cut_short = failure
            self.log.warning(
                "stopped with answers owed", requests=len(owed), **failure.log_fields()
            )
        for request in owed:
            self._write(failure.error_response(request))
        await self._drain()

    async def _close_socket(self, ws: ClientConnection, downstream: asyncio.Task[Any]) -> None:
        """The editor is done: close with 1000 and give the relay a moment to answer."""
        self.log.info("closing")
        await ws.close(CloseCode.NORMAL_CLOSURE)
        with suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(downstream), CLOSE_TIMEOUT)

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        """Forward the editor lines of one read to the relay, or answer them when it is gone.

        The sink :func:`relay.streams.pump.lines_to_frames` sends into.
        """
        await self.link.send_lines(frames)

    async def unsent(self, lines: Sequence[bytes]) -> None:
        """Lines the link failed before it took: answered as every later one is."""
        await self.send_frames(lines)

    def lines_out(self) -> LineWriter:
        """The editor's stdout, line by line, for the resuming link's records."""
        return LineWriter(self.stdout)

    def welcomed(self, welcome: Welcome) -> None:
        """The link keeps the welcome's secret for its next resume: nothing else keeps it."""

    def ticket_fetched(self, ticket: str) -> None:
        """A ticket was read: it must never reach a log line or an error message."""
        self.ticket = ticket
        logs.redactor().add_ticket(ticket)

    def note_request(self, line: bytes) -> None:
        """An editor line goes to the relay: a request among them now awaits its answer."""
        if not self.in_flight.request_sent(line) and not self._untracked:
            self._untracked = True
            self.log.warning(
                "too many requests in flight: later ones are not answered if the relay goes",
                limit=self.in_flight.limit,
            )

    async def fail(self, failure: Failure) -> None:
        """From now on every request gets ``failure``; answer those in flight at once."""
        self.failure = failure = failure.redacted(self.ticket)
        self.link = _NoLink(self)
        log = self.log.error if failure.exit_status else self.log.warning
        log("relay connection failed", **failure.log_fields())
        for request in self.in_flight.settle_all():
            self._write(failure.error_response(request))
        await self._drain()

    async def answer(self, line: bytes) -> None:
        """Answer an editor request with the failure; notifications and responses get none."""
        request = request_id(line)
        if request is None or self.failure is None:
            return
        self._write(self.failure.error_response(request))
        await self._drain()

    def _write(self, line: bytes) -> None:
        if not self.stdout.is_closing():
            self.answered += 1
            self.stdout.writelines((line, b"\n"))

    async def _drain(self) -> None:
        with suppress(ConnectionError):
            await self.stdout.drain()


class _NoLink:
    """The bridge without a link to the relay: before it is open (stdin is not read yet),
    and once it failed, when each request the editor sends is answered with the failure."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    async def send_lines(self, lines: Sequence[bytes]) -> None:
        for line in lines:
            await self.bridge.answer(line)

    async def run(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> bool:
        return False  # nothing to carry: the editor is answered as it writes

    def drop(self) -> None:
        """No socket to let go."""


class _RelayObserver(PumpObserver):
    """The bridge's pumps: counted and logged; a response from the agent settles its request."""

    def __init__(self, bridge: Bridge) -> None:
        super().__init__(bridge.log, from_socket=bridge.down, to_socket=bridge.up)
        self.in_flight = bridge.in_flight
        self.settled = bridge.answers_settled

    def frame(self, outcome: Outcome) -> None:
        """A relay frame went to the editor unchanged (or was skipped)."""
        if isinstance(outcome, Forward):
            self.in_flight.response_received(outcome.line)
            if not self.in_flight:
                self.settled.set()
        super().frame(outcome)


async def _unless_stopped(
    awaitable: Coroutine[Any, Any, T] | asyncio.Future[T], stop: asyncio.Event
) -> bool:
    """Await ``awaitable`` unless ``stop`` is set first (then cancel it); True if it finished."""
    task = asyncio.ensure_future(awaitable)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # its exception, if any
    return True


async def run_bridge(config: DialConfig) -> int:
    """Bridge this process's stdio to the relay; SIGTERM and SIGINT end it like stdin EOF,
    but at once: what the editor is still owed is answered with an error."""
    stop = asyncio.Event()
    signals: list[int] = []

    def stopped(sig: signal.Signals) -> None:
        signals.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped, sig)
    async with editor_stdio() as (stdin, stdout):
        return await Bridge(config, stdin, stdout, signals).run(stop)
