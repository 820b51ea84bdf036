"""``connect``'s side of the resume profile: one logical connection over successive sockets.

When the relay selects ``acp-relay.resume.v1``, :class:`ResumingLink` carries the
editor's lines as numbered messages and the relay's records back as lines, acknowledging
them. When the socket is lost without a close frame from the relay (a reset, an EOF, a
heartbeat or a send that went unanswered), it reconnects with backoff and jitter, with a
fresh ticket each time, for as long as the relay's advertised grace allows; the editor
notices a pause only: what it writes meanwhile is kept (bounded, then its pipe waits)
and delivered once after the resume, and the records it missed are replayed without
gaps or duplicates. Only when resuming fails does it get the bridge's JSON-RPC errors.

The frames and the bookkeeping are :mod:`relay.core.profile`'s; this module does the I/O.
The editor's side (stdin, stdout, the answers owed) is the bridge's, seen through
:class:`EditorSide`: what the link needs of it, and no more.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Coroutine, Sequence
from contextlib import suppress
from typing import Any, Protocol

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from relay.connect.dialing import BridgeConfig, close_failure, connect_failure, open_socket
from relay.connect.ticketsource import TicketUnavailable, fetch_ticket
from relay.core.editorerrors import Close, Failure, cannot_connect, could_not_resume, resumable
from relay.core.framing import close_reason
from relay.core.outcome import Forward, judge_frame
from relay.core.profile import (
    CANNOT_RESUME,
    PROFILE,
    PROFILE_ERROR,
    Ack,
    ProfileError,
    Welcome,
    ack_frame,
    message_frame,
    parse_relay_frame,
    parse_welcome,
)
from relay.core.windows import Received, Sent, backoff
from relay.observe.logs import Logger
from relay.observe.observer import PumpObserver
from relay.streams.pipewriter import LineWriter
from relay.streams.wsadapter import TextFrames, stall_timeout

MAX_KEPT_MESSAGES = 4096  # editor messages kept until the relay acknowledges them
MAX_KEPT_BYTES = 16 * 1024 * 1024
ACK_DELAY = 0.1  # seconds a record's acknowledgement may wait for a message to ride on
SUBPROTOCOLS = (PROFILE, "acp.v1")
RESEND_BATCH = 64  # messages re-sent in one socket write after a resume


async def start_profile(ws: ClientConnection, first: dict[str, object]) -> Welcome:
    """Send the profile's first frame on ``ws`` and read the relay's welcome.

    Callers bound the wait (the relay answers within its open timeout).
    """
    if ws.subprotocol != PROFILE:
        raise ProfileError("the relay does not offer resuming (acp.v1 selected)")
    await ws.send(json.dumps(first, separators=(",", ":")))
    return parse_welcome(await ws.recv(decode=False))


class EditorSide(Protocol):
    """What the resuming link needs of the editor's side of ``connect`` (the bridge)."""

    @property
    def config(self) -> BridgeConfig: ...

    @property
    def log(self) -> Logger: ...

    @property
    def observer(self) -> PumpObserver: ...

    @property
    def stdout(self) -> asyncio.StreamWriter: ...

    def note_request(self, line: bytes) -> None:
        """An editor line goes to the relay (a request among them awaits its answer)."""

    def ticket_fetched(self, ticket: str) -> None:
        """A ticket was read (it must reach no log line)."""

    async def carry(
        self,
        ws: ClientConnection,
        downstream: Coroutine[Any, Any, bool],
        upstream: asyncio.Task[None],
        stop: asyncio.Event,
    ) -> Failure | None:
        """Carry both ways over ``ws`` until the editor is done (None) or the socket is lost."""

    async def fail(self, failure: Failure) -> None:
        """Every editor request gets ``failure`` from now on."""


