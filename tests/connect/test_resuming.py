"""relay.connect.resuming: ``acp-relay connect`` resuming through a network a proxy cuts."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from tests.support.agents import AGENTS, ECHO_AGENT, STREAM, STUBBORN
from tests.support.connect import (
    TICKET_COMMAND,
    Editor,
    editor,
    log_records,
    notification,
    request,
)
from tests.support.env import connect_env
from tests.support.live import live_relay, make_ticket, until_detached, until_idle
from tests.support.netcut import NetCut
from tests.support.waiting import until_gone

FAST = ("--ping-interval", "0.2", "--ping-timeout", "0.3", "--open-timeout", "2")
REFRESHABLE = ("--ticket-command", TICKET_COMMAND, *FAST)


async def lines(ed: Editor, count: int) -> list[bytes]:
    return [await ed.receive_line() for _ in range(count)]


def index(line: bytes) -> int:
    return int(json.loads(line)["params"]["i"])


@pytest.mark.slow
async def test_a_reset_mid_stream_is_a_pause_for_the_editor() -> None:
    """20,000 lines cut by a reset mid-way: the editor reads each once, in order, same agent."""
    total = 20_000
    async with (
        live_relay((*STREAM, str(total), "0.001"), resume_grace=30) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        got = await lines(ed, total // 3)
        net.reset()
        got += await lines(ed, total - len(got))
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    events = [r["event"] for r in log_records(bytes(ed.stderr))]
    assert [index(line) for line in got] == list(range(total))
    assert len({json.loads(line)["params"]["pid"] for line in got}) == 1
    assert "lost the relay, resuming" in events
    assert "resumed" in events


@pytest.mark.slow
async def test_a_silent_drop_is_noticed_and_resumed() -> None:
    """Packets vanish (no reset): heartbeats notice, connect resumes, nothing is lost."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=30, ping_interval=0.2, ping_timeout=0.3) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        await ed.send(notification(1))
        assert (await ed.receive())["params"]["n"] == 1
        net.blackhole()
        await until_detached(live)
        net.restore()
        await ed.send(notification(2))
        assert (await ed.receive())["params"]["n"] == 2
        await ed.close_stdin()
        assert await ed.exit_status() == 0


async def test_attempts_reset_during_the_handshake_are_retried() -> None:
    """While a proxy closes every new connection at once, connect keeps trying, then resumes."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=30) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        await ed.send(notification(1))
        assert (await ed.receive())["params"]["n"] == 1
        net.refusing = True
        net.reset()
        await until_detached(live)
        await asyncio.sleep(0.5)  # the outage under test: attempts meanwhile are closed
        net.refusing = False
        await ed.send(notification(2))
        assert (await ed.receive())["params"]["n"] == 2
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    assert "resumed" in [r["event"] for r in log_records(bytes(ed.stderr))]


@pytest.mark.slow
async def test_requests_written_during_the_outage_are_delivered_once() -> None:
    """What the editor writes while the relay is away reaches the agent once, after the resume."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=30) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        await ed.send(notification(1))
        assert (await ed.receive())["params"]["n"] == 1
        net.blackhole()
        for i in (2, 3, 4):
            await ed.send(notification(i))
        net.reset()
        got = [(await ed.receive())["params"]["n"] for _ in range(3)]
        await ed.send(notification(5))
        got.append((await ed.receive())["params"]["n"])
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    assert got == [2, 3, 4, 5]


@pytest.mark.slow
async def test_an_outage_past_the_grace_answers_the_editor_and_ends_the_agent() -> None:
    """Past the grace the editor's requests get an error saying so; the agent is gone."""
    relay = live_relay(
        (*STREAM, "1"), resume_grace=1, kill_grace=0.3, ping_interval=0.2, ping_timeout=0.3
    )
    async with relay as live:
        net = NetCut(live.relay.port)
        await net.__aenter__()
        url = net.url()
        async with editor(url, *REFRESHABLE, env=connect_env()) as ed:
            pid = json.loads(await ed.receive_line())["params"]["pid"]
            net.blackhole()
            await ed.send(request(7, "session/prompt"))
            await until_detached(live)
            await net.__aexit__()  # nothing listens there any more: every retry fails
            error = await ed.receive()
            await ed.close_stdin()
            assert await ed.exit_status() == 1
        await until_gone([pid], seconds=5)
    assert error["id"] == 7
    message = error["error"]["message"]
    assert message.startswith(f"lost the relay at {url} at ")
    assert "could not resume within 1 s" in message
    assert error["error"]["data"]["cause"] == "resume"


@pytest.mark.slow
async def test_stdin_eof_ends_the_connection_at_once() -> None:
    """The editor closing stdin is a clean 1000: the relay keeps no detached connection."""
    async with live_relay(ECHO_AGENT, resume_grace=60) as live:
        async with editor(live.url(), *REFRESHABLE, env=connect_env()) as ed:
            await ed.send(notification(1))
            assert (await ed.receive())["params"]["n"] == 1
            assert live.relay.busy_report()["connections"] == 1
            await ed.close_stdin()
            assert await ed.exit_status() == 0
        await until_idle(live.relay)


async def test_with_a_one_off_ticket_connect_carries_plain_acp_and_says_so_once() -> None:
    """A ticket given once cannot open a second socket: no profile, and one warning on loss."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=60) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *FAST, env=connect_env(make_ticket())) as ed,
    ):
        await ed.send(request(1))
        assert (await ed.receive())["id"] == 1
        [connection] = live.relay.connections.values()
        assert type(connection).__name__ == "Connection"  # not resumable
        net.reset()
        await ed.send(request(2))
        error = await ed.receive()
        await ed.close_stdin()
        await ed.exit_status()
    warnings = [r["event"] for r in log_records(bytes(ed.stderr)) if r["level"] == "warning"]
    assert error["error"]["data"]["cause"] == "lost"
    assert sum("cannot be resumed" in w for w in warnings) == 1


ASKS = (sys.executable, str(AGENTS / "asks.py"))


@pytest.mark.slow
async def test_a_permission_request_in_flight_at_the_cut_is_answered_after_the_resume() -> None:
    """The agent asked just before the cut; the editor's answer reaches it after the resume."""
    async with (
        live_relay(ASKS, resume_grace=30) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        asked = await ed.receive()
        assert asked["method"] == "session/request_permission"
        net.reset()  # the answer is written while the relay is away
        answer = {"outcome": {"outcome": "selected", "optionId": "allow"}}
        await ed.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
        told = await ed.receive()
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    assert told == {"jsonrpc": "2.0", "method": "answered", "params": answer}


@pytest.mark.slow
async def test_past_the_grace_a_stubborn_agent_and_its_child_are_gone() -> None:
    """An agent ignoring EOF and SIGTERM, and its child, are killed once the grace expires."""
    relay = live_relay(
        STUBBORN, resume_grace=0.5, kill_grace=0.3, ping_interval=0.2, ping_timeout=0.3
    )
    async with relay as live:
        net = NetCut(live.relay.port)
        await net.__aenter__()
        async with editor(net.url(), *REFRESHABLE, env=connect_env()) as ed:
            _, pid, child = (await ed.receive_line()).decode().split()
            await net.__aexit__()  # the network is gone for good
            await ed.send(request(3))
            error = await ed.receive()
            await ed.close_stdin()
            await ed.exit_status()
        await until_gone([int(pid), int(child)], seconds=5)
    assert "could not resume within 0.5 s" in error["error"]["message"]
