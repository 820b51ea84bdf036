"""The agents' watchdog: one small process per relay that stops the agents when the relay dies.

A relay that is SIGKILLed or crashes cannot stop its agents, and an agent that ignores
stdin EOF and SIGTERM would run on, an orphan, with its children. The watchdog is a
separate process holding the read end of a pipe whose only write end is the relay's:
the relay writes ``+PGID`` as each agent starts (the agent leads its own process group)
and ``-PGID`` once it is done with it. When the pipe reads EOF the relay is gone,
however it went: the watchdog sends SIGTERM to every process group still listed, then
SIGKILL to what is left after the kill grace, and exits.

This file is also the watchdog's program, run by path as ``python -I -S watchdog.py
GRACE`` with the pipe as its stdin: standard library only, nothing imported from the
relay, so it starts in milliseconds and stays small. It ignores SIGINT, SIGHUP and
SIGTERM and runs in a session of its own: only the end of the relay ends it. Unlike
the Linux parent-death signal it needs no fork in the relay (agents keep the vfork
spawn), reaches the agents' children (the whole process group) and is portable to any
POSIX system.

An agent of the relay's own user could otherwise open the pipe by
``/proc/<watchdog>/fd/0``, list any process group of that user (killed when the relay
dies) and hold the pipe open (no EOF: agents outlive the relay). So the watchdog makes
itself non-dumpable on Linux before it says it is ready, as the relay does (its
``/proc/<pid>/fd`` is then closed to processes of the same user), and lists only a
group led by a direct child of the relay (its parent), checked as the line arrives.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import suppress

READY = b"ready\n"  # the watchdog's one line on stdout, once its signals are set
POLL_SECONDS = 0.02  # how often the watchdog looks whether the groups it signalled are gone
PR_SET_DUMPABLE = 4  # linux/prctl.h


class Watchdog:
    """The relay's side: start the watchdog process, then tell it each agent's group."""

    def __init__(
        self, proc: subprocess.Popen[bytes], pipe: int, on_lost: Callable[[], None]
    ) -> None:
        self.proc = proc
        self._pipe: int | None = pipe
        self._on_lost = on_lost

    @classmethod
    def start(cls, grace: float, on_lost: Callable[[], None]) -> Watchdog:
        """Start the watchdog, which will give agents ``grace`` seconds between SIGTERM and
        SIGKILL; ``on_lost`` is called once if it is found gone while the relay runs."""
        watchdog = cls.launch(grace, on_lost)
        watchdog.ready()
        return watchdog

    @classmethod
    def launch(cls, grace: float, on_lost: Callable[[], None]) -> Watchdog:
        """Start the watchdog's process without waiting for it: :meth:`ready` waits, before
        the first agent starts (serve launches it at once and loads the server meanwhile)."""
        read_end, write_end = os.pipe()  # neither end is inherited by agents (PEP 446)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", __file__, repr(grace)],
                stdin=read_end,
                stdout=subprocess.PIPE,
                env={},  # nothing of the relay's environment: its secret stays out
                cwd="/",
                start_new_session=True,
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        return cls(proc, write_end, on_lost)

    def ready(self) -> None:
        """Wait until the watchdog says it is ready; OSError (and closed) if it failed."""
        stdout = self.proc.stdout
        if stdout is None:  # ready already
            return
        with stdout:  # once it says so, it ignores the signals it must outlive
            said = stdout.readline()
        self.proc.stdout = None
        if said != READY:
            self.close()
            raise OSError(
                f"the agents' watchdog did not start (exit status {self.proc.returncode})"
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def watch(self, pgid: int) -> None:
        """An agent started, leading process group ``pgid``: stop it if the relay dies."""
        self._tell(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        """The relay is done with the agent of group ``pgid`` (it stopped it and its children)."""
        self._tell(f"-{pgid}\n")

    def close(self) -> None:
        """The relay stops normally, its agents gone: the watchdog reads EOF and exits."""
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _tell(self, line: str) -> None:
        if self._pipe is None:
            return
        try:
            os.write(self._pipe, line.encode())  # a few bytes: atomic, never a partial write
        except OSError:  # the watchdog is gone (EPIPE): say so once, carry on without it
            os.close(self._pipe)
            self._pipe = None
            self._on_lost()


# --- the watchdog's program


def listed_groups(
    lines: Iterable[bytes], admit: Callable[[int], bool] = lambda _group: True
) -> set[int]:
    """The process groups still listed once every ``+PGID`` / ``-PGID`` line is applied;
    ``admit`` judges each ``+PGID`` as its line arrives."""
    groups: set[int] = set()
    for raw in lines:
        line = raw.strip()
        if line[:1] == b"+" and line[1:].isdigit():
            if admit(int(line[1:])):
                groups.add(int(line[1:]))
        elif line[:1] == b"-" and line[1:].isdigit():
            groups.discard(int(line[1:]))
    return groups


def started_by(relay: int) -> Callable[[int], bool]:
    """Whether a process group is one ``relay`` started: its leader is a direct child of
    ``relay`` (on Linux, read in /proc; elsewhere not checked) and leads that group. A
    group refused while its leader exists is logged."""

    def admit(group: int) -> bool:
        parent, leads = _parent_and_group(group)
        if parent is None:
            return False  # gone already: nothing there to stop
        if (parent == relay or parent < 0) and leads == group:
            return True
        _log("process group refused: not one the relay started", process_group=group)
        return False

    return admit


def _parent_and_group(pid: int) -> tuple[int | None, int | None]:
    """``pid``'s parent (-1 where there is no /proc to tell) and process group; (None, None)
    if it is gone."""
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()  # after "pid (comm)"
            return int(fields[1]), int(fields[2])
        except (OSError, ValueError, IndexError):
            return None, None
    try:
        return -1, os.getpgid(pid)
    except OSError:
        return None, None


def keep_private() -> bool:
    """Make this process non-dumpable (Linux), so that no process of the same user can
    open its /proc/<pid>/fd (its pipe from the relay), read its memory or ptrace it."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # only here: the watchdog's start stays light elsewhere

    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


