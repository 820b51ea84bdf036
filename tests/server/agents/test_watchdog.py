"""relay.server.agents.watchdog: the process that stops the agents when the relay is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from relay.server.agents import watchdog as watchdog_module
from relay.server.agents.watchdog import Watchdog, listed_groups, started_by
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


@pytest.mark.parametrize(
    ("lines", "groups"),
    [
        ([b"+10\n", b"+13\n"], {10}),
        ([b"+13\n", b"-13\n", b"+11\n"], {11}),
    ],
)
def test_listed_groups_keeps_only_admitted_ones(lines: list[bytes], groups: set[int]) -> None:
    """A +PGID the judge refuses is not listed."""
    assert listed_groups(lines, lambda group: group != 13) == groups


def orphan_group() -> int:
    """A process group of this user that this process did not start: led by a grandchild
    whose parent has exited."""
    spawn = (
        "import subprocess\n"
        "sleep = ['sleep', '30']\n"
        "print(subprocess.Popen(sleep, start_new_session=True, stdout=-3, stderr=-3).pid)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", spawn], capture_output=True, text=True, timeout=20, check=True
    )
    return int(out.stdout)


def test_a_group_the_relay_did_not_start_is_left_alone() -> None:
    """Told to watch a group whose leader is not its relay's child, the watchdog refuses it
    and leaves it running at EOF; its relay's own agents it still stops."""
    stranger = orphan_group()
    own = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with watchdog() as dog:
            dog.watch(stranger)
            dog.watch(own.pid)
        assert own.wait(timeout=GRACE + 2) == -signal.SIGTERM
        assert pid_alive(stranger)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(stranger, signal.SIGKILL)
        own.kill()
        own.wait()


def test_the_watchdog_judges_each_group_by_its_leaders_parent() -> None:
    """started_by admits a group led by a child of the given relay, and refuses one whose
    leader has another parent, a process that leads no group, and a gone one."""
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    member = subprocess.Popen(["sleep", "30"])  # in this process's group, leading none
    try:
        admit = started_by(os.getpid())
        assert admit(child.pid)
        assert not started_by(1)(child.pid)
        assert not admit(member.pid)
    finally:
        for proc in (child, member):
            proc.kill()
            proc.wait()
    assert not admit(child.pid)


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


def test_a_relay_gone_before_the_watchdog_is_ready_leaves_it_quiet() -> None:
    """A relay that stops waiting while its watchdog starts (it is stopping, or was killed)
    has closed the watchdog's stdout unread, then its pipe: the watchdog exits 0 and writes
    nothing on stderr, which is the relay's (it wrote a BrokenPipeError traceback there)."""
    program = [sys.executable, "-I", "-S", watchdog_module.__file__, repr(GRACE)]
    proc = subprocess.Popen(
        program, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    proc.stdout.close()  # long before the watchdog's Python has started: it finds no reader
    _, err = proc.communicate(timeout=20)  # closes its stdin: the relay is gone
    assert (proc.returncode, err.decode()) == (0, "")


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
