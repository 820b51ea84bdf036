"""Tests for relay.commands.startsignals: a stop signal at any stage of ``serve``'s start-up ends it
cleanly (no traceback, nothing left behind), as real ``serve`` subprocesses.

Each stage is reached by watching for what it leaves (a handler in /proc, the --dev
folder, the bound port, the watchdog, the "listening" line, the banner, the warm agent),
never by a fixed delay; the signal goes the moment it shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest

from tests.support.cli import ACP_RELAY, RelayRun
from tests.support.env import clean_env, secret_env
from tests.support.processes import catches_signal, children_of
from tests.support.sockets import free_port
from tests.support.waiting import until, until_gone

Stage = Callable[[RelayRun, Path, int], bool]


def listening_on(port: int) -> bool:
    """Whether a socket listens on 127.0.0.1:``port`` (read in /proc: no connection made)."""
    wanted = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == wanted and fields[3] == "0A":
            return True
    return False


def children(run: RelayRun) -> list[int]:
    with suppress(OSError):
        return children_of(run.pid)
    return []


STAGES: dict[str, Stage] = {
    "signals deferred": lambda run, _tmp, _port: catches_signal(run.pid, signal.SIGTERM),
    "dev folder made": lambda _run, tmp, _port: any(tmp.glob("acp-relay-dev-*")),
    "port bound": lambda _run, _tmp, port: listening_on(port),
    "watchdog started": lambda run, _tmp, _port: len(children(run)) >= 1,
    "listening logged": lambda run, _tmp, _port: bool(run.events("listening")),
    "banner printed": lambda run, _tmp, _port: any("Dev console" in o for o in run.stdout),
    "warm agent started": lambda run, _tmp, _port: len(children(run)) >= 2,
}
DEV_ONLY = ("dev folder made", "banner printed", "warm agent started")
CASES = [("--dev", stage) for stage in STAGES] + [
    ("--agent", stage) for stage in STAGES if stage not in DEV_ONLY
]


async def start_serve(dev: bool, tmp: Path, port: int) -> RelayRun:
    """``serve --dev`` (or with an agent and a secret) on ``port``, its TMPDIR ``tmp``."""
    args = ["--dev"] if dev else ["--agent", "cat"]
    env = (clean_env if dev else secret_env)(TMPDIR=str(tmp))
    proc = await asyncio.create_subprocess_exec(
        *ACP_RELAY, "serve", "--listen", f"127.0.0.1:{port}", *args,
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    return RelayRun(proc)


def not_log_lines(lines: list[str]) -> list[str]:
    """The lines of stderr that are not the relay's JSON log lines (a traceback's, say)."""
    found = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "event" not in record:
            found.append(line)
    return found


async def reached(run: RelayRun, stage: Stage, tmp: Path, port: int) -> list[int]:
    """Until ``stage`` shows (the relay still running); the relay's children then."""

    def shows() -> bool:
        if run.proc.returncode is not None:
            raise AssertionError(f"the relay exited before the stage: {run.stderr}")
        with suppress(OSError):
            return stage(run, tmp, port)
        return False

    await until(shows, seconds=20)
    return children(run)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "stage"), CASES, ids=[f"{m}-{s}" for m, s in CASES])
async def test_sigint_at_each_stage_of_start_up_exits_cleanly(
    tmp_path: Path, mode: str, stage: str
) -> None:
    """SIGINT the moment a stage of start-up shows ends serve with 130 (before it listens)
    or 0 (after), every stderr line one of its log lines (never a traceback, the relay's or
    its watchdog's), its --dev folder removed, its watchdog and agents gone."""
    port = free_port()
    run = await start_serve(mode == "--dev", tmp_path, port)
    try:
        seen = await reached(run, STAGES[stage], tmp_path, port)
        run.proc.send_signal(signal.SIGINT)
        status = await run.finished(seconds=20)
        assert status in (0, 128 + signal.SIGINT), run.stderr
        assert not_log_lines(run.stderr) == [], "\n".join(run.stderr)
        assert "Traceback" not in "\n".join(run.stdout)
        assert await until_gone(seen)
        assert os.listdir(tmp_path) == []
    finally:
        await run.cleanup()


@pytest.mark.slow
async def test_a_second_sigint_ends_start_up_at_once(tmp_path: Path) -> None:
    """Two SIGINTs during start-up end it at once with 130, without a traceback (the second
    does not wait for the next step); the next serve --dev removes what it left."""
    port = free_port()
    run = await start_serve(True, tmp_path, port)
    try:
        seen = await reached(run, STAGES["dev folder made"], tmp_path, port)
        run.proc.send_signal(signal.SIGINT)
        run.proc.send_signal(signal.SIGINT)
        assert await run.finished(seconds=20) == 128 + signal.SIGINT
        assert not_log_lines(run.stderr) == [], "\n".join(run.stderr)
        assert await until_gone(seen)
    finally:
        await run.cleanup()