class ResumingLink:
    """The editor's lines over the resume profile, across as many sockets as it takes."""

    def __init__(self, editor: EditorSide, ws: ClientConnection, welcome: Welcome) -> None:
        self.editor = editor
        self.ws = ws
        self.welcome = welcome
        self.sent = Sent(MAX_KEPT_MESSAGES, MAX_KEPT_BYTES)
        self.received = Received()
        self.frames = self._frames(ws)
        self.stdout = LineWriter(editor.stdout)
        self.attached = asyncio.Event()
        self.attached.set()
        self._room = asyncio.Event()
        self._room.set()
        self._ack_timer: asyncio.TimerHandle | None = None
        self._sending = asyncio.Lock()  # messages go out in number order, resends first
        self._rng = random.Random()

    # -- the editor's lines ---------------------------------------------------------------

    async def send_lines(self, lines: Sequence[bytes]) -> None:
        """Number and keep each line; send it now, or after the resume if no socket is up.

        Past the bound of kept messages, this waits for acknowledgements (the editor then
        waits on its pipe).
        """
        for line in lines:
            while not self.sent.has_room():
                self._room.clear()
                await self._room.wait()
            async with self._sending:
                seq = self.sent.number(line)
                self.editor.note_request(line)
                if self.attached.is_set():
                    await self._send([message_frame(seq, line, self.received.ack())])

    async def _send(self, batch: list[bytes]) -> None:
        """Send on the current socket; a socket that is gone is the receiving side's to see."""
        if batch:
            with suppress(ConnectionClosed):
                await self.frames.send_frames(batch)

    def _frames(self, ws: ClientConnection) -> TextFrames:
        config = self.editor.config
        stall = stall_timeout(config.ping_interval, config.ping_timeout)
        return TextFrames(ws, stall, self.editor.observer.send_stalled)

    # -- the relay's records -------------------------------------------------------------

    async def run(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> bool:
        """Carry the connection until the editor is done (True) or it cannot go on (False)."""
        while True:
            ws = self.ws
            lost = await self.editor.carry(ws, self._receive(ws), upstream, stop)
            if lost is None:
                return True
            if not _may_resume(ws):
                await self.editor.fail(lost)
                return False
            if not await self._resume(lost, stop):
                return False

    async def _receive(self, ws: ClientConnection) -> bool:
        """Records to the editor's stdout, in order, each once; acknowledged as they come.

        Returns when the socket goes (True), or when stdout is gone (False).
        """
        try:
            while True:
                frame = await ws.recv(decode=False)
                item = parse_relay_frame(frame)
                if item.ack is not None:
                    self.sent.acknowledge(item.ack)
                    self._room.set()
                if isinstance(item, Ack):
                    continue
                line = self.received.take(item)
                if line is None:
                    continue
                outcome = judge_frame(line.decode())
                if isinstance(outcome, Forward) and not await self.stdout.write(outcome.line):
                    return False  # the editor's stdout is gone
                self.editor.observer.frame(outcome)
                self._acknowledge_soon(ws)
        except ConnectionClosed:
            self.stdout.flush()
        except ProfileError as exc:
            self.editor.log.error("relay broke the resume profile", reason=str(exc))
            await ws.close(PROFILE_ERROR, close_reason(f"breaks {PROFILE}: {exc}"))
        return True

    def _acknowledge_soon(self, ws: ClientConnection) -> None:
        if self.received.due():
            self._acknowledge(ws)
        elif self._ack_timer is None:
            loop = asyncio.get_running_loop()
            self._ack_timer = loop.call_later(ACK_DELAY, self._acknowledge, ws)

    def _acknowledge(self, ws: ClientConnection) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        ack = self.received.ack()
        if ack is not None and ws is self.ws:
            frame = ack_frame(ack)
            asyncio.get_running_loop().create_task(self._send([frame]))

    # -- resuming ----------------------------------------------------------------------------

    async def _resume(self, lost: Failure, stop: asyncio.Event) -> bool:
        """Reconnect within the grace; True once resumed, False (editor told) if it failed."""
        self.attached.clear()
        lost_at = time.strftime("%H:%M:%S")
        started = time.monotonic()
        deadline = started + self.welcome.grace
        self.editor.log.warning(
            "lost the relay, resuming", reason=lost.message, grace=self.welcome.grace
        )
        why = lost
        attempt = 0
        while time.monotonic() < deadline and not stop.is_set():
            pause = backoff(attempt, self._rng.random())
            await asyncio.sleep(max(min(pause, deadline - time.monotonic()), 0))
            attempt += 1
            result = await self._try_resume()
            if isinstance(result, Failure):
                why = result
                if result.data.get("closeCode") == CANNOT_RESUME:
                    break  # the relay says it no longer has the connection: nothing to retry
                continue
            await self._resumed(result, time.monotonic() - started)
            return True
        url, grace = self.editor.config.url, self.welcome.grace
        await self.editor.fail(could_not_resume(url, lost_at, grace, why))
        return False

    async def _try_resume(self) -> Failure | tuple[ClientConnection, Welcome]:
        config = self.editor.config
        try:
            ticket = await fetch_ticket(config.ticket)
        except TicketUnavailable as exc:
            return cannot_connect(config.url, "ticket", str(exc))
        self.editor.ticket_fetched(ticket)
        first = {
            "type": "resume",
            "connection": self.welcome.connection,
            "secret": self.welcome.secret,
            "ack": self.received.last,
            "sent": self.sent.last,
        }
        try:
            ws = await open_socket(config, ticket, SUBPROTOCOLS)
        except (InvalidHandshake, OSError) as exc:
            return connect_failure(exc, config)
        except ConnectionClosed:  # closed before the request went out: the next try may do
            return cannot_connect(config.url, "handshake", "the connection closed at once")
        try:
            async with asyncio.timeout(config.open_timeout):
                return ws, await start_profile(ws, first)
        except ConnectionClosed as exc:
            close = exc.rcvd
            if close is None:
                return close_failure(ws, config)
            return Failure(
                f"the relay refused to resume: {close.reason or close.code}",
                {"url": config.url, "cause": "resume", "closeCode": int(close.code),
                 "closeReason": close.reason},
            )  # fmt: skip
        except (ProfileError, TimeoutError) as exc:
            ws.transport.abort()
            why = "no welcome" if isinstance(exc, TimeoutError) else str(exc)
            return cannot_connect(config.url, "handshake", why)

    async def _resumed(self, opened: tuple[ClientConnection, Welcome], gap: float) -> None:
        """The new socket carries on: what the relay lacks first, then whatever comes."""
        ws, welcome = opened
        async with self._sending:
            self.ws, self.frames, self.welcome = ws, self._frames(ws), welcome
            again = self.sent.after(welcome.received)
            self._room.set()
            self.received.acked = welcome.next - 1  # what the relay knows the client has
            self.editor.log.info("resumed", gap_seconds=round(gap, 3), messages_resent=len(again))
            for start in range(0, len(again), RESEND_BATCH):
                chunk = again[start : start + RESEND_BATCH]
                await self._send([message_frame(seq, line) for seq, line in chunk])
            self.attached.set()


def _may_resume(ws: ClientConnection) -> bool:
    """Whether the lost socket may be resumed: the relay did not close it (see
    :func:`relay.core.editorerrors.resumable`)."""
    close = ws.protocol.close_rcvd
    return resumable(None if close is None else Close(int(close.code), close.reason))
