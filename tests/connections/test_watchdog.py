"""relay.connections.watchdog: the process that stops the agents when the relay is gone."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from relay.connections.watchdog import Watchdog, listed_groups
from tests.support.agents import STUBBORN
from tests.support.processes import pid_alive
from tests.support.waiting import until, until_gone

GRACE = 0.3


@pytest.mark.parametrize(
    ("lines", "groups"),
    [
        ([], set()),
        ([b"+10\n", b"+11\n"], {10, 11}),
        ([b"+10\n", b"+11\n", b"-10\n"], {11}),
        ([b"-10\n", b"+10\n"], {10}),
        ([b"+10\n", b"+10\n", b"-10\n"], set()),
        ([b"+1x\n", b"garbage\n", b"+\n", b"-\n", b"+12"], {12}),  # the last line unfinished
    ],
)
def test_listed_groups(lines: list[bytes], groups: set[int]) -> None:
    """+PGID lists a process group, -PGID takes it off; anything else is ignored."""
    assert listed_groups(lines) == groups


@contextmanager
def watchdog(lost: list[str] | None = None) -> Iterator[Watchdog]:
    """A watchdog for the block, closed at its end (as a relay's that stops)."""
    dog = Watchdog.start(GRACE, lambda: (lost if lost is not None else []).append("lost"))
    try:
        yield dog
    finally:
        dog.close()


def stubborn_group() -> tuple[subprocess.Popen[bytes], list[int]]:
    """A process group deaf to stdin EOF and SIGTERM: the agent and its child, once ready."""
    proc = subprocess.Popen(STUBBORN, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    ready = proc.stdout.readline().split()
    assert ready[0] == b"ready"
    return proc, [int(pid) for pid in ready[1:]]


async def test_groups_still_listed_at_eof_are_stopped_even_if_deaf_to_sigterm() -> None:
    """At EOF the watchdog SIGTERMs each listed group and SIGKILLs it after the grace."""
    proc, pids = stubborn_group()
    try:
        with watchdog() as dog:
            dog.watch(proc.pid)
        assert await until_gone(pids, seconds=GRACE + 2)
        assert proc.wait(timeout=5) == -signal.SIGKILL
        assert dog.proc.returncode == 0
    finally:
        if pid_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_forgotten_group_is_left_alone() -> None:
    """A group the relay is done with (-PGID) is not signalled at EOF."""
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with watchdog() as dog:
            dog.watch(proc.pid)
            dog.forget(proc.pid)
        assert dog.proc.returncode == 0
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_the_watchdog_outlives_the_signals_a_terminal_or_supervisor_sends() -> None:
    """SIGINT, SIGHUP and SIGTERM leave the watchdog running: only EOF ends it."""
    with watchdog() as dog:
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            dog.proc.send_signal(sig)
        marker = subprocess.Popen(["sleep", "30"], start_new_session=True)
        dog.watch(marker.pid)  # the watchdog still reads, and will act at EOF
        assert dog.proc.poll() is None
    assert marker.wait(timeout=GRACE + 2) == -signal.SIGTERM


def test_the_watchdog_gets_none_of_the_relays_environment_nor_its_session() -> None:
    """The watchdog runs with an empty environment (no secret) in a session of its own."""
    with watchdog() as dog:
        environ = Path(f"/proc/{dog.pid}/environ").read_bytes()
        session = os.getsid(dog.pid)
    assert environ == b""
    assert session == dog.pid != os.getsid(0)


async def test_a_watchdog_found_gone_is_reported_once() -> None:
    """When the watchdog has died the relay is told once, then goes on without it."""
    lost: list[str] = []
    with watchdog(lost) as dog:
        dog.proc.kill()
        dog.proc.wait()

        def told() -> list[str]:
            dog.watch(1)  # the first write after its death fails (EPIPE)
            return lost

        await until(told, seconds=5)
        dog.watch(2)
        dog.forget(2)
    assert lost == ["lost"]
