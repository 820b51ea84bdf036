"""Processes on this machine as ``/proc`` shows them: alive, children, open fds, memory, writes;
and stopping a server a test started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), None once gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting for its parent."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def parent_of(pid: int) -> int | None:
    """The parent pid of a live process, None once it is gone or a zombie."""
    fields = _stat(pid)
    return None if fields is None or fields[0] in ("Z", "X") else int(fields[1])


def child_states(pid: int) -> dict[int, str]:
    """Every child of ``pid`` (zombies included) and its state letter."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is not None and int(fields[1]) == pid:
            found[int(entry.name)] = fields[0]
    return found


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) child pids of ``pid``."""
    return [child for child, state in child_states(pid).items() if state not in ("Z", "X")]


def agents_running() -> list[int]:
    """Live children of this test process: the agents of the relays it runs in-process."""
    return children_of(os.getpid())


def zombies(pid: int) -> list[int]:
    """Children of ``pid`` that exited and were not reaped."""
    return [child for child, state in child_states(pid).items() if state == "Z"]


def fd_count(pid: int) -> int:
    """Open file descriptors of ``pid``."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """Resident memory of ``pid`` in KiB (``field="VmHWM"``: its peak so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def catches_signal(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler for signal ``signum`` (SigCgt in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError(f"no SigCgt for {pid}")


def bytes_written(pid: int) -> int:
    """Bytes the process has written so far (from /proc/PID/io)."""
    for entry in Path(f"/proc/{pid}/io").read_text().splitlines():
        if entry.startswith("wchar:"):
            return int(entry.split()[1])
    raise AssertionError("no wchar in /proc/PID/io")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it is still running 10 s later; reaped either way."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
