"""One connection: an agent process and its state, carried over the socket attached to it.

A :class:`Connection` is the logical connection: the agent process, the state of its
pumps, the session-opening rewrite, and its observer (logs, counters, trace). An
:class:`Attachment` is one WebSocket attached to it. Today a connection has exactly
one attachment and ends with it; the connection is what outlives a socket once
resuming is possible.

The pumps of :mod:`relay.streams.pump` run between the attachment and the agent's pipes. What
ends the connection and how is decided by the pure table of :mod:`relay.core.ending`;
this module only carries the steps out.
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

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from relay.acp.rewrite import SessionRewriter
from relay.config.resolved import RelayConfig
from relay.connections.agent import AgentProcess, AgentStartError, Guard, drain_stderr
from relay.core.ending import (
    CloseSocket,
    Detach,
    End,
    FlushOutput,
    Happened,
    StopAgent,
    StopChildren,
    Wait,
    Warn,
    ending,
    what_happened,
)
from relay.core.exits import Exit
from relay.core.framing import close_reason
from relay.core.outcome import judge_client_frame
from relay.core.tickets import Claims
from relay.observe.logs import get_logger
from relay.observe.observer import ConnectionObserver, Peer
from relay.observe.stats import RelayStats
from relay.observe.tracewriter import ConnectionTrace
from relay.streams.pump import (
    Ended,
    FrameSink,
    TextFrames,
    frames_to_lines,
    lines_to_frames,
    stall_timeout,
)

if TYPE_CHECKING:
    from relay.connections.warmagents import WarmAgents

STDOUT_EOF_EXIT_WAIT = 0.2  # seconds an agent that closed its stdout has to exit by itself
STDOUT_DRAIN_CHUNK = 1 << 16  # bytes read at a time from a stdout nobody listens to


class Attachment:
    """One WebSocket attached to a connection: who is on it and how to close it."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws

    @property
    def remote(self) -> str:
        """The client's address as ``host:port``."""
        address = self.ws.remote_address
        if isinstance(address, Sequence) and len(address) >= 2:
            return f"{address[0]}:{address[1]}"
        return str(address)

    @property
    def path(self) -> str:
        """The request target of the upgrade (query string included: redact before logging)."""
        request = self.ws.request
        return request.path if request is not None else ""

    @property
    def close_code(self) -> int | None:
        code = self.ws.close_code
        return None if code is None else int(code)

    @property
    def close_reason(self) -> str | None:
        return self.ws.close_reason

    async def close(self, code: int, reason: str) -> None:
        """Close the socket, the reason cut to what RFC 6455 allows."""
        await self.ws.close(code, close_reason(reason))


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


async def launch_agent(config: RelayConfig, guard: Guard | None = None) -> AgentProcess:
    """Start the configured agent (watched by ``guard``, as ``--agent-user`` if given): a
    connection's own (cold) start, and each warm agent's."""
    return await AgentProcess.start(
        config.agent_argv,
        cwd=config.workspace,
        env=config.agent_env,
        guard=guard,
        account=config.agent_account,
    )


