"""Alternated runs of the benchmark, before and after a change, each on a quiet machine.

    .venv/bin/python -m tests.bench.alternate --before ../main-before --pairs 3

Runs ``python -m tests.bench.run`` in the ``--before`` worktree (its own venv and its own
harness: the code of that commit measured as it measured itself), then in ``--after``
(this one by default), ``--pairs`` times: before, after, before, after, ... Before each
run it waits until the 1-minute load average is at most ``--max-load`` (polling every
``--poll`` seconds, at most ``--max-wait`` seconds in all; then it runs anyway) and
records the load it started at. Each run's JSON goes to
``tests/bench/results/<side>-<n>.raw.json`` (ignored by git), with ``load``; the spread
of all of them (:mod:`tests.bench.spread`) is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.bench.peers import HERE, ROOT
from tests.bench.spread import markdown


def wait_for_quiet(
    max_load: float, max_wait: float, poll: float,
    load: Callable[[], float] = lambda: os.getloadavg()[0],
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:  # fmt: skip
    """Wait until the 1-minute load is at most ``max_load``, polling every ``poll``
    seconds for at most ``max_wait``; the load found first, the load at the start, the
    seconds waited, and whether the wait gave up."""
    first = now = load()
    waited = 0.0
    while now > max_load and waited < max_wait:
        sleep(poll)
        waited += poll
        now = load()
    return {"at_first_look": first, "at_start": now, "waited_s": waited,
            "gave_up": now > max_load}  # fmt: skip


def next_number(out: Path, side: str) -> int:
    """The first free run number of ``side`` in ``out``."""
    number = 1
    while (out / f"{side}-{number}.raw.json").exists():
        number += 1
    return number


def run_once(worktree: Path, only: str | None) -> dict[str, Any]:
    """One run of ``worktree``'s benchmark with its own venv; its JSON payload."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(worktree / ".venv" / "bin" / "python"), "-m", "tests.bench.run",
                "--out", tmp, *(["--only", only] if only else [])]  # fmt: skip
        done = subprocess.run(argv, cwd=worktree, check=False, stdout=subprocess.DEVNULL)
        written = Path(tmp) / "latest.json"
        if not written.exists():
            return {"error": f"the run exited with {done.returncode} and wrote nothing"}
        payload: dict[str, Any] = json.loads(written.read_text())
    return payload


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the worktree of the code before")
    parser.add_argument("--after", type=Path, default=ROOT, help="the worktree after (this)")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each side")
    parser.add_argument("--only", help="one section (see tests.bench.run --help)")
    parser.add_argument("--max-load", type=float, default=0.8)
    parser.add_argument("--max-wait", type=float, default=1200.0, help="seconds, per run")
    parser.add_argument("--poll", type=float, default=30.0, help="seconds")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)  # a folder of its own, as --out names it
    order = [("before", args.before), ("after", args.after)] if args.before else [
        ("after", args.after)]  # fmt: skip
    made: dict[str, list[dict[str, Any]]] = {side: [] for side, _ in order}
    for _ in range(args.pairs):
        for side, worktree in order:
            load = wait_for_quiet(args.max_load, args.max_wait, args.poll)
            print(f"{side}: load {load['at_start']:.2f} after {load['waited_s']:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
            payload = run_once(worktree.resolve(), args.only) | {"side": side, "load": load}
            path = args.out / f"{side}-{next_number(args.out, side)}.raw.json"
            path.write_text(json.dumps(payload, indent=2) + "\n")
            print(f"{side}: {path}", file=sys.stderr, flush=True)
            if "figures" in payload:
                made[side].append(payload)
    print(markdown({side: runs for side, runs in made.items() if runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
