"""Tests for relay.server.agents.process: starting the agent in its own group and stopping it
with its children."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from relay.config.account import Account
from relay.core.exits import Exit
from relay.server.agents.process import (
    AgentProcess,
    AgentStartError,
    drain_stderr,
    spawn_arguments,
)
from tests.support.agents import AGENTS
from tests.support.processes import pid_alive
from tests.support.waiting import until

ENV = dict(os.environ)


async def test_agent_runs_in_its_own_process_group(tmp_path: Path) -> None:
    """The agent leads a new process group, so its children can be signalled together."""
    agent = await AgentProcess.start(["sleep", "30"], cwd=str(tmp_path), env=ENV)
    try:
        assert os.getpgid(agent.pid) == agent.pid != os.getpgid(0)
    finally:
        await agent.stop(0.5)


async def test_agent_gets_the_workspace_as_cwd(tmp_path: Path) -> None:
    """The agent's working directory is the workspace."""
    agent = await AgentProcess.start(
        [sys.executable, "-c", "import os; print(os.getcwd())"], cwd=str(tmp_path), env=ENV
    )
    async with asyncio.timeout(10):
        out = await agent.stdout.read()
        assert (await agent.wait()).returncode == 0
    assert out.decode().strip() == str(tmp_path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/nonexistent/agent-binary"], "/nonexistent/agent-binary: command not found"),
        (["no-such-agent-command-xyz"], "no-such-agent-command-xyz: command not found"),
        ([str(AGENTS / "echo.py")], "echo.py: permission denied (is it executable?)"),
    ],
)
async def test_start_failure_says_why(tmp_path: Path, argv: list[str], message: str) -> None:
    """A command that cannot run raises AgentStartError with a fixable reason."""
    with pytest.raises(AgentStartError) as caught:
        await AgentProcess.start(argv, cwd=str(tmp_path), env=ENV)
    assert message in str(caught.value)


async def test_missing_workspace_is_named(tmp_path: Path) -> None:
    """A workspace that does not exist is named in the start error."""
    missing = tmp_path / "gone"
    with pytest.raises(AgentStartError, match="does not exist"):
        await AgentProcess.start(["cat"], cwd=str(missing), env=ENV)


async def test_an_agent_that_crashes_by_itself_was_not_stopped(tmp_path: Path) -> None:
    """An agent exiting 3 on its own, then its children stopped, is an unstopped exit 3."""
    agent = await AgentProcess.start(["sh", "-c", "exit 3"], cwd=str(tmp_path), env=ENV)
    async with asyncio.timeout(10):
        exit_ = await agent.wait()
        await agent.stop_children(0.5)
        assert await agent.wait() == exit_ == Exit(3, stopped=False)
    agent.release()


async def test_stop_closes_stdin_first(tmp_path: Path) -> None:
    """An agent that exits on stdin EOF is stopped cleanly, with status 0, before any signal."""
    agent = await AgentProcess.start(["cat"], cwd=str(tmp_path), env=ENV)
    async with asyncio.timeout(5):
        exit_ = await agent.stop(3.0)
    assert exit_ == Exit(0)


@pytest.mark.slow
async def test_stubborn_agent_and_child_gone_within_two_graces(tmp_path: Path) -> None:
    """An agent ignoring EOF and SIGTERM, with a child doing the same, is SIGKILLed with it."""
    agent = await AgentProcess.start(
        [sys.executable, str(AGENTS / "stubborn.py")], cwd=str(tmp_path), env=ENV
    )
    async with asyncio.timeout(10):
        ready = (await agent.stdout.readline()).split()
    child = int(ready[2])
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(5):
        exit_ = await agent.stop(0.3)
    assert loop.time() - started < 2 * 0.3 + 0.5
    assert exit_.reason == "agent killed by SIGKILL"
    assert (exit_.stopped, exit_.failed) == (True, False)  # the relay's doing, not a crash
    assert not pid_alive(agent.pid)
    assert not pid_alive(child)


@pytest.mark.slow
async def test_children_left_behind_are_stopped(tmp_path: Path) -> None:
    """When the agent exits but its child lives on, the child is stopped too."""
    script = (
        "import subprocess,sys\np = subprocess.Popen(['sleep', '60'])\nprint(p.pid, flush=True)\n"
    )
    agent = await AgentProcess.start([sys.executable, "-c", script], cwd=str(tmp_path), env=ENV)
    async with asyncio.timeout(10):
        child = int((await agent.stdout.readline()).strip())
        assert (await agent.wait()).returncode == 0
        assert pid_alive(child)
        await agent.stop_children(1.0)
    assert not pid_alive(child)


async def test_stderr_is_handed_on_line_by_line(tmp_path: Path) -> None:
    """Each stderr line is handed on as one text; an oversized one by its start and its size."""
    script = "import sys; sys.stderr.write('one\\ntwo\\n' + 'x' * 10000 + '\\nlast')"
    agent = await AgentProcess.start([sys.executable, "-c", script], cwd=str(tmp_path), env=ENV)
    lines: list[str] = []
    async with asyncio.timeout(10):
        await drain_stderr(agent.stderr, lines.append)
        await agent.wait()
    assert lines == [
        "one",
        "two",
        "x" * 8192 + "…[10000 bytes, cut at 8192]",
        "last",
    ]


