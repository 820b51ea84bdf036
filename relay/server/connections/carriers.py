"""How a connection's frames move over its controlling socket: directly, or replayable.

A :class:`relay.server.connections.connection.Connection` hands the agent's lines to its
carrier and asks it what each frame of a socket means:

- :class:`DirectFrames` (``acp.v1``): each agent line is one text frame on the one
  socket, each client frame one message; the connection ends with its socket.
- :class:`ReplayWindow` (``acp-relay.resume.v1``): each agent line becomes a numbered
  record kept in the replay window until the client acknowledges it, sent to whichever
  socket is attached; client messages are numbered too, and each reaches the agent
  once. What each event means is decided by the pure :class:`relay.core.resumesession.Session`;
  this class reads and sends. The wire format is :mod:`relay.core.resumeprofile`'s, written
  down in ``docs/resume.md``.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

from websockets.exceptions import ConnectionClosed

from relay.acp.outcome import (
    Close,
    Outcome,
    Received,
    Rewrite,
    Skip,
    judge_client_frame,
    judge_client_text,
)
from relay.core.lifecycle import Lifecycle
from relay.core.resumeprofile import (
    FENCED,
    FENCED_REASON,
    PROFILE,
    PROFILE_ERROR,
    Open,
    ProfileError,
    Resume,
    ack_frame,
    record_heads,
)
from relay.core.resumesession import Duplicate, Refused, Session
from relay.observe.observer import ConnectionObserver
from relay.server.connections.attachments import Attachment
from relay.streams.pump import Judge, Reply, wait_while_peer_stays
from relay.streams.wsadapter import TextFrames

ACK_DELAY = 0.05  # seconds a delivery's acknowledgement waits for a record to ride on
MAX_BATCH_FRAMES = 64  # records sent in one socket write
SECRET_BYTES = 32  # a resume secret's randomness: 256 bits
REPLY_ALLOWANCE_SHARE = 4  # the relay's own replies may go a quarter of the window past it
MIN_REPLY_ALLOWANCE = 64 * 1024


class Carrier(Protocol):
    """How a connection's frames move over its controlling socket
    (:mod:`relay.server.connections.carriers`): the sink of the agent's lines, and what a socket's
    frames mean."""

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        """The agent's lines of one read (ConnectionClosed when they cannot go anywhere)."""

    def judge(self, attachment: Attachment, rewrite: Rewrite | None) -> Judge:
        """Turns a frame of ``attachment`` into its outcome."""

    def reply_on(self, attachment: Attachment) -> Reply:
        """Sends the relay's own answer to a frame of ``attachment`` it refused."""

    async def attached(self, attachment: Attachment, first: Open | Resume | None) -> str | None:
        """``attachment`` becomes the controlling socket; why it cannot, if it cannot."""

    async def fence(self, attachment: Attachment) -> None:
        """Close ``attachment``: another socket took the connection over."""

    def detached(self, attachment: Attachment) -> None:
        """``attachment`` is gone."""

    def claim(self, resume: Resume, owner: tuple[str, str | None]) -> bool:
        """Whether ``resume`` may take the connection over (never, without the profile)."""

    async def flush(self, closed: asyncio.Task[None]) -> None:
        """Wait until what the carrier holds was sent, or the socket is ``closed``."""

    def ended(self) -> None:
        """The connection is over."""


class DirectFrames:
    """``acp.v1``: the agent's lines as text frames on the connection's one socket."""

    def __init__(
        self, observer: ConnectionObserver, stall_timeout: float, attachment: Attachment
    ) -> None:
        self.frames = TextFrames(attachment.ws, stall_timeout, observer.send_stalled)

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        await self.frames.send_frames(frames)

    def judge(self, attachment: Attachment, rewrite: Rewrite | None) -> Judge:
        if rewrite is None:
            return judge_client_frame

        def judge(frame: Received) -> Outcome:
            if isinstance(frame, bytes):  # nearly always: a text frame's bytes
                return judge_client_text(frame, rewrite)
            return judge_client_frame(frame, rewrite)

        return judge

    def reply_on(self, attachment: Attachment) -> Reply:
        async def reply(line: bytes) -> bool:
            try:
                await attachment.ws.send(line, text=True)
            except ConnectionClosed:
                return False
            return True

        return reply

    async def attached(self, attachment: Attachment, first: Open | Resume | None) -> str | None:
        return None

    async def fence(self, attachment: Attachment) -> None:
        raise AssertionError("a plain connection has one socket")

    def detached(self, attachment: Attachment) -> None:
        pass

    def claim(self, resume: Resume, owner: tuple[str, str | None]) -> bool:
        return False

    async def flush(self, closed: asyncio.Task[None]) -> None:
        pass  # each line was sent as it was read

    def ended(self) -> None:
        pass


