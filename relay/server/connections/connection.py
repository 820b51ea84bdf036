"""One connection: an agent process and its state, apart from the sockets attached to it.

A :class:`Connection` is the logical connection: the agent process, the state of its
pumps, the session-opening rewrite, and its observer (logs, counters, trace). An
:class:`relay.server.connections.attachments.Attachment` is one WebSocket attached to it. The
controlling socket is the one whose frames reach the agent; how frames move over it is
the connection's *carrier* (:mod:`relay.server.connections.carriers`): directly (``acp.v1``:
the connection ends with its socket) or numbered through a replay window
(``acp-relay.resume.v1``: a lost socket detaches the connection, and another may resume
it within the grace).

Plain and resumable connections have one lifecycle, decided by the pure
:class:`relay.core.lifecycle.Lifecycle`: each thing that happens (the agent started or
exited, its stdout ended, a socket attached or went, a watcher came, the relay stops, a
deadline came) is told to it as an event, and the steps that follow are pulled from its
one list and carried out here (:mod:`relay.server.connections.steps`): those about the
watchers, the log and other sockets as the event is told, the others in order.
:meth:`Connection.live` starts the agent, reads its output into the carrier and carries
out the steps until the end; :meth:`Connection.attach` carries one socket's frames to the
agent until that socket goes; :meth:`Connection.watch` shows a watcher the conversation.
This module keeps no lifecycle state of its own: which socket is the controller, and how
the agent ended, are the lifecycle's; the sockets are only looked up by their number.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING

from websockets.exceptions import ConnectionClosed

from relay.acp.boundary import Boundary
from relay.acp.outcome import Rewrite
from relay.config.resolved import RelayConfig
from relay.core.connectionevents import (
    AgentExited,
    AgentStarted,
    CloseSocket,
    End,
    Event,
    FlushOutput,
    RefuseSocket,
    RefuseWatcher,
    RelayFailed,
    SocketAttached,
    SocketGone,
    StartFailed,
    StdoutEnded,
    StopChildren,
    StopRequested,
    Tick,
    WatcherArrived,
    WatcherLeft,
)
from relay.core.exits import Exit
from relay.core.lifecycle import Lifecycle
from relay.core.resumeprofile import CANNOT_RESUME, NO_CONNECTION, Open, Resume
from relay.core.tickets import Claims
from relay.observe.boundaryrecords import BoundaryRecords
from relay.observe.logs import get_logger
from relay.observe.observer import ConnectionObserver, Peer
from relay.observe.tracewriter import ConnectionTrace
from relay.server.agents.process import AgentProcess, drain_stderr
from relay.server.agents.starting import NotStarted, RelayContext, start_agent
from relay.server.connections.attachments import Attachment
from relay.server.connections.carriers import Carrier
from relay.server.connections.readaside import read_aside
from relay.server.connections.sharing import NO_WATCHING, Watchers, Watching
from relay.server.connections.steps import Answer, CarriesSteps
from relay.server.connections.waits import IdleClock, bounded_wait
from relay.streams.pipewriter import write_lines
from relay.streams.pump import frames_to_lines, lines_to_frames
from relay.streams.wsadapter import socket_end, stall_timeout

if TYPE_CHECKING:
    from relay.streams.pump import Crossed

STDOUT_DRAIN_CHUNK = 1 << 16  # bytes read at a time from a stdout nobody listens to


class Connection(CarriesSteps):
    """One agent process for one client, from the agent's start to both being gone."""

    def __init__(
        self,
        conn_id: str,
        claims: Claims,
        config: RelayConfig,
        context: RelayContext,
        carrier: Callable[[Connection], Carrier],
        first: Attachment,
        *,
        resumable: bool = False,
    ) -> None:
        """``first``: the socket that opened the connection. ``resumable``: the client opted
        in to the resume profile (a socket it loses other than by a clean close detaches the
        connection for ``--resume-grace``)."""
        self.conn_id = conn_id
        self.claims = claims
        self.config = config
        self.context = context
        log = get_logger("relay.session", connection_id=conn_id)
        trace = None
        if config.trace_dir is not None:
            trace = ConnectionTrace.open(config.trace_dir, conn_id, config.trace_max_bytes, log)
        self.observer = ConnectionObserver(conn_id, log, trace, context.stats)
        if config.console:  # what the boundary did, for the dev console to show
            self.observer.boundary = BoundaryRecords()
        self.boundary = Boundary(config.rewrite, exists=os.path.isdir, resolve=os.path.realpath)
        # A send on which nothing drains this long means the peer is gone (see TextFrames).
        self.stall_timeout = stall_timeout(config.ping_interval, config.ping_timeout)
        self.lifecycle = Lifecycle(
            resumable=resumable,
            grace=config.resume_grace if resumable else 0.0,
            most_watchers=config.max_watchers,
            first=first.number,
        )
        self.first = first
        # The sockets the lifecycle names (its controller, the last one), by their number.
        self._sockets: dict[int, Attachment] = {first.number: first}
        self.carrier = carrier(self)
        self.watching: Watchers = NO_WATCHING
        if config.max_watchers > 0:
            self.watching = Watching(
                conn_id,
                self.observer,
                history=config.watch_history,
                tell_controller=self._tell_controller,
                to_agent=self._to_agent,
                left=self._watcher_left,
            )
        self.agent: AgentProcess | None = None
        self.ready = asyncio.Event()  # the agent runs, or could not start: sockets may attach
        self.stdout_done = asyncio.Event()  # stdout read to its end, or the sink failed
        self.agent_stdout = IdleClock()  # how long the pump has waited on an empty stdout
        self.stderr_read: asyncio.Task[None] | None = None  # the agent's stderr, to its end
        self._told = asyncio.Event()  # an event was told: steps to carry out, or a deadline
        self._at_once: set[asyncio.Task[None]] = set()  # steps carried out as they came
        # The lifecycle's answer to the socket being told of (a watcher, a late resume).
        self._answer: Answer | None = None

    @property
    def rewrite(self) -> Rewrite | None:
        """The boundary's look at client lines (paths, capabilities, MCP servers), when the
        relay has one."""
        return self.boundary.client_line if self.config.rewrite is not None else None

    @property
    def controller(self) -> Attachment | None:
        """The socket whose frames reach the agent (the lifecycle's choice), if attached."""
        number = self.lifecycle.controller
        return None if number is None else self._sockets.get(number)

    @property
    def exit(self) -> Exit | None:
        """How the agent ended, once known (the lifecycle's account)."""
        return self.lifecycle.exit

    @property
    def ended(self) -> bool:
        return self.lifecycle.ended

    @property
    def detached(self) -> bool:
        """Whether the connection lives without a controlling socket (waiting for a resume)."""
        return self.lifecycle.detached

    def claim(self, resume: Resume, claims: Claims) -> bool:
        """Whether ``resume`` (with a ticket of ``claims``) may take this connection over."""
        return self.carrier.claim(resume, (claims.sub, claims.aud))

    async def stop(self) -> None:
        """The relay is shutting down: end this connection, even while detached; return once
        its watchers were told why."""
        self.tell(StopRequested())
        await asyncio.gather(*self._at_once, return_exceptions=True)

    # -- the lifecycle ---------------------------------------------------------------------

    def tell(self, event: Event) -> None:
        """Tell the lifecycle what happened; the steps that follow are pulled from its list,
        those about the watchers, the log and other sockets at once, here; the others by
        :meth:`_carry_out`, in order."""
        self.lifecycle.handle(event)
        while (step := self.lifecycle.next_step(in_order=False)) is not None:
            self._now(step)
        self._told.set()

    def _answered(self, answer: Answer) -> None:
        self._answer = answer

    def _take_answer(self) -> Answer:
        """The lifecycle's answer to the socket just told of (told synchronously: its own)."""
        answer, self._answer = self._answer, None
        assert answer is not None
        return answer

    def _fence(self, socket: int) -> None:
        older = self._sockets.get(socket)
        if older is not None:
            asyncio.get_running_loop().create_task(self.carrier.fence(older))

    def _forget_sockets(self) -> None:
        """Drop the sockets the lifecycle no longer names: gone, and not the last one."""
        named = (self.lifecycle.controller, self.lifecycle.closing_socket)
        for number in [number for number in self._sockets if number not in named]:
            del self._sockets[number]

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._at_once.add(task)
        task.add_done_callback(self._at_once.discard)

    async def _carry_out(self, agent: AgentProcess | None) -> None:
        """Carry out the lifecycle's steps in order until its End; between them, wait for
        the next event or the lifecycle's deadline (then tell it the time)."""
        children: asyncio.Task[None] | None = None
        try:
            while True:
                step = self.lifecycle.next_step(in_order=True)
                if step is None:
                    await self._next_event()
                    continue
                if isinstance(step, End):
                    return
                if isinstance(step, StopChildren | FlushOutput) and children is None:
                    assert agent is not None
                    children = asyncio.create_task(agent.stop_children(self.config.kill_grace))
                await self._carry(step, agent, children)
        finally:
            if children is not None:
                await children

    async def _next_event(self) -> None:
        self._told.clear()
        deadline = self.lifecycle.deadline()
        timeout = None if deadline is None else max(deadline - time.monotonic(), 0)
        try:
            async with asyncio.timeout(timeout):
                await self._told.wait()
        except TimeoutError:
            self.tell(Tick(time.monotonic()))

    # -- the agent's side ------------------------------------------------------------------

    async def live(self) -> None:
        """Start the agent, carry until the lifecycle ends the connection, end it; log."""
        first = self.first
        try:
            peer = Peer(first.remote, self.claims.sub, first.path)
            started = await start_agent(self.config, self.context, self.observer, peer)
            if isinstance(started, NotStarted):
                self.tell(StartFailed(started.why))
                self.ready.set()
                await self._carry_out(None)
                return
            self.agent = started
            self.tell(AgentStarted())
            self.ready.set()
            try:
                await self._run(started)
            finally:
                self.context.agents.discard(started)
        finally:
            self.ready.set()
            self.carrier.ended()
            self.observer.crossings(self.boundary.summary())
            closing = self.lifecycle.closing_socket
            last = first if closing is None else self._sockets.get(closing, first)
            self.observer.closed(self.exit, last.close_code, last.close_reason)
            await asyncio.gather(*self._at_once, return_exceptions=True)
            # The connection and its watchers refer to each other: dropped now, both are
            # freed when the connection goes, not at the collector's next full pass.
            self.watching.release()

    async def _run(self, agent: AgentProcess) -> None:
        stderr = asyncio.create_task(drain_stderr(agent.stderr, self.observer.agent_stderr))
        self.stderr_read = stderr
        feeder = asyncio.create_task(self._agent_to_client(agent))
        exited = asyncio.create_task(agent.wait())
        exited.add_done_callback(self._agent_exited)
        try:
            await self._carry_out(agent)
        finally:
            exited.remove_done_callback(self._agent_exited)
            exited.cancel()
            feeder.cancel()
            await asyncio.gather(feeder, exited, return_exceptions=True)
            await bounded_wait(stderr, self.config.kill_grace)
            agent.release()

    def _agent_exited(self, exited: asyncio.Task[Exit]) -> None:
        if not exited.cancelled():
            self.tell(AgentExited(exited.result()))

    async def _agent_to_client(self, agent: AgentProcess) -> None:
        """The agent's stdout, line by line, into the carrier until it ends or the carrier's
        socket goes; then drained, so that the agent never blocks on it."""
        translate = self._agent_lines if self.boundary.watches_agent else None
        try:
            with suppress(ConnectionClosed):
                await lines_to_frames(
                    self.agent_stdout.watch(agent.stdout),
                    self.carrier,
                    max_bytes=self.config.max_message_bytes,
                    observer=self.observer,
                    translate=translate,
                    answer=partial(write_lines, agent.stdin),
                    tap=self.watching.agent_lines_tap,
                )
                self.tell(StdoutEnded(time.monotonic()))
        except Exception as exc:  # a bug of the relay's: the lifecycle ends the connection
            self._failed(exc)
        finally:
            self.stdout_done.set()
        while await agent.stdout.read(STDOUT_DRAIN_CHUNK):
            pass

    def _agent_lines(self, lines: list[bytes]) -> Crossed | Awaitable[Crossed]:
        """The boundary's look at one read of the agent's; awaitable when a line must be
        read that may hold more values than the event loop may spend on between two turns
        (read aside, :mod:`relay.server.connections.readaside`)."""
        costly = self.boundary.costly_reads(lines)
        if not costly:
            return self.boundary.agent_lines(lines)
        return self._agent_lines_read_aside(lines, costly)

    async def _agent_lines_read_aside(self, lines: list[bytes], costly: list[bytes]) -> Crossed:
        read = await read_aside(costly)
        return self.boundary.agent_lines(lines, read)

    def _failed(self, error: Exception) -> None:
        """A task of the relay's own failed (logged with its traceback)."""
        self.observer.relay_failed(error)
        self.tell(RelayFailed(type(error).__name__))

    async def _close(self, step: CloseSocket) -> None:
        attachment = self.controller
        if attachment is None:
            return
        if step.code is not None and step.reason is not None:
            await attachment.close(step.code, step.reason)
        elif self.exit is not None:
            if self.exit.failed and self.stderr_read is not None:  # its last words, all read
                await asyncio.wait({self.stderr_read}, timeout=self.config.kill_grace)
            await attachment.close(self.exit.close_code, self.observer.exit_reason(self.exit))

    # -- a socket's side ---------------------------------------------------------------------

    async def attach(self, attachment: Attachment, first: Open | Resume | None = None) -> None:
        """Carry the frames of ``attachment`` to the agent until the socket goes.

        ``first`` is the resume profile's first frame (None for ``acp.v1``). A socket
        that resumes the connection takes it over from the one before (fenced).
        """
        await self.ready.wait()
        if self.agent is None:  # it did not start: live() says why on the socket
            await attachment.ws.wait_closed()
            return
        if self.lifecycle.ended:  # it ended since the resume was claimed
            await attachment.close(CANNOT_RESUME, NO_CONNECTION)
            return
        problem = await self.carrier.attached(attachment, first)
        if problem is not None:
            await attachment.close(CANNOT_RESUME, problem)
            return
        number = attachment.number
        self._sockets[number] = attachment
        self.tell(SocketAttached(number, resumed=isinstance(first, Resume)))
        try:
            if self.lifecycle.controller != number:  # it ended as the welcome went
                refused = self._take_answer()
                assert isinstance(refused, RefuseSocket)
                await attachment.close(refused.code, refused.reason)
                return
            await self._receive(attachment, self.agent)
        except Exception as exc:  # a bug of the relay's: the lifecycle ends the connection
            self._failed(exc)
            await attachment.ws.wait_closed()
        finally:
            self.carrier.detached(attachment)
            end = socket_end(attachment.ws)  # the lifecycle heeds the controller's alone
            self.tell(SocketGone(number, end.clean, end.why, time.monotonic()))
            self._forget_sockets()

    async def _receive(self, attachment: Attachment, agent: AgentProcess) -> None:
        """The one receive loop: each frame judged (through the carrier), carried out, told."""
        judge = self.watching.controller_judge(
            self.carrier.judge(attachment, self.rewrite), self.claims.sub
        )
        await frames_to_lines(
            attachment.ws,
            agent.stdin,
            judge=judge,
            observer=self.observer,
            reply=self.carrier.reply_on(attachment),
            after_pipe=True,
            tap=self.watching.client_frame_tap,
        )

    async def watch(self, attachment: Attachment, claims: Claims) -> None:
        """A watcher's socket: it sees the conversation until it or the connection goes."""
        self.tell(WatcherArrived())
        answer = self._take_answer()
        if isinstance(answer, RefuseWatcher):
            await attachment.close(answer.code, answer.reason)
            return
        await self.watching.watch(attachment, claims)  # which tells WatcherLeft

    def _watcher_left(self) -> None:
        self.tell(WatcherLeft())

    async def _tell_controller(self, line: bytes) -> None:
        """A line of the relay's own to the controlling socket, if one is attached."""
        controller = self.controller
        if controller is not None:
            await self.carrier.reply_on(controller)(line)

    async def _to_agent(self, lines: Sequence[bytes]) -> None:
        """Lines to the agent from elsewhere than the controller (a watcher's answer)."""
        if self.agent is not None:
            await write_lines(self.agent.stdin, lines)