def stop_groups(groups: set[int], grace: float) -> list[int]:
    """SIGTERM each live group, SIGKILL those still there after ``grace``; the ones killed."""
    alive = {g for g in groups if _signal(g, signal.SIGTERM)}
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        alive = {g for g in alive if _signal(g, 0)}
    return sorted(g for g in alive if _signal(g, signal.SIGKILL))


def _signal(group: int, sig: int) -> bool:
    """Send ``sig`` to the group; whether it still had a member."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # not ours to signal (a reused id): leave it alone
        return False
    return True


def _log(event: str, **fields: object) -> None:
    """One JSON line on stderr, like the relay's own log lines off a terminal."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    record = {"event": event, **fields, "level": "warning", "logger": "relay.watchdog"}
    record["timestamp"] = f"{stamp}Z"
    print(json.dumps(record), file=sys.stderr, flush=True)


def say_ready() -> None:
    """Tell the relay the watchdog is ready, if it still listens: a relay that stopped
    waiting (it is stopping, or was killed, while the watchdog started) closed its end,
    and its pipe's EOF on stdin says the rest."""
    with suppress(BrokenPipeError):
        os.write(sys.stdout.fileno(), READY)  # unbuffered: nothing left to flush at exit
    sys.stdout.close()


def main(argv: list[str]) -> int:
    """Read the relay's pipe on stdin to its end, then stop the agents still listed."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    relay = os.getppid()
    if not keep_private() and sys.platform.startswith("linux"):
        _log("cannot make the watchdog non-dumpable: agents may write to its pipe")
    say_ready()
    grace = float(argv[1]) if len(argv) > 1 else 3.0
    groups = {g for g in listed_groups(sys.stdin.buffer, started_by(relay)) if _signal(g, 0)}
    if groups:
        _log("relay gone: stopping its agents", process_groups=sorted(groups), grace=grace)
        killed = stop_groups(groups, grace)
        if killed:
            _log("agents killed after the grace", process_groups=killed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
