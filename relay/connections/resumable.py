"""Resumable connections: an agent that outlives a dropped socket (``acp-relay.resume.v1``).

A client that offers the resume profile gets a :class:`ResumableConnection`. Its agent's
output is read into the connection's replay window (:class:`relay.core.profile.Outbox`), not
straight into a socket: each line becomes a numbered record, sent to whichever socket is
attached and kept until the client acknowledges it. When the socket is lost other than
by the client's clean close, the connection is detached: the agent runs on, its output
keeps being read until the window is full (then the agent waits on its pipe), and a new
socket may resume within the grace. Client messages are numbered too, and each is
handed to the agent exactly once, whatever the client re-sends after a resume.

What to do on each event is :func:`relay.core.ending.ending`'s; this module carries it out.
The wire format is :mod:`relay.core.profile`'s, written down in ``docs/resume.md``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ConnectionClosed

from relay.config.resolved import RelayConfig
from relay.connections.agent import AgentProcess, drain_stderr
from relay.connections.connection import (
    Attachment,
    Connection,
    RelayContext,
    bounded_wait,
    first_failure,
)
from relay.core.ending import Detach, End, Happened, Wait, what_happened
from relay.core.outcome import Forward, Refuse, Skip, judge_client_text
from relay.core.profile import (
    NO_CONNECTION,
    PROFILE,
    Ack,
    Open,
    Outbox,
    ProfileError,
    Resume,
    Welcome,
    ack_frame,
    parse_frame,
    records,
)
from relay.core.tickets import Claims
from relay.streams.pipewriter import LineWriter
from relay.streams.pump import PeerWatch, TextFrames, frames_waiting

ACK_DELAY = 0.05  # seconds a delivery's acknowledgement waits for a record to ride on
MAX_BATCH_FRAMES = 64  # records sent in one socket write
FENCED = 4001  # close code: this socket was replaced by a resumed one
FENCED_REASON = "superseded: the connection was resumed on another socket"
CANNOT_RESUME = 4404  # close code: nothing to resume (unknown, expired, wrong secret or subject)
PROFILE_ERROR = 1002  # close code: the client broke the profile
SECRET_BYTES = 32


@dataclass(frozen=True)
class ResumePolicy:
    """How long a detached connection waits, and how much output it keeps unacknowledged."""

    grace: float
    window: int


def new_secret() -> str:
    """A resume secret: 256 random bits, URL-safe (it still never goes in a URL)."""
    return secrets.token_urlsafe(SECRET_BYTES)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class ResumableConnection(Connection):
    """A connection that can be detached from its socket and resumed on another one."""

    def __init__(
        self,
        conn_id: str,
        claims: Claims,
        config: RelayConfig,
        context: RelayContext,
        policy: ResumePolicy,
    ) -> None:
        super().__init__(conn_id, claims, config, context)
        self.resumable = True
        self.policy = policy
        self.outbox = Outbox(policy.window)
        self.delivered = 0  # the last client message handed to the agent
        self.acked_to_client = 0  # the last ``delivered`` the client was told of
        self.sent = 0  # the last record sent on the attached socket
        self.attachment: Attachment | None = None
        self.latest: Attachment | None = None  # the last socket attached, for the close line
        self.agent: AgentProcess | None = None
        self.start_error: str | None = None
        self.started = asyncio.Event()  # the agent runs, or failed to start
        self.ended = False
        self.detached_at: float | None = None
        self.lost: str | None = None  # how the last socket went, until the loss is acted on
        self.closed_clean = False  # the last socket was closed by the client with 1000
        self._secret_digest = b""
        self._changed = asyncio.Event()  # a socket came or went, or the relay is stopping
        self._wake = asyncio.Event()  # a record to send, or an acknowledgement due
        self._ack_timer: asyncio.TimerHandle | None = None  # while a delivery awaits its ack
        self._ack_due = False  # ACK_DELAY passed since a delivery: acknowledge it now
        self._outgoing: _Outgoing | None = None  # the attached socket's sending state
        self._room = asyncio.Event()  # the window has room again
        self._progress = asyncio.Event()  # records were sent
        self._stop_requested = False

    # -- who may resume ------------------------------------------------------------------

    def claim(self, resume: Resume, claims: Claims) -> bool:
        """Whether ``resume`` (with the ticket's ``claims``) may take this connection.

        The secret must match and the ticket be for the same subject and audience. On
        success the secret is spent at once (no await in between), so of two sockets
        resuming together exactly one wins.
        """
        same_owner = (claims.sub, claims.aud) == (self.claims.sub, self.claims.aud)
        secret_ok = hmac.compare_digest(_digest(resume.secret), self._secret_digest)
        if self.ended or not same_owner or not secret_ok:
            return False
        self._secret_digest = b""
        return True

    def request_stop(self) -> None:
        """The relay is shutting down: end this connection even while detached."""
        self._stop_requested = True
        self._changed.set()

    # -- the lifecycle --------------------------------------------------------------------

    async def live(self, first: Attachment) -> None:
        """Start the agent, then act on each event until the connection ends."""
        try:
            try:
                agent = await self.start_agent(first)
            finally:
                self.started.set()
            if isinstance(agent, str):
                self.start_error = agent
                return  # attach() says so on the socket, and closes the observer
            self.agent = agent
            try:
                await self._run(agent)
            finally:
                self.agents.discard(agent)
                last = self.attachment or self.latest or first
                self.observer.closed(self.exit, last.close_code, last.close_reason)
        finally:
            self.ended = True

    async def _run(self, agent: AgentProcess) -> None:
        stderr = asyncio.create_task(drain_stderr(agent.stderr, self.observer.agent_stderr))
        feeder = asyncio.create_task(self._read_agent(agent))
        try:
            await self._supervise_resumable(agent, feeder)
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
            await bounded_wait(stderr, self.config.kill_grace)
            agent.release()

    async def _read_agent(self, agent: AgentProcess) -> None:
        """Agent lines into the window, until stdout ends; waits while the window is full."""
        await self._agent_lines(agent, _Window(self))

    async def _supervise_resumable(self, agent: AgentProcess, feeder: asyncio.Task[None]) -> None:
        exited = asyncio.create_task(agent.wait())
        eof = asyncio.create_task(self.stdout_eof.wait())
        crashed = asyncio.create_task(first_failure([feeder]))
        watched: set[asyncio.Future[Any]] = {exited, eof, crashed}
        waited = exit_seen_detached = stdout_handled = False
        try:
            while True:
                attached = self.attachment is not None
                happened = what_happened(
                    relay_failed=crashed.done(),
                    agent_exited=exited.done() and (attached or not exit_seen_detached),
                    socket_closed=self.closed_clean,
                    socket_lost=self.lost is not None,
                    stdout_ended=eof.done() and not stdout_handled and not exited.done(),
                    waited=waited,
                    grace_expired=not attached and self._grace_left() <= 0,
                    shutdown=self._stop_requested and not attached,
                )
                if happened is None or happened is Wait.FOR_EXIT:
                    waited = await self._wait(watched, happened is Wait.FOR_EXIT) or waited
                    continue
                if happened is Happened.AGENT_EXITED:
                    self.exit = exited.result()
                    exit_seen_detached = not attached
                if happened is Happened.STDOUT_CLOSED:
                    stdout_handled = True
                why = self.lost
                if happened in (Happened.SOCKET_LOST, Happened.SOCKET_CLOSED):
                    self.lost, self.closed_clean = None, False
                detail = self._failure(happened, crashed)
                if happened is Happened.GRACE_EXPIRED:
                    self.observer.expired(self.policy.grace)
                step = await self._carry_out(happened, agent, self.attachment, detail)
                if isinstance(step, End):
                    return
                if isinstance(step, Detach) and self.detached_at is None:
                    self.detached_at = time.monotonic()
                    self.observer.detached(why or self.lost or "lost", self.policy.grace)
        finally:
            for task in watched:
                task.cancel()

    async def _wait(self, watched: set[asyncio.Future[Any]], for_exit: bool) -> bool:
        """Wait for the next event; True once a stdout EOF has had its moment."""
        self._changed.clear()
        changed = asyncio.create_task(self._changed.wait())
        timeout = None if self.attachment is not None else max(self._grace_left(), 0)
        if for_exit:
            timeout = 0.2 if timeout is None else min(timeout, 0.2)
        try:
            await asyncio.wait({*watched, changed}, timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            changed.cancel()
        return for_exit

    def _grace_left(self) -> float:
        if self.detached_at is None:
            return float("inf")
        return self.detached_at + self.policy.grace - time.monotonic()

    # -- a socket ---------------------------------------------------------------------------

    async def attach(self, attachment: Attachment, first: Open | Resume) -> None:
        """Carry this connection over ``attachment`` until the socket goes."""
        await self.started.wait()
        if self.start_error is not None:
            await attachment.close(1011, f"agent failed to start: {self.start_error}")
            self.observer.closed(None, attachment.close_code, attachment.close_reason)
            return
        if isinstance(first, Resume):
            problem = self._resume_problem(first)
            if problem is not None:
                await attachment.close(CANNOT_RESUME, problem)
                return
            self.outbox.acknowledge(first.ack)
            self._room.set()
        start = first.ack + 1 if isinstance(first, Resume) else 1
        old, self.attachment = self.attachment, attachment
        self.latest = attachment
        if old is not None:
            asyncio.get_running_loop().create_task(old.close(FENCED, FENCED_REASON))
        if isinstance(first, Resume):
            self.observer.resumed(
                gap=None if self.detached_at is None else time.monotonic() - self.detached_at,
                replayed=max(self.sent - first.ack, 0),  # sent before, not acknowledged
                resent=max(first.sent - self.delivered, 0),
                fenced=old is not None,
            )
        self.detached_at, self.lost, self.closed_clean = None, None, False
        secret = new_secret()
        self._secret_digest = _digest(secret)
        self.acked_to_client = self.delivered
        self.sent = start - 1
        welcome = Welcome(
            self.conn_id,
            secret,
            resumed=isinstance(first, Resume),
            received=self.delivered,
            next=start,
            grace=self.policy.grace,
            window=self.policy.window,
            last=self.outbox.next_seq - 1,
        )
        with suppress(ConnectionClosed):
            await attachment.ws.send(welcome.frame().decode())
        self._changed.set()
        await self._carry(attachment, start)

    def _resume_problem(self, resume: Resume) -> str | None:
        """Why this resume cannot continue the connection, or None."""
        if self.ended:
            return NO_CONNECTION
        if resume.ack < self.outbox.acked or resume.ack >= self.outbox.next_seq:
            return (
                f"cannot resume: the client has record {resume.ack} and the relay keeps "
                f"{self.outbox.first_seq} to {self.outbox.next_seq - 1}"
            )
        if resume.sent < self.delivered:
            return f"cannot resume: the client sent {resume.sent} messages, the agent has more"
        return None

    async def _carry(self, attachment: Attachment, start: int) -> None:
        sender = asyncio.create_task(self._send_records(attachment, start))
        # A task of its own: each frame then resumes one coroutine, not the handler's chain.
        receiver = asyncio.create_task(self._receive(attachment))
        try:
            how = await receiver
        finally:
            receiver.cancel()
            sender.cancel()
            await asyncio.gather(sender, receiver, return_exceptions=True)
        if self.attachment is attachment:
            self.attachment = None
            self.closed_clean = how == "closed by the client"
            self.lost = None if self.closed_clean else how
            self._changed.set()

    async def _receive(self, attachment: Attachment) -> str:
        """Client frames to the agent until the socket goes; how it went."""
        ws = attachment.ws
        assert self.agent is not None
        waiting = frames_waiting(ws)
        writer = LineWriter(
            self.agent.stdin, peer_gone=PeerWatch(ws), caller_flushes=waiting is not None
        )
        stdin_open = True
        rewrite = self._rewrite
        while True:
            if waiting is not None and writer.batch_open and not waiting():
                writer.flush()  # nothing more is received yet: the batch ends
            try:
                frame = await ws.recv()
            except ConnectionClosed:
                writer.flush()
                return _how_it_went(attachment)
            if self.attachment is not attachment:
                continue  # fenced: a resumed socket took over; this one is being closed
            if isinstance(frame, bytes):
                self.observer.frame(Skip("binary", len(frame)))
                continue
            try:
                message = self._take(frame.encode())
            except ProfileError as exc:
                await attachment.close(PROFILE_ERROR, f"breaks {PROFILE}: {exc}")
                return f"closed by the relay: {exc}"
            if message is None:
                continue
            outcome = judge_client_text(message, rewrite)
            if isinstance(outcome, Forward):
                if stdin_open and not await writer.write(outcome.line):
                    if writer.peer_lost:
                        self.observer.peer_lost()
                        ws.transport.abort()
                        return "lost while the agent's stdin was full"
                    stdin_open = False
                if not stdin_open:
                    self.observer.client_dropped()
                    continue
            elif isinstance(outcome, Refuse):
                self._add_records([outcome.reply])
            self.observer.frame(outcome)

    def _take(self, data: bytes) -> bytes | None:
        """The message of a client frame, if it is one the agent has not had; acks applied."""
        frame = parse_frame(data)
        ack = frame.ack
        if ack is not None and ack >= self.outbox.first_seq:  # an older ack changes nothing
            self.outbox.acknowledge(ack)
            self._room.set()
        if isinstance(frame, Ack):
            return None
        if frame.seq <= self.delivered:
            self.observer.frame(Skip("duplicate", len(frame.message)))
            return None
        if frame.seq != self.delivered + 1:
            raise ProfileError(f"message {self.delivered + 1} is missing (got {frame.seq})")
        self.delivered = frame.seq
        if self._ack_timer is None:  # acknowledged within ACK_DELAY, on a record or alone
            loop = asyncio.get_running_loop()
            self._ack_timer = loop.call_later(ACK_DELAY, self._acknowledgement_due)
        return frame.message

    def _acknowledgement_due(self) -> None:
        self._ack_timer = None
        if self.delivered > self.acked_to_client:
            self._ack_due = True
            self._wake.set()

    @property
    def _rewrite(self) -> Any:
        return self.rewriter.client_line if self.config.rewrite is not None else None

    def _add_records(self, lines: Sequence[bytes]) -> None:
        for line in lines:
            self.outbox.add(line)
        self._wake.set()

    async def _send_records(self, attachment: Attachment, start: int) -> None:
        """Records from ``start`` on to the socket, as they come; acks when nothing comes.

        The task that reads the agent sends the records itself when this one is idle
        (:meth:`_push`, from :class:`_Window`); this one sends what is left, the records
        the relay adds itself, and the acknowledgements alone.
        """
        ws = attachment.ws
        out = self._outgoing = _Outgoing(
            attachment, TextFrames(ws, self.stall_timeout, self.observer.send_stalled), start
        )
        try:
            while True:
                self._wake.clear()
                if not out.busy and self.outbox.since(out.cursor, 1):
                    await self._push(out)
                elif self._ack_due:  # no record to ride on since the delivery: an ack alone
                    self._ack_due = False
                    if self.delivered > self.acked_to_client:
                        self.acked_to_client = self.delivered
                        await ws.send(ack_frame(self.delivered).decode())
                else:
                    await self._wake.wait()
        finally:
            if self._outgoing is out:
                self._outgoing = None

    async def _push(self, out: _Outgoing) -> None:
        """Send the records not sent yet on ``out``'s socket, a batch per write, until none
        is left; one task at a time (``busy``). Raises ConnectionClosed if the socket goes."""
        out.busy = True
        try:
            while self.attachment is out.attachment:
                lines = self.outbox.since(out.cursor, MAX_BATCH_FRAMES)
                if not lines:
                    return
                cursor = max(out.cursor, self.outbox.first_seq)
                ack = self.delivered if self.delivered > self.acked_to_client else None
                batch = records(cursor, lines, ack)
                if ack is not None:
                    self.acked_to_client = ack
                await out.frames.send_frames(batch)
                out.cursor = cursor + len(lines)
                if self.attachment is out.attachment:  # not fenced by a resume meanwhile
                    self.sent = out.cursor - 1
                    self._progress.set()
        finally:
            out.busy = False

    async def _flush(self, children: asyncio.Task[None], closed: asyncio.Task[None] | None) -> None:
        """Wait until every record of the agent's output was sent, or the socket is gone."""
        attachment = self.attachment
        if attachment is None:
            return
        gone = asyncio.create_task(attachment.ws.wait_closed())
        try:
            await super()._flush(children, gone)
            while self.sent < self.outbox.next_seq - 1 and not gone.done():
                self._progress.clear()
                progress = asyncio.create_task(self._progress.wait())
                await asyncio.wait({progress, gone}, return_when="FIRST_COMPLETED")
                progress.cancel()
        finally:
            gone.cancel()

    def _still_attached(self) -> bool:
        return self.attachment is not None


@dataclass
class _Outgoing:
    """Sending records on one attached socket: from which record on, and whether a task
    is at it."""

    attachment: Attachment
    frames: TextFrames
    cursor: int  # the next record to send
    busy: bool = False


class _Window:
    """The sink the agent's lines go into: the connection's window, waiting while it is full."""

    def __init__(self, connection: ResumableConnection) -> None:
        self.connection = connection

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        """Add each line as a record, waiting for room before each: the window holds at most
        its limit plus one line. Once the lines are in, they are sent from here when the
        sender is idle, or the sender is woken (and before a wait for room: what is kept
        must go out for acknowledgements to make room)."""
        connection, outbox = self.connection, self.connection.outbox
        taken = outbox.take(frames)
        while taken < len(frames):  # the window filled up: wait for acks to make room
            connection._wake.set()
            while not outbox.has_room():
                connection._room.clear()
                await connection._room.wait()
            taken += outbox.take(frames, taken)
        out = connection._outgoing
        if out is None or out.busy:
            connection._wake.set()  # detached, or the sender is at it: it sends these too
            return
        with suppress(ConnectionClosed):  # the socket went: the records wait in the window
            await connection._push(out)  # the sender is idle: no hop to its task


def _how_it_went(attachment: Attachment) -> str:
    """How a socket ended, for the detach log line: ``closed by the client`` when clean."""
    close = attachment.ws.protocol.close_rcvd
    if close is None:
        return "lost (no close frame)"
    if close.code == 1000 and attachment.ws.protocol.close_rcvd_then_sent is not False:
        return "closed by the client"
    return f"closed with {close.code}" + (f": {close.reason}" if close.reason else "")