class Connection:
    """One agent process for one client, from the agent's start to both being gone."""

    def __init__(
        self, conn_id: str, claims: Claims, config: RelayConfig, context: RelayContext
    ) -> None:
        self.conn_id = conn_id
        self.claims = claims
        self.config = config
        self.agents = context.agents
        self.warm = context.warm
        self.shutting_down = context.shutting_down
        self.guard = context.guard
        stats = context.stats
        log = get_logger("relay.session", connection_id=conn_id)
        trace = None
        if config.trace_dir is not None:
            trace = ConnectionTrace.open(config.trace_dir, conn_id, config.trace_max_bytes, log)
        self.stats = stats
        self.observer = ConnectionObserver(conn_id, log, trace, stats)
        self.rewriter = SessionRewriter(config.rewrite, exists=os.path.isdir)
        rewrite = self.rewriter.client_line if config.rewrite is not None else None
        self.judge = partial(judge_client_frame, rewrite=rewrite)
        self.stdout_done = asyncio.Event()  # stdout read to its end, or the socket gone
        self.stdout_eof = asyncio.Event()  # the agent's stdout ended and all of it was sent
        self.agent_stdout = IdleClock()  # how long the pump has waited on an empty stdout
        self.exit: Exit | None = None  # the agent's, once it is gone
        self.resumable = (
            False  # a lost socket ends the connection (see relay.connections.resumable)
        )
        # A send on which nothing drains this long means the peer is gone (see TextFrames).
        self.stall_timeout = stall_timeout(config.ping_interval, config.ping_timeout)

    async def start_agent(self, attachment: Attachment) -> AgentProcess | str:
        """Take a warm agent, else start one (logged, traced, registered); why not, if it
        could not start."""
        peer = Peer(attachment.remote, self.claims.sub, attachment.path)
        agent = None if self.warm is None else await self.warm.take()
        if agent is None:
            started = time.monotonic()
            try:
                agent = await launch_agent(self.config, self.guard)
            except AgentStartError as exc:
                self.observer.start_failed(str(exc), peer, self.config.agent_argv)
                return str(exc)
            if self.stats is not None:
                self.stats.agent_start.observe(time.monotonic() - started)
        self.observer.opened(peer, self.config.agent_argv, agent.pid)
        self.agents.add(agent)
        return agent

    async def run(self, attachment: Attachment) -> None:
        """Start the agent, pump until something ends the connection, end it; log."""
        try:
            agent = await self.start_agent(attachment)
            if isinstance(agent, str):
                await self._carry_out(Happened.START_FAILED, None, attachment, agent)
                return
            try:
                await self._pump(agent, attachment)
            finally:
                self.agents.discard(agent)
        finally:
            self.observer.closed(self.exit, attachment.close_code, attachment.close_reason)

    async def _pump(self, agent: AgentProcess, attachment: Attachment) -> None:
        stderr = asyncio.create_task(drain_stderr(agent.stderr, self.observer.agent_stderr))
        to_agent = asyncio.create_task(self._client_to_agent(agent, attachment))
        to_client = asyncio.create_task(self._agent_to_client(agent, attachment))
        try:
            await self._supervise(agent, attachment, (to_agent, to_client))
        finally:
            to_agent.cancel()
            to_client.cancel()
            await asyncio.gather(to_agent, to_client, return_exceptions=True)
            await bounded_wait(stderr, self.config.kill_grace)
            agent.release()

    async def _client_to_agent(self, agent: AgentProcess, attachment: Attachment) -> None:
        ws = attachment.ws
        ended = await frames_to_lines(ws, agent.stdin, judge=self.judge, observer=self.observer)
        if ended is Ended.PIPE_CLOSED:
            # The agent takes nothing more. Keep reading, so that a close from the client is
            # seen at once rather than after the close timeout, and drop what comes.
            with suppress(ConnectionClosed):
                async for _ in ws:
                    self.observer.client_dropped()

    async def _agent_to_client(self, agent: AgentProcess, attachment: Attachment) -> None:
        frames = TextFrames(attachment.ws, self.stall_timeout, self.observer.send_stalled)
        with suppress(ConnectionClosed):
            await self._agent_lines(agent, frames)
        # Socket gone or stdout closed: keep draining so the agent never blocks on a full pipe.
        while await agent.stdout.read(STDOUT_DRAIN_CHUNK):
            pass

    async def _agent_lines(self, agent: AgentProcess, sink: FrameSink) -> None:
        """The agent's stdout, line by line, into ``sink`` until it ends (``stdout_eof``)
        or the sink fails; ``stdout_done`` either way."""
        inspect = self.rewriter.agent_line if self.rewriter.watches_agent else None
        try:
            await lines_to_frames(
                self.agent_stdout.watch(agent.stdout),
                sink,
                max_bytes=self.config.max_message_bytes,
                observer=self.observer,
                inspect=inspect,
            )
            self.stdout_eof.set()
        finally:
            self.stdout_done.set()

    async def _supervise(
        self,
        agent: AgentProcess,
        attachment: Attachment,
        pumps: tuple[asyncio.Task[Any], asyncio.Task[Any]],
    ) -> None:
        """Wait for what ends the connection (:func:`relay.core.ending.what_happened`), end it."""
        exited = asyncio.create_task(agent.wait())
        closed = asyncio.create_task(attachment.ws.wait_closed())
        eof = asyncio.create_task(self.stdout_eof.wait())
        crashed = asyncio.create_task(first_failure(pumps))
        watched = {exited, closed, eof, crashed}
        waited = False
        try:
            while True:
                happened = what_happened(
                    relay_failed=crashed.done(),
                    agent_exited=exited.done(),
                    socket_closed=closed.done(),
                    stdout_ended=eof.done(),
                    waited=waited,
                )
                if happened is None:
                    await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                elif happened is Wait.FOR_EXIT:
                    # Agents close stdout as they exit: give the exit a moment to arrive.
                    await asyncio.wait({exited, closed}, timeout=STDOUT_EOF_EXIT_WAIT)
                    waited = True
                else:
                    break
            detail = self._failure(happened, crashed)
            if happened is Happened.AGENT_EXITED:
                self.exit = exited.result()
            await self._carry_out(happened, agent, attachment, detail, closed)
        finally:
            for task in watched:
                task.cancel()

    def _failure(self, happened: Happened, crashed: asyncio.Task[BaseException]) -> str:
        """The close reason's detail when the relay's own task failed (logged); else ""."""
        if happened is not Happened.RELAY_FAILED:
            return ""
        error = crashed.result()
        self.observer.relay_failed(error)
        return type(error).__name__

    async def _carry_out(
        self,
        happened: Happened,
        agent: AgentProcess | None,
        attachment: Attachment | None,
        detail: str,
        closed: asyncio.Task[None] | None = None,
    ) -> End | Detach | None:
        """Carry out the steps :func:`relay.core.ending.ending` gives; the End or Detach among them.

        None when the steps neither end nor detach the connection (it goes on as it was).
        A resumable connection whose socket goes during a flush detaches instead.
        """
        children: asyncio.Task[None] | None = None
        steps = ending(
            happened,
            shutting_down=self.shutting_down(),
            detail=detail,
            resumable=self.resumable,
            attached=attachment is not None,
        )
        try:
            for step in steps:
                if isinstance(step, Warn):
                    self.observer.warn(step.event)
                elif isinstance(step, StopAgent):
                    assert agent is not None
                    self.exit = await agent.stop(self.config.kill_grace, eof_first=step.eof_first)
                elif isinstance(step, StopChildren | FlushOutput):
                    assert agent is not None
                    children = asyncio.create_task(agent.stop_children(self.config.kill_grace))
                    if isinstance(step, FlushOutput):
                        await self._flush(children, closed)
                        if self.resumable and not self._still_attached():
                            return Detach()
                elif isinstance(step, CloseSocket) and attachment is not None:
                    await self._close(attachment, step)
                elif isinstance(step, End | Detach):
                    return step
            return None
        finally:
            if children is not None:
                await children

    async def _flush(self, children: asyncio.Task[None], closed: asyncio.Task[None] | None) -> None:
        """Wait until what the agent wrote has been sent, or the socket is gone.

        The flush ends with the end of stdout, which comes once the agent's process group
        is gone. A process that left the group may hold stdout open for ever: once the
        group is gone, the wait ends when the relay has waited ``kill_grace`` on an
        empty pipe.
        """
        assert closed is not None
        grace = self.config.kill_grace
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
        finally:
            flushed.cancel()

    def _still_attached(self) -> bool:
        """Whether a socket is attached now (a plain connection's always is, until it ends)."""
        return True

    async def _close(self, attachment: Attachment, step: CloseSocket) -> None:
        if step.code is not None and step.reason is not None:
            await attachment.close(step.code, step.reason)
        elif self.exit is not None:
            await attachment.close(self.exit.close_code, self.exit.reason)


class IdleClock:
    """Times the waits of a reader on an empty pipe: how long has it waited, right now?"""

    def __init__(self) -> None:
        self._since: float | None = None
        self._reader: asyncio.StreamReader | None = None

    def watch(self, reader: asyncio.StreamReader) -> IdleClock:
        self._reader = reader
        return self

    async def read(self, n: int) -> bytes:
        """``reader.read(n)``, timed."""
        assert self._reader is not None
        self._since = time.monotonic()
        try:
            return await self._reader.read(n)
        finally:
            self._since = None

    def idle_for(self) -> float:
        """Seconds the current read has waited; 0 when no read is waiting."""
        return 0.0 if self._since is None else time.monotonic() - self._since


async def first_failure(tasks: Sequence[asyncio.Task[Any]]) -> BaseException:
    """The exception of the first of ``tasks`` to fail; waits for ever if none does."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                return error
    await asyncio.Future()  # every pump ended normally: nothing to report, ever
    raise AssertionError("unreachable")


async def bounded_wait(task: asyncio.Task[None], seconds: float) -> None:
    try:
        await asyncio.wait_for(task, max(seconds, 0.1))
    except Exception:  # TimeoutError included
        task.cancel()
