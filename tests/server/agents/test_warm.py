"""Warm agents (relay.server.agents.warm): real agents started ahead of demand, taken,
crashing, recycled."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, MutableMapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from structlog.testing import capture_logs
from websockets.asyncio.client import ClientConnection, connect

from relay.observe.stats import RelayStats
from relay.server.agents.process import AgentProcess, launch_agent
from relay.server.agents.warm import (
    WAITING_STDERR_LINES,
    WarmAgents,
    _WaitingStderr,
)
from relay.server.agents.warmplan import WarmPolicy
from tests.support.agents import ECHO_AGENT, SLOW_START, STUBBORN, python_agent
from tests.support.live import live_relay, relay_config
from tests.support.processes import children_of, pid_alive
from tests.support.resume import ResumeClient
from tests.support.sockets import closed_with
from tests.support.waiting import until, until_gone

CRASHING = python_agent("import sys\nprint('no credentials found', file=sys.stderr)\nsys.exit(3)")
Events = Sequence[MutableMapping[str, Any]]


async def initialize(ws: ClientConnection) -> dict[str, Any]:
    """Send ``initialize`` and return the agent's reply."""
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
    async with asyncio.timeout(10):
        reply: dict[str, Any] = json.loads(await ws.recv())
    return reply


def logged(events: Events, event: str) -> list[MutableMapping[str, Any]]:
    """The captured log events named ``event``."""
    return [each for each in events if each["event"] == event]


def ready_line_logged(events: Events) -> bool:
    """Whether a waiting slow_start agent said on stderr that its start is over."""
    return any("ready after" in each["line"] for each in logged(events, "warm agent stderr"))


def pids(agents: set[AgentProcess]) -> set[int]:
    return {agent.pid for agent in agents}


@asynccontextmanager
async def warm_agents(
    agent: Sequence[str], policy: WarmPolicy
) -> AsyncIterator[tuple[WarmAgents, set[AgentProcess], RelayStats]]:
    """A running WarmAgents for ``agent`` (started as a relay would), closed at the end."""
    config = relay_config(agent)
    registry: set[AgentProcess] = set()
    stats = RelayStats()
    warm = WarmAgents(policy, lambda: launch_agent(config), registry, grace=1.0, stats=stats)
    warm.start()
    try:
        yield warm, registry, stats
    finally:
        await warm.close()


async def test_a_socket_takes_the_agent_that_was_ready_and_a_replacement_starts() -> None:
    """The agent that answers a new socket finished its start before the socket opened; a
    new warm agent is started at once in its place."""
    with capture_logs() as events:
        async with live_relay((*SLOW_START, "0.3"), warm_agents=1) as live:
            await until(lambda: ready_line_logged(events), "the warm agent to be ready")
            (waiting,) = pids(live.relay.agents)
            opened = time.time()
            async with connect(live.ticket_url()) as ws:
                reply = await initialize(ws)
                await until(lambda: live.relay.busy_report()["warm"] == 1, "a replacement")
                replacement = pids(live.relay.agents) - {waiting}
    meta = reply["result"]["_meta"]
    assert (meta["pid"], meta["ready"] < opened, len(replacement)) == (waiting, True, 1)
    assert [each["agent_pid"] for each in logged(events, "warm agent taken")] == [waiting]


async def test_a_resumable_connection_takes_a_warm_agent_too() -> None:
    """A socket of the resume profile is served by the waiting agent, like a plain one."""
    with capture_logs() as events:
        async with live_relay((*SLOW_START, "0.3"), warm_agents=1) as live:
            await until(lambda: ready_line_logged(events), "the warm agent to be ready")
            (waiting,) = pids(live.relay.agents)
            client = await ResumeClient.open(live.ticket_url())
            try:
                await client.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x"}).encode())
                async with asyncio.timeout(10):
                    while (record := await client.record()) is None:
                        pass
            finally:
                await client.close()
    assert json.loads(record[1])["result"]["_meta"]["pid"] == waiting


async def test_a_connection_starts_its_agent_cold_when_none_is_ready() -> None:
    """With warm agents crashing, a socket still gets an agent started for it (which here
    crashes too: the close says so, with its last stderr line)."""
    async with live_relay(CRASHING, warm_agents=1) as live, connect(live.ticket_url()) as ws:
        reason = "agent exited with status 3: no credentials found"
        assert await closed_with(ws) == (1011, reason)


