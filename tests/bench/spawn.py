"""Benchmark: what an agent's start costs the relay, by the way agents are made to die with it.

Run (from the project root, after the README's test set-up; as root for the account rows):

    .venv/bin/python -m tests.bench.spawn            # 200 starts a way, relay-sized process
    .venv/bin/python -m tests.bench.spawn --ballast-mib 200 --count 100

Each way starts ``sh -c 'echo x; exec cat'`` the way the relay does (three pipes, a new
session) and measures two times per start: how long the call blocks the caller (the
relay's event loop) and how long until the agent's first byte arrives (the agent runs).
``--ballast-mib`` grows the process first, as a loaded relay grows: fork copies the page
tables, vfork does not. The ways:

- ``vfork`` today's spawn, nothing added (the baseline);
- ``watchdog`` the same, plus telling :class:`relay.server.agents.watchdog.Watchdog` (what the
  relay does);
- ``setpriv-pdeathsig`` ``setpriv --pdeathsig KILL`` as an exec wrapper (one exec more);
- ``preexec-pdeathsig`` ``prctl(PR_SET_PDEATHSIG)`` in ``preexec_fn`` (forces fork);
- ``popen-user`` Popen's ``user=``/``group=`` (another account; forces fork), root only;
- ``setpriv-user`` ``setpriv --reuid/--regid`` as an exec wrapper, root only.

Prints a markdown table of medians and 95th percentiles in milliseconds.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import time
from collections.abc import Callable

from relay.server.agents.watchdog import Watchdog
from tests.support.processes import rss_kib

AGENT = ["sh", "-c", "echo x; exec cat"]
PR_SET_PDEATHSIG = 1
NOBODY = 65534


def _pdeathsig() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, 9)


Hook = Callable[[int], None]
Way = tuple[list[str], dict[str, object], Hook, Hook]


def _nothing(_pid: int) -> None:
    pass


def ways(watchdog: Watchdog) -> dict[str, Way]:
    """Each way: the argv, Popen's extra arguments, what follows the start and the end."""
    found: dict[str, Way] = {
        "vfork": (AGENT, {}, _nothing, _nothing),
        "watchdog": (AGENT, {}, watchdog.watch, watchdog.forget),
        "setpriv-pdeathsig": (
            ["setpriv", "--pdeathsig", "KILL", "--", *AGENT],
            {},
            _nothing,
            _nothing,
        ),
        "preexec-pdeathsig": (AGENT, {"preexec_fn": _pdeathsig}, _nothing, _nothing),
    }
    if os.geteuid() == 0:
        account = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
        wrapper = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
        found["popen-user"] = (AGENT, account, _nothing, _nothing)
        found["setpriv-user"] = ([*wrapper, *AGENT], {}, _nothing, _nothing)
    return found


def measure(way: Way, count: int) -> tuple[list[float], list[float]]:
    """Milliseconds each start blocked the caller, and until the agent's first byte."""
    argv, extra, after, end = way
    blocked, ready = [], []
    for _ in range(count):
        started = time.perf_counter()
        proc = subprocess.Popen(  # type: ignore[call-overload]
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd="/",
            **extra,
        )
        after(proc.pid)
        returned = time.perf_counter()
        proc.stdout.read(1)
        running = time.perf_counter()
        proc.stdin.close()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        end(proc.pid)
        blocked.append((returned - started) * 1e3)
        ready.append((running - started) * 1e3)
    return blocked, ready


def _p95(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.95)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="starts per way")
    parser.add_argument("--ballast-mib", type=int, default=0, help="grow the process first")
    args = parser.parse_args()
    import relay.commands.serve  # noqa: F401  (the relay's own modules: a relay-sized process)

    ballast = bytearray(args.ballast_mib << 20)
    for offset in range(0, len(ballast), 4096):
        ballast[offset] = 1
    watchdog = Watchdog.start(1.0, lambda: None)
    try:
        print(f"process RSS {rss_kib(os.getpid()) // 1024} MiB, {args.count} starts a way\n")
        print("| way | blocks the loop, median / p95 ms | agent running, median / p95 ms |")
        print("|---|---|---|")
        for name, way in ways(watchdog).items():
            blocked, ready = measure(way, args.count)
            print(
                f"| {name} | {statistics.median(blocked):.2f} / {_p95(blocked):.2f} "
                f"| {statistics.median(ready):.2f} / {_p95(ready):.2f} |"
            )
    finally:
        watchdog.close()


if __name__ == "__main__":
    main()