class ReplayWindow:
    """``acp-relay.resume.v1``: the agent's lines kept as numbered records until acknowledged.

    Whether a socket is attached, and for how long none was, it asks the connection's
    ``lifecycle``."""

    def __init__(
        self,
        observer: ConnectionObserver,
        stall_timeout: float,
        session: Session,
        lifecycle: Lifecycle,
    ) -> None:
        self.observer = observer
        self.stall_timeout = stall_timeout
        self.lifecycle = lifecycle
        self.session = session
        self.outbox = self.session.outbox
        self.reply_allowance = max(
            session.outbox.limit // REPLY_ALLOWANCE_SHARE, MIN_REPLY_ALLOWANCE
        )
        self._wake = asyncio.Event()  # a record to send, or an acknowledgement due
        self._room = asyncio.Event()  # acknowledgements made room in the window
        self._progress = asyncio.Event()  # records were sent
        self._ack_timer: asyncio.TimerHandle | None = None  # while a delivery awaits its ack
        self._ack_due = False  # ACK_DELAY passed since a delivery: acknowledge it now
        self._outgoing: _Outgoing | None = None  # the attached socket's sending state
        self._senders: dict[Attachment, asyncio.Task[None]] = {}

    # -- who is attached -------------------------------------------------------------------

    def claim(self, resume: Resume, owner: tuple[str, str | None]) -> bool:
        return self.session.claim(resume, owner)

    async def attached(self, attachment: Attachment, first: Open | Resume | None) -> str | None:
        """Welcome ``attachment`` (a new connection, or a resume), then send it records."""
        session = self.session
        secret = secrets.token_urlsafe(SECRET_BYTES)
        if isinstance(first, Resume):
            resumed = session.resume(first, secret, attached=self.lifecycle.attached)
            if isinstance(resumed, Refused):
                return resumed.reason
            self._room.set()
            welcome, epoch = resumed.welcome, resumed.epoch
            self.observer.resumed(
                gap=self.lifecycle.detached_for(time.monotonic()),
                replayed=resumed.replayed,
                resent=resumed.resent,
                fenced=resumed.fenced,
            )
        else:
            welcome, epoch = session.open(secret)
        with suppress(ConnectionClosed):
            await attachment.ws.send(welcome.frame().decode())
        frames = TextFrames(attachment.ws, self.stall_timeout, self.observer.send_stalled)
        out = self._outgoing = _Outgoing(attachment, frames, welcome.next, epoch)
        self._senders[attachment] = asyncio.create_task(self._send_records(out))
        return None

    async def fence(self, attachment: Attachment) -> None:
        await attachment.close(FENCED, FENCED_REASON)

    def detached(self, attachment: Attachment) -> None:
        sender = self._senders.pop(attachment, None)
        if sender is not None:
            sender.cancel()
        out = self._outgoing
        if out is not None and out.attachment is attachment:
            self._outgoing = None

    def ended(self) -> None:
        self.session.end()
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None

    # -- the client's frames ---------------------------------------------------------------

    def judge(self, attachment: Attachment, rewrite: Rewrite | None) -> Judge:
        """Frames of ``attachment``: acknowledgements applied, each message judged once."""

        def judge(frame: Received) -> Outcome:
            out = self._outgoing
            if out is None or out.attachment is not attachment:
                return Skip("fenced", len(frame))  # a resumed socket took over
            if not isinstance(frame, bytes):
                return Skip("binary", len(frame))
            try:
                taken = self._take(frame)
            except ProfileError as exc:
                return Close(PROFILE_ERROR, f"breaks {PROFILE}: {exc}")
            if taken is None:
                return Skip("acknowledgement", len(frame))
            if isinstance(taken, Duplicate):
                return Skip("duplicate", taken.size)
            return judge_client_text(taken, rewrite)

        return judge

    def _take(self, data: bytes) -> bytes | Duplicate | None:
        outbox = self.outbox
        full = outbox.size >= outbox.limit  # may have no room: acknowledgements may make some
        taken = self.session.take(data)
        if full and outbox.has_room():
            self._room.set()
        if isinstance(taken, bytes) and self._ack_timer is None:
            loop = asyncio.get_running_loop()
            self._ack_timer = loop.call_later(ACK_DELAY, self._acknowledgement_due)
        return taken

    def _acknowledgement_due(self) -> None:
        self._ack_timer = None
        if self.session.delivered > self.session.acked_to_client:
            self._ack_due = True
            self._wake.set()

    def reply_on(self, attachment: Attachment) -> Reply:
        """The relay's own replies are records like the agent's lines, and wait for room
        like them (the socket's reading waits meanwhile), with an allowance of their own
        past the window's limit: a window that the agent's output filled still takes a
        reply, so that the acknowledgements that make room keep being read."""

        async def reply(line: bytes) -> bool:
            outbox, most = self.outbox, self.outbox.limit + self.reply_allowance
            while len(outbox) and outbox.size >= most:
                self._room.clear()
                if not await wait_while_peer_stays(self._room, attachment.ws):
                    return False  # the socket went meanwhile: the pump ends
            outbox.add(line)
            self._wake.set()
            return True

        return reply

    # -- records to the client -------------------------------------------------------------

    async def room(self) -> None:
        """Wait while the window is full (the pump asks before it reads more of a line it has
        begun: a line is held in the window or nowhere, not assembled while it waits)."""
        outbox = self.outbox
        while not outbox.has_room():
            self._room.clear()
            await self._room.wait()

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        """Keep each line as a record, waiting for room before each: the window holds at
        most its limit plus one line. The records are then sent from here when the sender
        is idle, or the sender is woken (and before a wait for room: what is kept must go
        out for acknowledgements to make room)."""
        outbox = self.outbox
        taken = outbox.take(frames)
        while taken < len(frames):  # the window filled up: wait for acks to make room
            self._wake.set()
            while not outbox.has_room():
                self._room.clear()
                await self._room.wait()
            taken += outbox.take(frames, taken)
        out = self._outgoing
        if out is None or out.busy:
            self._wake.set()  # detached, or the sender is at it: it sends these too
            return
        with suppress(ConnectionClosed):  # the socket went: the records wait in the window
            await self._push(out)  # the sender is idle: no hop to its task

    async def _send_records(self, out: _Outgoing) -> None:
        """Records as they come to ``out``'s socket; acknowledgements alone when none comes.

        The task that reads the agent sends the records itself when this one is idle
        (:meth:`_push`, from :meth:`send_frames`); this one sends what is left, the
        relay's own records, and the acknowledgements alone.
        """
        session = self.session
        while self._outgoing is out:  # until a resumed socket fences this one
            self._wake.clear()
            if not out.busy and self.outbox.since(out.cursor, 1):
                await self._push(out)
            elif self._ack_due:  # no record to ride on since the delivery: an ack alone
                self._ack_due = False
                ack = session.ack_alone()
                if ack is not None:
                    await out.attachment.ws.send(ack_frame(ack).decode())
            else:
                await self._wake.wait()

    async def _push(self, out: _Outgoing) -> None:
        """Send the records not sent yet on ``out``'s socket, a batch per write, until none
        is left; one task at a time (``busy``). Raises ConnectionClosed if the socket goes."""
        out.busy = True
        try:
            while self._outgoing is out:
                batch = self.session.batch(out.cursor, MAX_BATCH_FRAMES)
                if not batch.lines:
                    return
                heads = record_heads(batch.first, len(batch.lines), batch.ack)
                await out.frames.send_frames_of(heads, batch.lines)
                out.cursor = batch.first + len(batch.lines)
                self.session.sent_through(out.epoch, out.cursor - 1)
                self._progress.set()
        finally:
            out.busy = False

    async def flush(self, closed: asyncio.Task[None]) -> None:
        """Wait until every record of the agent's output was sent, or the socket is gone."""
        while not self.session.all_sent() and not closed.done():
            self._progress.clear()
            progress = asyncio.create_task(self._progress.wait())
            await asyncio.wait({progress, closed}, return_when=asyncio.FIRST_COMPLETED)
            progress.cancel()


@dataclass(eq=False)
class _Outgoing:
    """Sending records on one attached socket: from which record on, and whether a task
    is at it."""

    attachment: Attachment
    frames: TextFrames
    cursor: int  # the next record to send
    epoch: int  # the session's number for this socket: a fenced one counts for nothing
    busy: bool = False
