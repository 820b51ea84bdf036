"""relay.server.agents.starting: a connection's agent started (or why not), as real processes."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from relay.observe import logs
from relay.observe.observer import ConnectionObserver, Peer
from relay.observe.stats import RelayStats
from relay.server.agents.process import AgentProcess
from relay.server.agents.starting import NotStarted, RelayContext, start_agent
from tests.support.live import relay_config

PEER = Peer("127.0.0.1:5", "tester", "/acp")


async def test_an_agent_started_cold_is_registered_logged_and_counted() -> None:
    """With no warm agents, the agent is started, joins the relay's registry, and its start
    is logged with its pid and counted."""
    context = RelayContext(agents=set(), stats=RelayStats())
    observer = ConnectionObserver("c1", logs.get_logger("test.starting"))
    with capture_logs() as events:
        agent = await start_agent(relay_config(), context, observer, PEER)
    assert isinstance(agent, AgentProcess)
    try:
        assert context.agents == {agent}
        assert [e["agent_pid"] for e in events if e["event"] == "connection opened"] == [agent.pid]
        assert context.stats is not None
        assert sum(context.stats.agent_start.counts) == 1
    finally:
        async with asyncio.timeout(10):
            await agent.stop(0.5)
        agent.release()


async def test_an_agent_that_cannot_start_says_why_and_is_not_registered() -> None:
    """A command that cannot run gives NotStarted with the fixable reason, logged as an
    error; nothing joins the registry."""
    context = RelayContext(agents=set())
    observer = ConnectionObserver("c1", logs.get_logger("test.starting"))
    config = relay_config(("no-such-agent-xyz",))
    with capture_logs() as events:
        started = await start_agent(config, context, observer, PEER)
    assert started == NotStarted("no-such-agent-xyz: command not found (check --agent and PATH)")
    assert context.agents == set()
    failed = [e for e in events if e["event"] == "agent failed to start"]
    assert [(e["log_level"], e["reason"]) for e in failed] == [("error", started.why)]
