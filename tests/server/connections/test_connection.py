"""Tests for relay.server.connections.connection: how a connection ends, what it stops and what
it leaves.

A live relay on 127.0.0.1:0 with real agent processes: the agent's exit closes the socket
with its status; the socket's end stops the agent and its children; backpressure holds both
ways; and sessions of every ending leave no fd, task or process behind.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys

import pytest
from structlog.testing import capture_logs
from websockets.asyncio.client import ClientConnection, connect

from relay.core.redaction import Redactor
from relay.core.resumeprofile import CANNOT_RESUME, NO_CONNECTION, Open, Resume
from relay.observe import logs
from relay.observe.observer import ConnectionObserver
from relay.server.agents.process import AgentProcess
from relay.server.connections.attachments import Attachment
from relay.server.connections.connection import Connection
from relay.server.connections.sharing import Watching
from relay.server.http.edge import GuardedConnection
from tests.support.agents import AGENTS, DIES_BY_SIGNAL, FAILS_LOUDLY, STUBBORN
from tests.support.http import upgrade_request
from tests.support.live import live_relay, make_ticket, until_detached, until_idle
from tests.support.netcut import NetCut
from tests.support.processes import agents_running, bytes_written
from tests.support.resume import ResumeClient
from tests.support.sockets import closed_with, one_echo
from tests.support.waiting import until, until_gone, until_steady
from tests.support.watch import Watcher

CAT = ("cat",)
MiB = 1024 * 1024


async def test_agent_exit_status_closes_1011_after_flushing() -> None:
    """Lines the agent wrote arrive, then the socket closes 1011 with its exit status."""
    agent = (sys.executable, str(AGENTS / "exit_with.py"), "3", '{"a":1}', '{"b":2}')
    async with live_relay(agent) as live, connect(live.ticket_url()) as ws:
        async with asyncio.timeout(5):
            assert [await ws.recv(), await ws.recv()] == ['{"a":1}', '{"b":2}']
        assert await closed_with(ws) == (1011, "agent exited with status 3")


async def test_agent_exit_zero_closes_1000() -> None:
    """An agent that exits 0 closes the socket normally."""
    agent = (sys.executable, str(AGENTS / "exit_with.py"), "0")
    async with live_relay(agent) as live, connect(live.ticket_url()) as ws:
        assert await closed_with(ws) == (1000, "agent exited")


async def test_agent_killed_by_signal_is_named() -> None:
    """An agent killed by a signal closes the socket with the signal's name."""
    agent = (sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    async with live_relay(agent) as live, connect(live.ticket_url()) as ws:
        assert await closed_with(ws) == (1011, "agent killed by SIGKILL")


async def test_a_failed_agents_close_says_its_last_stderr_line() -> None:
    """An agent that fails at start-up closes the socket with its exit status and the end of
    its last stderr line, where the reason is (within the 123 bytes a close reason has)."""
    async with live_relay(FAILS_LOUDLY) as live, connect(live.ticket_url()) as ws:
        code, reason = await closed_with(ws)
    assert code == 1011
    assert reason is not None
    assert reason.startswith("agent exited with status 1: ...")
    assert reason.endswith("(ModuleNotFoundError: No module named 'relay')")
    assert len(reason.encode()) == 123


async def test_a_failed_agents_stderr_in_its_close_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stderr line a close reason carries is redacted as the logs are: a bearer token
    and a secret of the relay's (as `serve` registers them) never reach the client."""
    secret = "relay-mcp-token-0123456789abcdefghij"
    monkeypatch.setattr(logs, "_redactor", Redactor())
    logs.redactor().add_secret(secret)
    line = f"auth failed with Bearer sk-live-123 and {secret}"
    agent = (*FAILS_LOUDLY, "earlier line", line)
    async with live_relay(agent) as live, connect(live.ticket_url()) as ws:
        code, reason = await closed_with(ws)
    assert (code, reason) == (
        1011,
        "agent exited with status 1: auth failed with Bearer [redacted] and [redacted]",
    )


@pytest.mark.parametrize("stdout_first", [False, True], ids=["at-once", "after-stdout-closed"])
async def test_an_agent_killed_by_a_signal_is_called_a_crash(stdout_first: bool) -> None:
    """An agent that dies of a signal, at once or once its closed stdout made the relay stop
    it, is logged as a crash with its stderr, never as an agent still running; its close
    says the signal and its last stderr line."""
    agent = (*DIES_BY_SIGNAL, "SIGABRT", *(["--stdout-first"] if stdout_first else []))
    with capture_logs() as events:
        async with live_relay(agent) as live, connect(live.ticket_url()) as ws:
            code, reason = await closed_with(ws)
            await until_idle(live.relay)
    assert (code, reason) == (
        1011,
        "agent killed by SIGABRT: Fatal error: SIGABRT in the agent's runtime, dumping core",
    )
    warnings = [e for e in events if e["log_level"] == "warning"]
    assert [e["event"] for e in warnings] == ["agent crashed"]
    assert warnings[0]["stderr_tail"] == [
        "Fatal error: SIGABRT in the agent's runtime, dumping core"
    ]


async def test_agent_that_cannot_start() -> None:
    """An agent command that does not exist closes the socket 1011 saying why."""
    async with live_relay(("no-such-agent-xyz",)) as live, connect(live.ticket_url()) as ws:
        code, reason = await closed_with(ws)
    assert code == 1011
    assert reason == (
        "agent failed to start: no-such-agent-xyz: command not found (check --agent and PATH)"
    )


async def stubborn_session(live_url: str) -> tuple[ClientConnection, list[int]]:
    ws = await connect(live_url)
    async with asyncio.timeout(10):
        ready = str(await ws.recv()).split()
    return ws, [int(ready[1]), int(ready[2])]


@pytest.mark.slow
async def test_stubborn_agent_and_child_gone_after_client_closes() -> None:
    """An agent ignoring EOF and SIGTERM, and its child, are gone within 2 x kill-grace."""
    async with live_relay(STUBBORN, kill_grace=0.3) as live:
        ws, pids = await stubborn_session(live.ticket_url())
        await ws.close()
        assert await until_gone(pids, seconds=2 * 0.3 + 1.0)


@pytest.mark.slow
async def test_client_tcp_reset_stops_agent() -> None:
    """A client that vanishes with a TCP reset takes its agent with it."""
    async with live_relay(STUBBORN, kill_grace=0.3) as live:
        ws, pids = await stubborn_session(live.ticket_url())
        ws.transport.abort()
        assert await until_gone(pids, seconds=2 * 0.3 + 1.0)
        assert await until_idle(live.relay)


@pytest.mark.slow
async def test_silent_client_times_out_on_heartbeat() -> None:
    """A client that stops answering pings is dropped and its agent stopped."""
    async with live_relay(CAT, ping_interval=0.2, ping_timeout=0.2) as live:
        reader, writer = await asyncio.open_connection("127.0.0.1", live.relay.port)
        writer.write(upgrade_request(f"/acp?ticket={make_ticket()}"))
        async with asyncio.timeout(5):
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
            assert agents_running() != []
            # Never read again, never answer a ping.
            assert await until_idle(live.relay)
        writer.close()
        assert await until_gone(agents_running(), seconds=3)


@pytest.mark.slow
async def test_agent_not_reading_stdin_slows_the_client() -> None:
    """When the agent does not read, the client's sends stall: nothing piles up in the relay."""
    agent = (sys.executable, "-c", "import time; time.sleep(60)")
    frame = "x" * 65536
    async with live_relay(agent) as live:
        ws = await connect(live.ticket_url())
        sent = 0
        try:
            async with asyncio.timeout(2):
                while True:
                    await ws.send(frame)
                    sent += len(frame)
        except TimeoutError:
            stalled = True
        ws.transport.abort()
    assert stalled
    # pipe (64 KiB) + relay's receive queue (16 frames) + socket buffers: a few MiB, not more.
    assert 0 < sent < 16 * MiB


@pytest.mark.slow
async def test_slow_client_slows_the_agent() -> None:
    """When the client does not read, the agent's writes stall: stdout is not read ahead."""
    script = (
        "import sys\n"
        "line = b'y' * 65535 + b'\\n'\n"
        "n = 0\n"
        "while True:\n"
        "    sys.stdout.buffer.write(line); sys.stdout.flush(); n += 1\n"
        "    sys.stderr.write(f'{n}\\n'); sys.stderr.flush()\n"
    )
    agent = (sys.executable, "-c", script)
    async with live_relay(agent) as live:
        ws = await connect(live.ticket_url(), max_queue=1)
        pid = (await until(agents_running, what="the agent"))[0]
        await until(lambda: bytes_written(pid) > 65536, what="lines past the pipe")
        ws.transport.pause_reading()
        first = await until_steady(lambda: bytes_written(pid), interval=0.5)
        await asyncio.sleep(1.0)  # the behaviour under test: the agent stays blocked
        assert bytes_written(pid) == first  # the agent is blocked on a full pipe
        assert first < 64 * MiB
        ws.transport.abort()


@pytest.mark.slow
async def test_sessions_leave_no_fds_tasks_or_processes() -> None:
    """After 30 sessions of every ending, open fds, tasks and child processes are back to start."""
    exit3 = (sys.executable, str(AGENTS / "exit_with.py"), "3", "{}")
    async with live_relay(CAT) as live, live_relay(exit3) as failing:
        await one_echo(live.ticket_url())  # warm up lazily created resources
        assert await until_idle(live.relay)

        def held() -> tuple[int, int]:
            return len(os.listdir("/proc/self/fd")), len(asyncio.all_tasks())

        fds, tasks = await until_steady(held, interval=0.1)
        for _ in range(10):
            await one_echo(live.ticket_url())
            ws = await connect(live.ticket_url())
            ws.transport.abort()
            async with connect(failing.ticket_url()) as ws:
                assert (await closed_with(ws))[0] == 1011
        assert await until_idle(live.relay)
        assert await until_gone(agents_running(), seconds=5)
        # closed transports release their fds a moment later
        await until(lambda: held() == (fds, tasks), seconds=5, what=lambda: f"{held()} back")
        assert held() == (fds, tasks)


def _still_held() -> dict[str, int]:
    """The relay's per-connection objects and server sockets still in memory, by class."""
    counted = (Connection, Watching, ConnectionObserver, AgentProcess, GuardedConnection)
    held: dict[str, int] = {}
    for thing in gc.get_objects():
        if issubclass(type(thing), counted):  # not isinstance: weak proxies raise
            name = type(thing).__name__
            held[name] = held.get(name, 0) + 1
    return held


async def test_ended_connections_are_freed_without_the_cycle_collector() -> None:
    """Ended connections (every ending, watched, resumable) go at once, not at the next full GC."""
    exit3 = (sys.executable, str(AGENTS / "exit_with.py"), "3", "{}")
    async with live_relay(CAT) as live, live_relay(exit3) as failing:
        await one_echo(live.ticket_url())
        gc.collect()
        gc.disable()  # what is in a reference cycle now stays, and is counted
        try:
            for _ in range(3):
                await one_echo(live.ticket_url())
                ws = await connect(live.ticket_url())
                ws.transport.abort()
                async with connect(failing.ticket_url()) as ws:
                    assert (await closed_with(ws))[0] == 1011
            async with connect(live.ticket_url()) as controller:
                assert controller.response is not None
                named = controller.response.headers["Acp-Connection-Id"]
                watcher = await Watcher.open(live, named)
                await controller.send("{}")
                assert await controller.recv() == "{}"
            assert (await closed_with(watcher.ws))[0] == 1000
            resumable = await ResumeClient.open(failing.ticket_url())
            assert (await closed_with(resumable.ws))[0] == 1011
            assert await until_idle(live.relay)
            assert await until_idle(failing.relay)
            await until(lambda: not _still_held(), seconds=5, what=lambda: f"{_still_held()} gone")
        finally:
            gc.enable()


async def test_a_resume_welcomed_as_the_grace_ends_is_closed_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resume welcomed as the grace ends is closed 4404 'no longer', never left open."""
    async with live_relay(resume_grace=0.5, kill_grace=0.3) as live, NetCut(live.relay.port) as net:
        client = await ResumeClient.open(net.url() + "?ticket=" + make_ticket())
        [connection] = live.relay.connections.values()
        net.reset()
        await until_detached(live)
        welcome = connection.carrier.attached

        async def welcome_as_the_grace_ends(
            attachment: Attachment, first: Open | Resume | None
        ) -> str | None:
            problem = await welcome(attachment, first)
            await until(lambda: connection.ended, seconds=5)  # the grace ends meanwhile
            return problem

        monkeypatch.setattr(connection.carrier, "attached", welcome_as_the_grace_ends)
        again = await ResumeClient.open(live.url(make_ticket()), client.state)
        async with asyncio.timeout(5):
            await again.ws.wait_closed()
        assert (again.ws.close_code, again.ws.close_reason) == (CANNOT_RESUME, NO_CONNECTION)
