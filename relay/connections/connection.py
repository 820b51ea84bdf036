"""One connection: an agent process and its state, apart from the sockets attached to it.

A :class:`Connection` is the logical connection: the agent process, the state of its
pumps, the session-opening rewrite, and its observer (logs, counters, trace). An
:class:`relay.connections.attachments.Attachment` is one WebSocket attached to it. The
controlling socket is the one whose frames reach the agent; how frames move over it is
the connection's *carrier* (:mod:`relay.connections.carriers`): directly (``acp.v1``:
the connection ends with its socket) or numbered through a replay window
(``acp-relay.resume.v1``: a lost socket detaches the connection, and another may resume
it within the grace).

Plain and resumable connections have one lifecycle: :meth:`Connection.live` starts the
agent, reads its output into the carrier and acts on each event until the connection
ends; :meth:`Connection.attach` carries one socket's frames to the agent until that
socket goes. What ends the connection and how is decided by the pure table of
:mod:`relay.core.ending`; this module only carries the steps out.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from websockets.exceptions import ConnectionClosed

from relay.acp.boundary import Boundary
from relay.acp.outcome import Rewrite
from relay.config.resolved import RelayConfig
from relay.connections.agent import (
    AgentProcess,
    AgentStartError,
    Guard,
    drain_stderr,
    launch_agent,
)
from relay.connections.attachments import Attachment
from relay.connections.carriers import Carrier
from relay.connections.waits import IdleClock, bounded_wait, first_failure
from relay.connections.watchers import Watching, ended_reason
from relay.core.ending import (
    CloseSocket,
    Detach,
    End,
    FlushOutput,
    Happened,
    StopAgent,
    StopChildren,
    Wait,
    ending,
    what_happened,
)
from relay.core.exits import Exit
from relay.core.profile import CANNOT_RESUME, Open, Resume
from relay.core.tickets import Claims
from relay.core.watching import DETACHED, RESUMED
from relay.observe.boundaryrecords import BoundaryRecords
from relay.observe.logs import get_logger
from relay.observe.observer import ConnectionObserver, Peer
from relay.observe.stats import RelayStats
from relay.observe.tracewriter import ConnectionTrace
from relay.streams.pipewriter import write_lines
from relay.streams.pump import frames_to_lines, lines_to_frames
from relay.streams.wsadapter import SocketEnd, socket_end, stall_timeout

if TYPE_CHECKING:
    from relay.connections.warmagents import WarmAgents

STDOUT_EOF_EXIT_WAIT = 0.2  # seconds an agent that closed its stdout has to exit by itself
STDOUT_DRAIN_CHUNK = 1 << 16  # bytes read at a time from a stdout nobody listens to


@dataclass(frozen=True)
class RelayContext:
    """What a connection needs of the relay that holds it, passed in explicitly.

    ``agents`` is the relay's registry of running agents (for a last-resort kill),
    ``shutting_down`` tells whether the relay is stopping, ``stats`` counts for /metrics,
    ``guard`` stops the agents should the relay die (:mod:`relay.connections.watchdog`).
    ``warm`` holds the agents started ahead of demand (``--warm-agents``).
    """

    agents: set[AgentProcess]
    shutting_down: Callable[[], bool]
    stats: RelayStats | None = None
    guard: Guard | None = None
    warm: WarmAgents | None = None


class Connection:
    """One agent process for one client, from the agent's start to both being gone."""

    def __init__(
        self,
        conn_id: str,
        claims: Claims,
        config: RelayConfig,
        context: RelayContext,
        carrier: Callable[[Connection], Carrier],
    ) -> None:
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
        self.agent: AgentProcess | None = None
        self.exit: Exit | None = None  # the agent's, once it is gone
        self.started = asyncio.Event()  # the agent runs, or failed to start
        self.ended = False
        self.controller: Attachment | None = None  # the socket whose frames reach the agent
        self.latest: Attachment | None = None  # the last socket attached, for the close line
        self.socket_end: SocketEnd | None = None  # how the controller went, until acted on
        self.failure: BaseException | None = None  # a receive loop's own error (a relay bug)
        self.changed = asyncio.Event()  # a socket came or went, or a stop was asked for
        self.stdout_done = asyncio.Event()  # stdout read to its end, or the sink failed
        self.stdout_eof = asyncio.Event()  # the agent's stdout ended and all of it was sent
        self.agent_stdout = IdleClock()  # how long the pump has waited on an empty stdout
        self.stderr_read: asyncio.Task[None] | None = None  # the agent's stderr, to its end
        self._stop_requested = False
        self.carrier = carrier(self)
        self.watching = Watching(
            conn_id,
            self.observer,
            most=config.max_watchers,
            history=config.watch_history,
            tell_controller=self._tell_controller,
            to_agent=self._to_agent,
        )
        if self.watching.enabled:
            self.observer.conversation = self.watching

    @property
    def rewrite(self) -> Rewrite | None:
        """The boundary's look at client lines (paths, capabilities, MCP servers), when the
        relay has one."""
        return self.boundary.client_line if self.config.rewrite is not None else None

    @property
    def detached(self) -> bool:
        """Whether the connection lives without a controlling socket (waiting for a resume)."""
        resumable = self.carrier.resumable
        return resumable and self.started.is_set() and not self.ended and self.controller is None

    def claim(self, resume: Resume, claims: Claims) -> bool:
        """Whether ``resume`` (with a ticket of ``claims``) may take this connection over."""
        return self.carrier.claim(resume, (claims.sub, claims.aud))

    def request_stop(self) -> None:
        """The relay is shutting down: end this connection even while detached."""
        self._stop_requested = True
        self.changed.set()

    # -- the agent's side ------------------------------------------------------------------

    async def live(self, first: Attachment) -> None:
        """Start the agent, carry until something ends the connection, end it; log."""
        self.controller = self.latest = first
        try:
            agent = await self._start_agent(first)
            self.started.set()
            if isinstance(agent, str):
                await self._carry_out(Happened.START_FAILED, None, agent)
                return
            self.agent = agent
            try:
                await self._run(agent)
            finally:
                self.context.agents.discard(agent)
        finally:
            self.ended = True
            self.started.set()
            self.carrier.ended()
            self.observer.crossings(self.boundary.summary())
            last = self.controller or self.latest or first
            self.observer.closed(self.exit, last.close_code, last.close_reason)
            exit_reason = None if self.exit is None else self.exit.reason
            code, reason = ended_reason(exit_reason, self.context.shutting_down())
            await self.watching.close_all(code, reason)

    async def _start_agent(self, attachment: Attachment) -> AgentProcess | str:
        """Take a warm agent, else start one (logged, traced, registered); why not, if it
        could not start."""
        peer = Peer(attachment.remote, self.claims.sub, attachment.path)
        warm, stats = self.context.warm, self.context.stats
        agent = None if warm is None else await warm.take()
        if agent is None:
            started = time.monotonic()
            try:
                agent = await launch_agent(self.config, self.context.guard)
            except AgentStartError as exc:
                self.observer.start_failed(str(exc), peer, self.config.agent_argv)
                return str(exc)
            if stats is not None:
                stats.agent_start.observe(time.monotonic() - started)
        self.observer.opened(peer, self.config.agent_argv, agent.pid)
        self.context.agents.add(agent)
        return agent

    async def _run(self, agent: AgentProcess) -> None:
        stderr = asyncio.create_task(drain_stderr(agent.stderr, self.observer.agent_stderr))
        self.stderr_read = stderr
        feeder = asyncio.create_task(self._agent_to_client(agent))
        try:
            await self._supervise(agent, feeder)
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
            await bounded_wait(stderr, self.config.kill_grace)
            agent.release()

    async def _agent_to_client(self, agent: AgentProcess) -> None:
        """The agent's stdout, line by line, into the carrier until it ends (``stdout_eof``)
        or the carrier's socket goes; then drained, so that the agent never blocks on it."""
        translate = self.boundary.agent_lines if self.boundary.watches_agent else None
        try:
            with suppress(ConnectionClosed):
                await lines_to_frames(
                    self.agent_stdout.watch(agent.stdout),
                    self.carrier,
                    max_bytes=self.config.max_message_bytes,
                    observer=self.observer,
                    translate=translate,
                    answer=partial(write_lines, agent.stdin),
                )
                self.stdout_eof.set()
        finally:
            self.stdout_done.set()
        while await agent.stdout.read(STDOUT_DRAIN_CHUNK):
            pass

    async def _supervise(self, agent: AgentProcess, feeder: asyncio.Task[None]) -> None:
        """Act on what happens (:func:`relay.core.ending.what_happened`) until the end."""
        exited = asyncio.create_task(agent.wait())
        eof = asyncio.create_task(self.stdout_eof.wait())
        crashed = asyncio.create_task(first_failure([feeder]))
        watched: set[asyncio.Future[Any]] = {exited, eof, crashed}
        waited = exit_seen_detached = stdout_handled = False
        try:
            while True:
                attached = self.controller is not None
                lost = self.socket_end
                happened = what_happened(
                    relay_failed=crashed.done() or self.failure is not None,
                    agent_exited=exited.done() and (attached or not exit_seen_detached),
                    socket_closed=lost is not None and lost.clean,
                    socket_lost=lost is not None and not lost.clean,
                    stdout_ended=eof.done() and not stdout_handled and not exited.done(),
                    waited=waited,
                    grace_expired=not attached and self.carrier.grace_left() <= 0,
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
                    self.observer.stdout_closed()
                self.socket_end = None
                if happened is Happened.GRACE_EXPIRED:
                    self.observer.expired(self.carrier.grace)
                step = await self._carry_out(happened, agent, self._failure(happened, crashed))
                if isinstance(step, End):
                    return
                if isinstance(step, Detach):
                    why = lost.why if lost else "lost"
                    self.observer.detached(why, self.carrier.grace)
                    self.watching.notify(DETACHED, {"reason": why, "grace": self.carrier.grace})
        finally:
            for task in watched:
                task.cancel()

    async def _wait(self, watched: set[asyncio.Future[Any]], for_exit: bool) -> bool:
        """Wait for the next event; True once a stdout EOF has had its moment."""
        self.changed.clear()
        changed = asyncio.create_task(self.changed.wait())
        left = self.carrier.grace_left() if self.controller is None else None
        timeout = None if left is None or left == float("inf") else max(left, 0)
        if for_exit:  # agents close stdout as they exit: give the exit a moment to arrive
            timeout = (
                STDOUT_EOF_EXIT_WAIT if timeout is None else min(timeout, STDOUT_EOF_EXIT_WAIT)
            )
        try:
            await asyncio.wait(
                {*watched, changed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            changed.cancel()
        return for_exit

    def _failure(self, happened: Happened, crashed: asyncio.Task[BaseException]) -> str:
        """The close reason's detail when the relay's own task failed (logged); else ""."""
        if happened is not Happened.RELAY_FAILED:
            return ""
        error = self.failure if self.failure is not None else crashed.result()
        self.observer.relay_failed(error)
        return type(error).__name__

    async def _carry_out(
        self, happened: Happened, agent: AgentProcess | None, detail: str
    ) -> End | Detach | None:
        """Carry out the steps :func:`relay.core.ending.ending` gives; the End or Detach among
        them, or None when the connection goes on as it was. A resumable connection whose
        socket goes during a flush detaches instead."""
        children: asyncio.Task[None] | None = None
        attachment = self.controller
        steps = ending(
            happened,
            shutting_down=self.context.shutting_down(),
            detail=detail,
            resumable=self.carrier.resumable,
            attached=attachment is not None,
        )
        try:
            for step in steps:
                if isinstance(step, StopAgent):
                    assert agent is not None
                    self.exit = await agent.stop(self.config.kill_grace, eof_first=step.eof_first)
                elif isinstance(step, StopChildren | FlushOutput):
                    assert agent is not None
                    children = asyncio.create_task(agent.stop_children(self.config.kill_grace))
                    if isinstance(step, FlushOutput) and attachment is not None:
                        await self._flush(children, attachment)
                        if self.carrier.resumable and self.controller is None:
                            return Detach()
                elif isinstance(step, CloseSocket) and attachment is not None:
                    await self._close(attachment, step)
                elif isinstance(step, End | Detach):
                    return step
            return None
        finally:
            if children is not None:
                await children

    async def _flush(self, children: asyncio.Task[None], attachment: Attachment) -> None:
        """Wait until what the agent wrote has been sent, or the socket is gone.

        The flush ends with the end of stdout, which comes once the agent's process group
        is gone. A process that left the group may hold stdout open for ever: once the
        group is gone, the wait ends when the relay has waited ``kill_grace`` on an
        empty pipe. Then the carrier sends what it still holds.
        """
        grace = self.config.kill_grace
        closed = asyncio.create_task(attachment.ws.wait_closed())
        flushed = asyncio.create_task(self.stdout_done.wait())
        try:
            while not (flushed.done() or closed.done()):
                if not children.done():
                    wanted = {flushed, closed, children}
                    await asyncio.wait(wanted, return_when=asyncio.FIRST_COMPLETED)
                    continue
                idle = self.agent_stdout.idle_for()
                if idle >= grace:
                    self.observer.warn(
                        "agent's stdout held open outside its process group: closing anyway"
                    )
                    break
                await asyncio.wait({flushed, closed}, timeout=grace - idle)
            if not closed.done():
                await self.carrier.flush(closed)
        finally:
            flushed.cancel()
            closed.cancel()

    async def _close(self, attachment: Attachment, step: CloseSocket) -> None:
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
        await self.started.wait()
        if self.agent is None:  # it did not start: live() says why on the socket
            await attachment.ws.wait_closed()
            return
        problem = await self.carrier.attached(attachment, first)
        if problem is not None:
            await attachment.close(CANNOT_RESUME, problem)
            return
        old, self.controller, self.latest = self.controller, attachment, attachment
        if old is not None and old is not attachment:
            asyncio.get_running_loop().create_task(self.carrier.fence(old))
        if isinstance(first, Resume):
            self.watching.notify(RESUMED, {})
        self.socket_end = None
        self.changed.set()
        try:
            await self._receive(attachment, self.agent)
        except Exception as exc:  # a bug of the relay's: live() ends the connection saying so
            self.failure = exc
            self.changed.set()
            await attachment.ws.wait_closed()
        finally:
            self.carrier.detached(attachment)
            if self.controller is attachment:
                self.controller = None
                self.socket_end = socket_end(attachment.ws)
                self.changed.set()

    async def _receive(self, attachment: Attachment, agent: AgentProcess) -> None:
        """The one receive loop: each frame judged (through the carrier), carried out, told."""
        judge = self.carrier.judge(attachment, self.rewrite)
        if self.watching.enabled:
            judge = self.watching.controller_judge(judge, self.claims.sub)
        await frames_to_lines(
            attachment.ws,
            agent.stdin,
            judge=judge,
            observer=self.observer,
            reply=self.carrier.reply_on(attachment),
            after_pipe=True,
        )

    async def _tell_controller(self, line: bytes) -> None:
        """A line of the relay's own to the controlling socket, if one is attached."""
        controller = self.controller
        if controller is not None:
            await self.carrier.reply_on(controller)(line)

    async def _to_agent(self, lines: Sequence[bytes]) -> None:
        """Lines to the agent from elsewhere than the controller (a watcher's answer)."""
        if self.agent is not None:
            await write_lines(self.agent.stdin, lines)