async def pipe_reader(limit: int = 1 << 16) -> tuple[asyncio.StreamReader, int, Callable[[], None]]:
    """A StreamReader over a real pipe, the pipe's write end, and how to close the reader."""
    read_fd, write_fd = os.pipe()
    reader = asyncio.StreamReader(limit=limit)
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    return reader, write_fd, transport.close


async def test_a_cancelled_stderr_reader_leaves_the_unfinished_line_whole() -> None:
    """Reading stderr stops at a warm agent's hand-over without eating half a line: the
    connection's own reader gets the line whole."""
    reader, write_fd, close = await pipe_reader()
    os.write(write_fd, b"first\nsecond ha")
    seen: list[str] = []
    waiting = asyncio.create_task(drain_stderr(reader, seen.append))
    await until(lambda: seen, "the first line")
    await asyncio.sleep(0.05)  # the behaviour under test: the half line sits unread meanwhile
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    os.write(write_fd, b"lf\n")
    os.close(write_fd)
    rest: list[str] = []
    await drain_stderr(reader, rest.append)
    close()
    assert (seen, rest) == (["first"], ["second half"])


async def test_a_stderr_line_over_the_readers_limit_is_logged_by_its_start() -> None:
    """A line longer than the pipe reader holds is read by parts: its start is kept, with its
    size, the rest dropped as it comes."""
    reader, write_fd, close = await pipe_reader(limit=1024)
    seen: list[str] = []
    reading = asyncio.create_task(drain_stderr(reader, seen.append))
    os.write(write_fd, b"a" * 5000 + b"b" * 5000 + b"\nok\nlast")
    os.close(write_fd)
    await asyncio.wait_for(reading, 5)
    close()
    assert seen == ["a" * 5000 + "b" * 3192 + "…[10000 bytes, cut at 8192]", "ok", "last"]


async def test_blank_stderr_lines_are_skipped_and_line_ends_trimmed() -> None:
    """Empty and blank lines carry nothing and are skipped; a CRLF line ends without its CR;
    undecodable bytes are replaced, not fatal."""
    reader, write_fd, close = await pipe_reader()
    os.write(write_fd, b"one\r\n\n  \t\ntwo \xff\n\r\nlast\r")
    os.close(write_fd)
    seen: list[str] = []
    await asyncio.wait_for(drain_stderr(reader, seen.append), 5)
    close()
    assert seen == ["one", "two \ufffd", "last"]


class ListedGroups:
    """A guard that keeps the list the watchdog would keep."""

    def __init__(self) -> None:
        self.groups: list[int] = []

    def watch(self, pgid: int) -> None:
        self.groups.append(pgid)

    def forget(self, pgid: int) -> None:
        self.groups.remove(pgid)


async def test_the_guard_watches_an_agent_from_its_start_to_its_release(tmp_path: Path) -> None:
    """An agent's process group is on the guard's list from its start until released."""
    guard = ListedGroups()
    agent = await AgentProcess.start(["cat"], cwd=str(tmp_path), env=ENV, guard=guard)
    assert guard.groups == [agent.pid]
    await agent.stop(0.5)
    assert guard.groups == [agent.pid]  # stopped, not yet released
    agent.release()
    agent.release()
    assert guard.groups == []


NOBODY = Account("nobody", 65534, 65534, (65534, 100), "/nonexistent", "/usr/bin/setpriv")


@pytest.mark.parametrize(
    ("account", "argv", "extra"),
    [
        (None, ["my-agent", "--acp"], {}),
        (
            NOBODY,
            ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--groups=65534,100", "--",
             "my-agent", "--acp"],
            {},
        ),
        (
            replace(NOBODY, groups=()),
            ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
             "my-agent", "--acp"],
            {},
        ),
        (
            replace(NOBODY, setpriv=None),
            ["my-agent", "--acp"],
            {"user": 65534, "group": 65534, "extra_groups": [65534, 100]},
        ),
    ],
)  # fmt: skip
def test_spawn_arguments(
    account: Account | None, argv: list[str], extra: dict[str, object]
) -> None:
    """Another account is switched to by setpriv before the agent's exec, else by Popen."""
    assert spawn_arguments(["my-agent", "--acp"], account) == (argv, extra)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to start agents as nobody")
@pytest.mark.parametrize("through_setpriv", [True, False], ids=["setpriv", "popen"])
async def test_an_agent_runs_as_its_account(through_setpriv: bool) -> None:
    """Started as another account, the agent has its uid, gid and groups, none of root's."""
    setpriv = shutil.which("setpriv") if through_setpriv else None
    if through_setpriv and setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    account = Account("nobody", 65534, 65534, (65534,), "/nonexistent", setpriv)
    agent = await AgentProcess.start(["id"], cwd="/", env=ENV, account=account)
    async with asyncio.timeout(10):
        out = await agent.stdout.read()
        assert (await agent.wait()).returncode == 0
    agent.release()
    ids = dict(part.split("=", 1) for part in out.decode().split())
    assert ids["uid"].startswith("65534(")
    assert ids["gid"].startswith("65534(")
    assert ids["groups"].split("(")[0] == "65534"
    assert "0(root)" not in out.decode()
