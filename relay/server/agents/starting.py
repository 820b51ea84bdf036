"""A connection's agent: taken from the warm agents, else started; or why it could not be.

What a connection needs of the relay for it (the registry of running agents, the
watchdog's guard, the warm agents, the counters) comes in explicitly as a
:class:`RelayContext`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.config.resolved import RelayConfig
from relay.observe.observer import ConnectionObserver, Peer
from relay.observe.stats import RelayStats
from relay.server.agents.process import AgentProcess, AgentStartError, Guard, launch_agent

if TYPE_CHECKING:
    from relay.server.agents.warm import WarmAgents


@dataclass(frozen=True)
class RelayContext:
    """What a connection needs of the relay that holds it, passed in explicitly.

    ``agents`` is the relay's registry of running agents (for a last-resort kill),
    ``stats`` counts for /metrics,
    ``guard`` stops the agents should the relay die (:mod:`relay.server.agents.watchdog`).
    ``warm`` holds the agents started ahead of demand (``--warm-agents``).
    """

    agents: set[AgentProcess]
    stats: RelayStats | None = None
    guard: Guard | None = None
    warm: WarmAgents | None = None


@dataclass(frozen=True)
class NotStarted:
    """The agent could not start, and why (said on the socket)."""

    why: str


async def start_agent(
    config: RelayConfig, context: RelayContext, observer: ConnectionObserver, peer: Peer
) -> AgentProcess | NotStarted:
    """Take a warm agent, else start one (logged, traced, registered); why not, if it
    could not start."""
    warm, stats = context.warm, context.stats
    agent = None if warm is None else await warm.take()
    if agent is None:
        started = time.monotonic()
        try:
            agent = await launch_agent(config, context.guard)
        except AgentStartError as exc:
            observer.start_failed(str(exc), peer, config.agent_argv)
            return NotStarted(str(exc))
        if stats is not None:
            stats.agent_start.observe(time.monotonic() - started)
    observer.opened(peer, config.agent_argv, agent.pid)
    context.agents.add(agent)
    return agent
