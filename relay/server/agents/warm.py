"""Warm agents: started ahead of demand, waiting with stdin open, handed to connections.

The thin I/O side of :mod:`relay.server.agents.warmplan`, which decides what to start, when to retry
and what to recycle; here the agents are started (with the same command, workspace and
environment as a connection's cold start), watched while they wait, and stopped. Nothing
is written to a waiting agent. Its stderr is read and logged while it waits (a bounded
number of lines; the last few go with the log line of an agent that ends while waiting);
its stdout is left in its pipe, for the connection that takes it to carry.

A connection takes the agent that has waited longest (:meth:`WarmAgents.take`) and
owns it from then on, like one it started itself; a replacement is started right after
(a tenth of a second, see :mod:`relay.server.agents.warmplan`).
Every warm agent is in the relay's registry of agents from its start, so the relay's
last-resort kill reaches it, and :meth:`WarmAgents.close` stops every waiting one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field

from relay.config.resolved import RelayConfig
from relay.observe.logs import Logger, get_logger
from relay.observe.stats import RelayStats
from relay.server.agents.process import (
    AgentProcess,
    AgentStartError,
    Guard,
    drain_stderr,
    launch_agent,
)
from relay.server.agents.warmplan import Ended, WarmPolicy, WarmPool

WAITING_STDERR_LINES = 100  # stderr lines logged per waiting agent; the others are counted
STDERR_TAIL = 5  # last stderr lines logged with an agent that ended while waiting
STDERR_AFTER_EXIT = 0.5  # seconds to read what an ended agent left in its stderr pipe

Launch = Callable[[], Awaitable[AgentProcess]]


def relays_warm_agents(
    config: RelayConfig,
    registry: set[AgentProcess],
    stats: RelayStats | None,
    guard: Guard | None = None,
) -> WarmAgents:
    """The warm agents of a relay with ``config``: started like its connections' own."""
    return WarmAgents(
        WarmPolicy(config.warm_agents, config.warm_max_age),
        lambda: launch_agent(config, guard),
        registry,
        grace=config.kill_grace,
        stats=stats,
    )


