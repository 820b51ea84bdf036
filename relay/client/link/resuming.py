"""The client's side of the resume profile: one logical connection over successive sockets.

When the relay selects ``acp-relay.resume.v1``, :class:`ResumingLink` carries the
client's lines (``connect``'s editor's, or a chat thread's) as numbered messages and the
relay's records back as lines, acknowledging them. When the socket is lost without a
close frame from the relay (a reset, an EOF, a heartbeat or a send that went unanswered),
it reconnects with backoff and jitter, with a fresh ticket each time, for as long as the
relay's advertised grace allows; the editor notices a pause only: what it writes
meanwhile is kept (bounded, then its pipe waits) and delivered once after the resume, and
the records it missed are replayed without gaps or duplicates. Only when resuming fails
does it get the bridge's JSON-RPC errors.

A relay that breaks the profile (a binary frame, a frame that is not UTF-8, a bad header
or welcome) gets the profile's close and is not resumed: the same frames would come
again. A relay that welcomes a resume and drops it at once does not restart the grace,
and is resumed ever more slowly (:class:`relay.core.windows.Outage`). While resuming,
the editor's stop or end of stdin is watched too: nothing owed, connect ends at once.

The frames and the bookkeeping are :mod:`relay.core.resumeprofile`'s; this module does the I/O.
The client's side (the editor's stdin and stdout and the answers it is owed, or a chat
thread) is seen through :class:`relay.client.link.ends.ClientSide`: what the link needs of
it, and no more. The link is opened by :mod:`relay.client.link.opening`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import replace

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay.acp.outcome import Forward, judge_text
from relay.client.link.dialing import RESUMABLE_OR_PLAIN, close_failure, dial, ticket_for
from relay.client.link.editorerrors import (
    RELAY_BROKE,
    Close,
    Failure,
    cannot_connect,
    could_not_resume,
    resumable,
)
from relay.client.link.ends import ClientSide
from relay.core.framing import close_reason
from relay.core.resumeprofile import (
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
from relay.core.subprotocols import SocketKind
from relay.core.windows import Outage, Received, Sent
from relay.observe import logs
from relay.observe.tasks import Tasks
from relay.streams.wsadapter import TextFrames, stall_timeout

MAX_KEPT_MESSAGES = 4096  # editor messages kept until the relay acknowledges them
MAX_KEPT_BYTES = 16 * 1024 * 1024
ACK_DELAY = 0.1  # seconds a record's acknowledgement may wait for a message to ride on
RESEND_BATCH = 64  # messages re-sent in one socket write after a resume
FINAL_CLOSES = frozenset({CANNOT_RESUME, *RELAY_BROKE})  # a resume closed so is not retried
NOT_RESUMABLE = "the relay does not offer resuming (acp.v1 selected)"


async def start_profile(ws: ClientConnection, first: dict[str, object]) -> Welcome:
    """Send the profile's first frame on ``ws`` (a socket the relay made resumable) and read
    the relay's welcome.

    Callers bound the wait (the relay answers within its open timeout). A welcome that
    breaks the profile closes ``ws`` with the profile's error before ProfileError is raised.
    """
    await ws.send(json.dumps(first, separators=(",", ":")))
    frame = await ws.recv()  # text is UTF-8, or websockets closes with 1007
    try:
        if isinstance(frame, bytes):
            raise ProfileError("a binary frame")
        return parse_welcome(frame.encode())
    except ProfileError as exc:
        await close_broken(ws, exc)
        raise


async def close_broken(ws: ClientConnection, exc: ProfileError) -> None:
    """Close ``ws`` as the profile says for a peer that broke it (1002, and why)."""
    await ws.close(PROFILE_ERROR, close_reason(f"breaks {PROFILE}: {exc}"))


class ResumingLink:
    """The client's lines over the resume profile, across as many sockets as it takes."""

    def __init__(
        self,
        client: ClientSide,
        ws: ClientConnection,
        welcome: Welcome,
        received: Received | None = None,
    ) -> None:
        self.client = client
        self.tasks = Tasks(client.log)
        self.ws = ws
        self.welcome = welcome
        logs.redactor().add_secret(welcome.secret)
        self.sent = Sent(MAX_KEPT_MESSAGES, MAX_KEPT_BYTES)
        self.received = Received() if received is None else received  # and acknowledged
        self.frames = self._frames(ws)
        self.lines = client.lines_out()
        self.attached = asyncio.Event()
        self.attached.set()
        self._room = asyncio.Event()
        self._room.set()
        self.failed = False  # the link cannot go on: lines waiting for room go back to the client
        self._ack_timer: asyncio.TimerHandle | None = None
        self._sending = asyncio.Lock()  # messages go out in number order, resends first
        self._rng = random.Random()
        self.outage = Outage()
        self.lost_at = ""  # the outage's first loss, as the editor is told it
        self.grace = welcome.grace  # the grace in force at that loss

    # -- the client's lines ---------------------------------------------------------------

    async def send_lines(self, lines: Sequence[bytes]) -> None:
        """Number and keep each line; send it now, or after the resume if no socket is up.

        Past the bound of kept messages, this waits for acknowledgements (the editor then
        waits on its pipe); should the link fail meanwhile, the lines not taken go back to
        the client (:meth:`relay.client.link.ends.ClientSide.unsent`).
        """
        for index, line in enumerate(lines):
            while not self.sent.has_room():
                if self.failed:
                    await self.client.unsent(lines[index:])
                    return
                self._room.clear()
                await self._room.wait()
            async with self._sending:
                seq = self.sent.number(line)
                self.client.note_request(line)
                if self.attached.is_set():
                    await self._send([message_frame(seq, line, self.received.ack())])

    async def _send(self, batch: list[bytes]) -> None:
        """Send on the current socket; a socket that is gone is the receiving side's to see."""
        if batch:
            with suppress(ConnectionClosed):
                await self.frames.send_frames(batch)

    def _frames(self, ws: ClientConnection) -> TextFrames:
        config = self.client.config
        stall = stall_timeout(config.ping_interval, config.ping_timeout)
        return TextFrames(ws, stall, self.client.observer.send_stalled)

    def drop(self) -> None:
        """Abort the socket without a close: the relay keeps the connection for its grace."""
        self.ws.transport.abort()

    # -- the relay's records -------------------------------------------------------------

    async def run(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> bool:
        """Carry the connection until the client is done (True) or it cannot go on (False)."""
        while True:
            ws = self.ws
            lost = await self.client.carry(ws, self._receive(ws), upstream, stop)
            if lost is None:
                return True
            if not _may_resume(ws):
                await self._fail(lost)
                return False
            ended = await self._resume(lost, upstream, stop)
            if ended is not None:
                return ended

    async def _receive(self, ws: ClientConnection) -> bool:
        """Records to the client's lines, in order, each once; acknowledged as they come.

        Returns when the socket goes (True), or when the client's reader is gone (False). A
        frame that breaks the profile closes the socket (1002); text that is not UTF-8 is
        websockets' to refuse (1007).
        """
        try:
            while True:
                frame = await ws.recv()
                if isinstance(frame, bytes):
                    raise ProfileError("a binary frame")
                item = parse_relay_frame(frame.encode())
                if item.ack is not None:
                    self.sent.acknowledge(item.ack)
                    self._room.set()
                if isinstance(item, Ack):
                    continue
                line = self.received.take(item)
                if line is None:
                    continue
                outcome = judge_text(line)
                if isinstance(outcome, Forward) and not await self.lines.write(outcome.line):
                    return False  # the client's reader is gone
                self.client.observer.frame(outcome)
                self._acknowledge_soon(ws)
        except ConnectionClosed:
            self.lines.flush()
        except ProfileError as exc:
            await close_broken(ws, exc)  # the client is told by the close's failure
        return True

    async def _fail(self, failure: Failure) -> None:
        """The link cannot go on: the client is told why; lines waiting for room go back."""
        await self.client.fail(failure)
        self.failed = True
        self._room.set()

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
            self.tasks.spawn(self._send([frame]), "acknowledge the relay's records")

    # -- resuming ----------------------------------------------------------------------------

    async def _resume(
        self, lost: Failure, upstream: asyncio.Task[None], stop: asyncio.Event
    ) -> bool | None:
        """Reconnect within the grace: None once resumed; else what :meth:`run` returns,
        True when the client was done first, False when resuming failed (client told)."""
        self.attached.clear()
        if self.outage.lost(time.monotonic(), self.welcome.grace):
            self.lost_at, self.grace = time.strftime("%H:%M:%S"), self.welcome.grace
            self.client.log.warning(
                "lost the relay, resuming", reason=lost.message, grace=self.grace
            )
        else:
            self.client.log.warning(
                "lost the relay again right after resuming: resuming more slowly",
                reason=lost.message,
                quick_losses=self.outage.flaps,
            )
        attempts = asyncio.create_task(self._attempts(lost))
        gone = asyncio.create_task(self.client.client_gone(upstream, stop))
        try:
            await asyncio.wait({attempts, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (attempts, gone):
                task.cancel()
            await asyncio.gather(attempts, gone, return_exceptions=True)
        if not attempts.cancelled():
            result = attempts.result()
            if isinstance(result, Failure):
                await self._fail(result)
                return False
            await self._resumed(result)
            return None
        why = gone.result()
        self.client.log.warning("gave up resuming: the editor is done", reason=why)
        await self.client.answer_owed(why)
        return True

    async def _attempts(self, lost: Failure) -> Failure | tuple[ClientConnection, Welcome]:
        """Attempts with backoff until one resumes or the outage's grace is over (why)."""
        outage, why = self.outage, lost
        while (left := outage.left(time.monotonic())) > 0:
            await asyncio.sleep(min(outage.pause(self._rng.random()), left))
            result = await self._try_resume()
            if not isinstance(result, Failure):
                return result
            why = result
            if result.data.get("closeCode") in FINAL_CLOSES:
                break  # the relay no longer has the connection, or it or connect broke it
        return could_not_resume(self.client.config.url, self.lost_at, self.grace, why)

    async def _try_resume(self) -> Failure | tuple[ClientConnection, Welcome]:
        config = self.client.config
        ticket = await ticket_for(config)
        if isinstance(ticket, Failure):
            return ticket
        self.client.ticket_fetched(ticket)
        first = {
            "type": "resume",
            "connection": self.welcome.connection,
            "secret": self.welcome.secret,
            "ack": self.received.last,
            "sent": self.sent.last,
        }
        dialed = await dial(config, ticket, RESUMABLE_OR_PLAIN)
        if isinstance(dialed, Failure):
            return dialed
        ws = dialed.ws
        if dialed.kind is not SocketKind.RESUMABLE:  # a relay that no longer resumes
            await ws.close(CloseCode.NORMAL_CLOSURE)
            return _broke_profile(cannot_connect(config.url, "handshake", NOT_RESUMABLE))
        try:
            async with asyncio.timeout(config.open_timeout):
                return ws, await start_profile(ws, first)
        except ConnectionClosed as exc:
            close = exc.rcvd
            if close is None:
                return close_failure(ws, config)
            return Failure(
                f"the relay refused to resume: {close.reason or close.code}",
                {
                    "url": config.url,
                    "cause": "resume",
                    "closeCode": int(close.code),
                    "closeReason": close.reason,
                },
            )
        except ProfileError as exc:  # the socket is closed with 1002
            return _broke_profile(cannot_connect(config.url, "handshake", str(exc)))
        except TimeoutError:
            ws.transport.abort()
            return cannot_connect(config.url, "handshake", "no welcome")
        except asyncio.CancelledError:  # the client is gone: this socket goes too
            ws.transport.abort()
            raise

    async def _resumed(self, opened: tuple[ClientConnection, Welcome]) -> None:
        """The new socket carries on: what the relay lacks first, then whatever comes."""
        ws, welcome = opened
        now = time.monotonic()
        gap = now - (self.outage.began or now)
        self.outage.resumed(now)
        async with self._sending:
            self.ws, self.frames, self.welcome = ws, self._frames(ws), welcome
            logs.redactor().add_secret(welcome.secret)
            self.client.welcomed(welcome)  # before anything is sent on the new socket
            again = self.sent.after(welcome.received)
            self._room.set()
            self.received.acked = welcome.next - 1  # what the relay knows the client has
            self.client.log.info("resumed", gap_seconds=round(gap, 3), messages_resent=len(again))
            for start in range(0, len(again), RESEND_BATCH):
                chunk = again[start : start + RESEND_BATCH]
                await self._send([message_frame(seq, line) for seq, line in chunk])
            self.attached.set()


def _may_resume(ws: ClientConnection) -> bool:
    """Whether the lost socket may be resumed: the relay did not close it, nor connect for
    what the relay sent (see :func:`relay.client.link.editorerrors.resumable`)."""
    received, sent = ws.protocol.close_rcvd, ws.protocol.close_sent
    return resumable(
        None if received is None else Close(int(received.code), received.reason),
        None if sent is None else Close(int(sent.code), sent.reason),
    )


def _broke_profile(failure: Failure) -> Failure:
    """``failure`` as a resume the profile ended (1002): not tried again."""
    return replace(failure, data={**failure.data, "closeCode": PROFILE_ERROR})