async def test_an_agent_crashing_at_start_up_is_retried_with_backoff() -> None:
    """A warm agent that keeps crashing is started again only after a doubling wait, each
    crash logged with its stderr, loudly from the third in a row; never in a tight loop."""
    policy = WarmPolicy(size=1, max_age=0.0, backoff_first=0.05, backoff_max=0.2)
    with capture_logs() as events:
        began = time.monotonic()
        async with warm_agents(CRASHING, policy) as (_, registry, stats):
            await until(lambda: stats.warm.get("ended", 0) >= 5, "five crashes")
            elapsed = time.monotonic() - began
            started = stats.warm["started"]
        crashes = [e for e in events if "crash" in e["event"]]
    assert [e["retry_in"] for e in crashes[:5]] == [0.05, 0.1, 0.2, 0.2, 0.2]
    assert [e["log_level"] for e in crashes[:4]] == ["warning", "warning", "error", "error"]
    assert (crashes[0]["exit_status"], crashes[0]["stderr_tail"]) == (3, ["no credentials found"])
    assert started <= 6  # the fifth end came after four waits: at most one more start
    assert elapsed >= 0.05 + 0.1 + 0.2 + 0.2
    assert registry == set()


async def test_an_agent_that_cannot_start_is_logged_and_retried_later() -> None:
    """An agent program that cannot be executed is a start-up crash too, saying why."""
    policy = WarmPolicy(size=1, max_age=0.0, backoff_first=0.05, backoff_max=0.1)
    with capture_logs() as events:
        async with warm_agents(("/nonexistent/agent",), policy) as (warm, _, stats):
            await until(lambda: warm.pool.crashes >= 2, "two failed starts")
    crash = next(e for e in events if "crash" in e["event"])
    assert (crash["exit_status"], "command not found" in crash["reason"]) == (None, True)
    assert (stats.warm["failed"] >= 2, "started" in stats.warm) == (True, False)


async def test_an_agent_that_waited_its_max_age_is_replaced_by_a_fresh_one() -> None:
    """Past --warm-max-age a waiting agent is stopped and another started in its place."""
    policy = WarmPolicy(size=1, max_age=0.3)
    async with warm_agents(ECHO_AGENT, policy) as (warm, registry, stats):
        await until(lambda: warm.ready == 1, "a warm agent")
        (first,) = pids(registry)
        await until(lambda: warm.ready == 1 and pids(registry) - {first}, "its replacement")
        await until_gone([first])
        assert stats.warm["recycled"] >= 1


async def test_close_stops_waiting_agents_and_their_children() -> None:
    """Shutting down stops every warm agent with its process group, SIGKILL for the stubborn."""
    async with live_relay(STUBBORN, warm_agents=2) as live:
        await until(lambda: len(live.relay.agents) == 2, "two warm agents")
        agents = pids(live.relay.agents)
        await until(lambda: all(children_of(pid) for pid in agents), "their children")
        everyone = [*agents, *(child for pid in agents for child in children_of(pid))]
    await until_gone(everyone, seconds=5)
    assert (live.relay.agents, live.relay.busy_report()["warm"]) == (set(), 0)


async def test_a_waiting_agents_stderr_is_read_so_it_never_blocks() -> None:
    """An agent writing more to stderr than a pipe holds finishes its start while waiting:
    the relay reads and logs its stderr before any socket takes it."""
    noise = 256 * 1024  # four pipes' worth, in 4000-byte lines
    with capture_logs() as events:
        async with live_relay((*SLOW_START, "0", str(noise)), warm_agents=1) as live:
            await until(lambda: ready_line_logged(events), "the agent to be ready", seconds=20)
            opened = time.time()
            async with connect(live.ticket_url()) as ws:
                reply = await initialize(ws)
    assert reply["result"]["_meta"]["ready"] < opened
    assert len(logged(events, "warm agent stderr")) == noise // 4000 + 1


def test_a_waiting_agents_stderr_lines_are_logged_up_to_a_bound() -> None:
    """Past WAITING_STDERR_LINES a waiting agent's lines are counted, the count logged at
    the hand-over; the last few are kept for the log of its end."""
    with capture_logs() as events:
        from relay.observe.logs import get_logger

        stderr = _WaitingStderr(get_logger("test"))
        for number in range(WAITING_STDERR_LINES + 50):
            stderr(f"line {number}")
        stderr.hand_over()
    lines = logged(events, "warm agent stderr")
    hidden = logged(events, "warm agent stderr lines not logged")
    assert (len(lines), [e["lines"] for e in hidden]) == (WAITING_STDERR_LINES, [50])
    assert list(stderr.tail)[-1] == f"line {WAITING_STDERR_LINES + 49}"


async def test_a_live_agent_is_never_handed_out_after_close() -> None:
    """Once closed, take gives nothing: connections start their own agents."""
    async with warm_agents(ECHO_AGENT, WarmPolicy(size=1, max_age=0.0)) as (warm, registry, _):
        await until(lambda: warm.ready == 1, "a warm agent")
        (pid,) = pids(registry)
    assert (await warm.take(), pid_alive(pid)) == (None, False)