class WarmAgents:
    """The relay's warm agents: :meth:`start` keeps them coming, :meth:`take` hands one out."""

    def __init__(
        self,
        policy: WarmPolicy,
        launch: Launch,
        registry: set[AgentProcess],
        *,
        grace: float,
        stats: RelayStats | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = WarmPool(policy)
        self.launch = launch
        self.registry = registry
        self.grace = grace
        self.stats = stats
        self.clock = clock
        self.log = get_logger("relay.warm")
        self._waiting: dict[int, _Waiting] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._planner: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def ready(self) -> int:
        """Warm agents waiting for a connection now (what /busy reports as ``warm``)."""
        return 0 if self._closed else self.pool.ready

    def start(self) -> None:
        """Start keeping the pool full, from now until :meth:`close`."""
        self._planner = asyncio.create_task(self._keep_full())
        self._planner.add_done_callback(self._planner_ended)

    async def take(self) -> AgentProcess | None:
        """The agent that has waited longest, now the caller's; None if none is ready."""
        for number in [] if self._closed else self.pool.waiting():
            waiting = self._waiting[number]
            if waiting.agent.returncode is not None:
                continue  # ended meanwhile: its watch reports it
            since = self.pool.take(number, self.clock())
            del self._waiting[number]
            await waiting.stop_watching()
            self._wake.set()
            waited = None if since is None else round(self.clock() - since, 3)
            self.log.info("warm agent taken", agent_pid=waiting.agent.pid, waited=waited)
            waiting.stderr.hand_over()
            self._count("taken")
            return waiting.agent
        return None

    async def close(self) -> None:
        """Stop planning and stop every warm agent with its process group."""
        self._closed = True
        if self._planner is not None:
            self._planner.cancel()
            await asyncio.gather(self._planner, return_exceptions=True)
        waiting = list(self._waiting.values())
        self._waiting.clear()
        stops = [self._stop(each, eof_first=False) for each in waiting]
        await asyncio.gather(*stops, *list(self._tasks), return_exceptions=True)

    # -- keeping the pool full ------------------------------------------------------------

    async def _keep_full(self) -> None:
        while not self._closed:
            plan = self.pool.plan(self.clock())
            for number in plan.retire:
                self._spawn(self._retire(number, self._waiting.pop(number)))
            for number in plan.start:
                self._spawn(self._start(number))
            self._wake.clear()
            timeout = None if plan.wake_at is None else max(0.0, plan.wake_at - self.clock())
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _planner_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.log.error("warm agents: planner failed", exc_info=task.exception())

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _start(self, number: int) -> None:
        started = time.monotonic()
        try:
            agent = await self.launch()
        except AgentStartError as exc:
            self._log_ended(self.pool.start_failed(number, self.clock()), None, str(exc), ())
            self._count("failed")
            self._wake.set()
            return
        if self.stats is not None:
            self.stats.agent_start.observe(time.monotonic() - started)
        self.registry.add(agent)
        self.pool.started(number, self.clock())
        waiting = _Waiting(agent, _WaitingStderr(self.log.bind(agent_pid=agent.pid)))
        self._waiting[number] = waiting
        waiting.watching.add(asyncio.create_task(drain_stderr(agent.stderr, waiting.stderr)))
        waiting.watching.add(self._spawn(self._watch(number, waiting)))
        self._count("started")
        self.log.info("warm agent started", agent_pid=agent.pid)
        if self._closed:  # closed while it started: close() no longer sees it
            del self._waiting[number]
            await self._stop(waiting, eof_first=False)
        self._wake.set()  # its max age (or its start-up window) is a time to plan again

    async def _watch(self, number: int, waiting: _Waiting) -> None:
        """Wait for the agent's exit while it waits; then report, clean up and replace it."""
        exit_ = await waiting.agent.wait()
        ended = self.pool.exited(number, self.clock())
        if ended is None or self._waiting.pop(number, None) is None:
            return
        reading = [task for task in waiting.watching if task is not asyncio.current_task()]
        with suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*reading), STDERR_AFTER_EXIT)
        await waiting.stop_watching()
        await waiting.agent.stop_children(self.grace)
        self._forget(waiting.agent)
        self._log_ended(ended, exit_.returncode, exit_.reason, tuple(waiting.stderr.tail))
        self._count("ended")
        self._wake.set()

    async def _retire(self, number: int, waiting: _Waiting) -> None:
        """Recycle an agent that waited past the policy's maximum age."""
        self.log.info(
            "warm agent recycled", agent_pid=waiting.agent.pid, reason="waited its max age"
        )
        self._count("recycled")
        await self._stop(waiting, eof_first=True)

    async def _stop(self, waiting: _Waiting, *, eof_first: bool) -> None:
        await waiting.stop_watching()
        await waiting.agent.stop(self.grace, eof_first=eof_first)
        self._forget(waiting.agent)

    def _forget(self, agent: AgentProcess) -> None:
        agent.release()
        self.registry.discard(agent)

    def _log_ended(
        self, ended: Ended, status: int | None, why: str, stderr: tuple[str, ...]
    ) -> None:
        fields = {
            "exit_status": status,
            "reason": why,
            "lived": round(ended.lived, 3),
            "stderr_tail": list(stderr),
            "retry_in": round(ended.retry_in, 3),
        }
        if not ended.at_startup:
            self.log.warning("warm agent ended while waiting", **fields)
        elif ended.loud:
            self.log.error(
                "warm agents keep crashing at start-up: retrying with backoff; "
                "connections start their agents cold meanwhile",
                crashes=ended.crashes,
                **fields,
            )
        else:
            self.log.warning("warm agent crashed at start-up", crashes=ended.crashes, **fields)

    def _count(self, event: str) -> None:
        if self.stats is not None:
            self.stats.warm_event(event)


@dataclass
class _Waiting:
    """One warm agent while it waits: the tasks reading its stderr and watching its exit."""

    agent: AgentProcess
    stderr: _WaitingStderr
    watching: set[asyncio.Task[None]] = field(default_factory=set)

    async def stop_watching(self) -> None:
        """Stop reading its stderr (what is unread stays in the pipe) and watching its exit."""
        current = asyncio.current_task()
        tasks = [task for task in self.watching if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.watching.clear()


class _WaitingStderr:
    """A waiting agent's stderr lines: the first ones logged, the rest counted; the last kept."""

    def __init__(self, log: Logger) -> None:
        self.log = log
        self.tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self.shown = 0
        self.hidden = 0

    def __call__(self, text: str) -> None:
        self.tail.append(text)
        if self.shown < WAITING_STDERR_LINES:
            self.shown += 1
            self.log.info("warm agent stderr", line=text)
        else:
            self.hidden += 1

    def hand_over(self) -> None:
        """Say how many lines went unlogged, as the agent passes to a connection."""
        if self.hidden:
            self.log.warning("warm agent stderr lines not logged", lines=self.hidden)
