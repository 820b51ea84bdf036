"""Benchmark: acp-relay side by side with its peers and the load generator's own ceiling.

Run (from the project root, after the README's test set-up):

    .venv/bin/python -m tests.bench.run            # full run, about six minutes
    .venv/bin/python -m tests.bench.run --quick    # under a minute, for a smoke check

The peers (:mod:`tests.bench.peers`: websocketd, websocat, acpremote) run the same agent
as the relay: ``cat`` for round trips and large messages, ``streamer.py`` for the
streaming rows (one prompt answered by thousands of ``session/update`` notifications).
The load generator (``loadgen.mjs``, Node.js + ws) is measured against a trivial echo
server with no child process (``echo.mjs``) in the same run: that is the ceiling. Ratios
are computed pair by pair within the run, since absolute figures vary with the
machine's load. A peer that cannot do something gets its failure in the cell.

The relay alone also gets: the resume profile on vs off (issue 12), the time from the
network coming back to the first replayed message (:mod:`tests.bench.resume_gap`),
200 B x64 with a /metrics scrape loop running vs without (issue 16), and the rows of
:mod:`tests.bench.features`: tool-call locations translated while streaming (issue 21),
streaming with watchers attached, the memory per watcher, and the history under a flood
(issue 23). Start-up rows come from ``tests/bench/startup.py`` when it is there
(:func:`measure_startup`). Every 200 B and streaming row has each server's CPU time per
message beside its rate: on a busy machine it moves less than the rate.

Each section runs alone with ``--only``. Several runs, before and after a change,
alternated on a quiet machine: :mod:`tests.bench.alternate`; their ranges:
:mod:`tests.bench.spread`.

Writes ``results/latest.json`` and ``results/latest.md`` (``quick.*`` with --quick).
Loopback only.
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.bench import features, resume_gap
from tests.bench.client import cpu_seconds, loadgen, loadgen_file
from tests.bench.peers import (
    HERE,
    SECRET,
    STREAMER,
    Peers,
    Server,
    prepare,
    relay,
    wait_for_port,
    with_group_killed,
)
from tests.support.processes import rss_kib

__all__ = ["HERE", "SECRET", "STREAMER", "wait_for_port", "with_group_killed"]

FIRST_BYTE_AGENT = "sh -c 'echo ready; exec cat'"
KiB, MiB = 1024, 1024 * 1024


@dataclass(frozen=True)
class Plan:
    """How long and how much each measurement runs."""

    rate_seconds: float
    bulk: tuple[tuple[int, int, int], ...]  # (size, count, in flight)
    bulk_timeout: float
    idle_sockets: int
    first_byte_count: int
    stream_updates: int  # notifications answering the one prompt of the streaming row
    aggregate_sockets: int
    aggregate_updates: int  # per socket
    resume_trials: int
    scrape_every: float  # seconds between two GET /metrics of the scrape loop
    rounds: int  # on/off comparisons alternate this many times
    paths_updates: int  # notifications per measured prompt of the paths rows
    paths_size: int  # bytes per notification there (a tool call with a location needs ~300)
    watch_updates: int  # notifications per measured prompt of the watchers rows
    watchers: int  # watchers attached in the watchers rows
    memory_watchers: int  # watchers attached to one connection for the memory per watcher
    flood_updates: int  # lines of 200 B the agent floods in the history rows
    feature_rounds: int  # rounds of the paths and watchers rows, alternating


FULL = Plan(
    3.0,
    ((32 * KiB, 1000, 1), (32 * KiB, 2000, 8), (MiB, 100, 1), (MiB, 200, 4),
     (16 * MiB, 6, 1), (16 * MiB, 12, 2)),
    15.0, 1000, 50, 20_000, 50, 2_000, 5, 0.5, 2,
    20_000, 320, 20_000, 4, 100, 500_000, 3,
)  # fmt: skip
QUICK = Plan(
    0.5,
    ((32 * KiB, 100, 1), (32 * KiB, 200, 8), (MiB, 10, 1), (MiB, 20, 4),
     (16 * MiB, 2, 1), (16 * MiB, 2, 2)),
    10.0, 20, 5, 2_000, 10, 200, 1, 0.5, 1,
    2_000, 320, 2_000, 4, 10, 20_000, 1,
)  # fmt: skip


@dataclass
class Results:
    """Figures by server name, plus the run's context."""

    machine: dict[str, Any]
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def put(self, server: str, key: str, value: Any) -> None:
        self.figures.setdefault(server, {})[key] = value
        print(f"  {server:10} {key:28} {json.dumps(value)}", file=sys.stderr, flush=True)


def label(size: int) -> str:
    return f"{size // MiB}MiB" if size >= MiB else f"{size // KiB}KiB"


# -- measurements, every server ------------------------------------------------------


def rate(server: Server, plan: Plan, inflight: int, **extra: Any) -> dict[str, Any]:
    return loadgen({"command": "rate", "url": server.url(), "size": 200, "inflight": inflight,
                    "seconds": plan.rate_seconds, **extra})  # fmt: skip


def rate_and_cpu(server: Server, plan: Plan, inflight: int, **extra: Any) -> dict[str, Any]:
    """:func:`rate`, plus the server's CPU µs per message (both ways: 2 per round trip),
    which a busy machine moves less than the rate."""
    before = cpu_seconds(server.process.pid)
    got = rate(server, plan, inflight, **extra)
    if "error" not in got and got.get("messages"):
        used = cpu_seconds(server.process.pid) - before
        got["cpu_us_per_message"] = used * 1e6 / (2 * got["messages"])
    return got


def measure_rates(server: Server, plan: Plan, results: Results) -> None:
    for inflight in (1, 64):
        results.put(server.name, f"rate_200B_x{inflight}", rate_and_cpu(server, plan, inflight))


def measure_bulk(server: Server, plan: Plan, results: Results) -> None:
    for size, count, inflight in plan.bulk:
        cpu_before = cpu_seconds(server.process.pid)
        got = loadgen({"command": "bulk", "url": server.url(), "size": size, "count": count,
                       "inflight": inflight, "timeout": plan.bulk_timeout})  # fmt: skip
        if size == MiB and "error" not in got:
            relayed_gb = 2 * size * got["messages"] / 1e9  # in and out of the relay
            got["cpu_s_per_gb"] = (cpu_seconds(server.process.pid) - cpu_before) / relayed_gb
        results.put(server.name, f"bulk_{label(size)}_x{inflight}", got)


def with_cpu(server: Server, command: dict[str, Any], argv: list[str] | None = None) -> Any:
    """Run a streaming command; add the server process's CPU ms per 1,000 messages."""
    cpu_before = cpu_seconds(server.process.pid)
    if argv is None:
        got = loadgen(command)
    else:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        Path(argv[-1][1:]).unlink()
        lines = done.stdout.strip().splitlines()
        got = json.loads(lines[-1]) if lines else {"error": done.stderr.strip()[-300:]}
    if "error" not in got and got.get("messages"):
        cpu_ms = (cpu_seconds(server.process.pid) - cpu_before) * 1000
        got["cpu_ms_per_1000"] = cpu_ms / got["messages"] * 1000
    return got


def measure_streams(server: Server, plan: Plan, results: Results) -> None:
    """One socket streaming, then many at once: messages/s to the clients, server CPU."""
    stream = {"command": "stream", "url": server.url(), "size": 200,
              "updates": plan.stream_updates, "warmup": 100, "timeout": 60}  # fmt: skip
    results.put(server.name, "stream", with_cpu(server, stream))
    urls = [server.url() for _ in range(plan.aggregate_sockets)]
    many = {"command": "aggregate", "urls": urls, "size": 200,
            "updates": plan.aggregate_updates, "timeout": 120}  # fmt: skip
    results.put(server.name, "aggregate", with_cpu(server, many, loadgen_file(many)))


def measure_idle_memory(server: Server, plan: Plan, results: Results) -> None:
    loadgen({"command": "idle", "urls": [server.url()]})  # warm up lazily created state
    time.sleep(0.5)
    before = rss_kib(server.process.pid)
    argv = loadgen_file(
        {"command": "idle", "urls": [server.url() for _ in range(plan.idle_sockets)]}
    )
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdin is not None
    opened = json.loads(holder.stdout.readline() or '{"error": "no answer"}')
    time.sleep(1.0)  # let the server settle after the burst of opens
    after = rss_kib(server.process.pid)
    holder.stdin.close()
    holder.wait(timeout=60)
    Path(argv[-1][1:]).unlink()
    per = (after - before) / max(1, opened.get("open", 0))
    results.put(server.name, f"idle_{plan.idle_sockets}", {
        "open": opened.get("open"), "error": opened.get("error"), "rss_before_kib": before,
        "rss_after_kib": after, "kib_per_connection": round(per, 1)})  # fmt: skip


def measure_first_byte(server: Server, plan: Plan, results: Results) -> None:
    urls = [server.url() for _ in range(plan.first_byte_count)]
    results.put(server.name, "first_byte", loadgen({"command": "first_byte", "urls": urls}))


def agent_own_start_ms(count: int) -> dict[str, Any]:
    """How long the first-byte agent takes to say something when started directly."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        with subprocess.Popen(["sh", "-c", "echo ready; exec cat"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, start_new_session=True) as agent:  # fmt: skip
            assert agent.stdout is not None
            assert agent.stdin is not None
            agent.stdout.readline()
            times.append((time.perf_counter() - start) * 1000)
            agent.stdin.close()
    times.sort()
    return {"count": count, "p50_ms": times[len(times) // 2], "p99_ms": times[-1]}


# -- measurements, the relay alone -----------------------------------------------------


def mean_of(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rates and percentiles averaged over rounds; the first failure, if any."""
    failed = [run for run in runs if "error" in run]
    if failed:
        return failed[0]
    keys = [k for k in ("rate", "p50_ms", "p99_ms", "cpu_us_per_message") if k in runs[0]]
    return {k: sum(run[k] for run in runs) / len(runs) for k in keys} | {"rounds": len(runs)}


def measure_resume_profile(plan: Plan, results: Results) -> None:
    """200 B round trips with the resume profile off and on, alternating (issue 12)."""
    with relay("cat") as server:
        for inflight in (1, 64):
            off: list[dict[str, Any]] = []
            on: list[dict[str, Any]] = []
            for _ in range(plan.rounds):
                off.append(rate_and_cpu(server, plan, inflight))
                on.append(rate_and_cpu(server, plan, inflight, resume=True))
            results.put(server.name, f"resume_off_200B_x{inflight}", mean_of(off))
            results.put(server.name, f"resume_on_200B_x{inflight}", mean_of(on))
    results.put("acp-relay", "resume_gap", resume_gap.measure(plan.resume_trials, STREAMER))


@contextmanager
def scraping(port: int, every: float) -> Iterator[list[int]]:
    """GET /metrics every ``every`` seconds while the block runs; yields [scrapes, failures]."""
    counts = [0, 0]
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                ok = response.status == 200 and b"acp_relay" in response.read()
                conn.close()
                counts[0 if ok else 1] += 1
            except OSError:
                counts[1] += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield counts
    finally:
        stop.set()
        thread.join(timeout=10)


def measure_scrape_cost(plan: Plan, results: Results) -> None:
    """200 B x64 with and without a /metrics scrape loop, alternating (issue 16)."""
    with relay("cat") as server:
        off: list[dict[str, Any]] = []
        on: list[dict[str, Any]] = []
        scrapes = [0, 0]
        for _ in range(plan.rounds):
            off.append(rate_and_cpu(server, plan, 64))
            with scraping(server.port, plan.scrape_every) as counts:
                on.append(rate_and_cpu(server, plan, 64))
            scrapes = [a + b for a, b in zip(scrapes, counts, strict=True)]
        results.put(server.name, "scrape_off_200B_x64", mean_of(off))
        results.put(server.name, "scrape_on_200B_x64",
                    mean_of(on) | {"scrapes": scrapes[0], "scrape_failures": scrapes[1],
                                   "scrape_every_s": plan.scrape_every})  # fmt: skip


def measure_startup(plan: Plan, results: Results) -> None:
    """The plug for ``tests/bench/startup.py`` (exec -> listening, first reply of a warm
    agent), written apart: its ``put_figures(quick, put)`` calls ``put(server, key, value)``
    for each figure; its rows and targets are named in report.py's ``startup_rows``."""
    try:
        startup = importlib.import_module("tests.bench.startup")
    except ModuleNotFoundError as exc:
        if exc.name != "tests.bench.startup":
            raise
        return
    startup.put_figures(plan is QUICK, results.put)


# -- the run ---------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")), platform.processor())  # fmt: skip
    return {
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
        "kernel": platform.release(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip


Step = Callable[[Server, Plan, Results], None]


def each_server(peers: Peers, agent: str, steps: Sequence[Step], plan: Plan, results: Results,
                ceiling: bool = True) -> None:  # fmt: skip
    """Run ``steps`` against every server, each started afresh with ``agent``."""
    for name, start in peers.starts.items():
        if name == "ceiling" and not ceiling:
            continue
        try:
            with start(agent) as server:
                for step in steps:
                    step(server, plan, results)
        except RuntimeError as exc:  # it did not start
            results.put(name, "start", {"error": str(exc)})


def run(plan: Plan, only: str | None = None) -> Results:
    results = Results(machine())
    peers = prepare()
    results.missing = peers.missing
    sections: dict[str, Callable[[], None]] = {
        "rates": lambda: each_server(peers, "cat", [measure_rates, measure_bulk], plan, results),
        "streams": lambda: each_server(
            peers, STREAMER, [measure_streams], plan, results, ceiling=False
        ),
        "idle": lambda: each_server(
            peers, "cat", [measure_idle_memory], plan, results, ceiling=False
        ),
        "first_byte": lambda: first_byte(peers, plan, results),
        "resume": lambda: measure_resume_profile(plan, results),
        "scrape": lambda: measure_scrape_cost(plan, results),
        "startup": lambda: measure_startup(plan, results),
        "paths": lambda: features.measure_paths(
            results.put,
            updates=plan.paths_updates,
            size=plan.paths_size,
            rounds=plan.feature_rounds,
        ),
        "watchers": lambda: features.measure_watchers(
            results.put,
            updates=plan.watch_updates,
            watchers=plan.watchers,
            rounds=plan.feature_rounds,
        ),
        "watcher_memory": lambda: features.measure_watcher_memory(
            results.put, count=plan.memory_watchers
        ),
        "history": lambda: features.measure_history(
            results.put, updates=plan.flood_updates, rounds=plan.rounds
        ),
    }
    for name, section in sections.items():
        if only is None or name == only:
            print(f"-- {name}", file=sys.stderr, flush=True)
            section()
    return results


def first_byte(peers: Peers, plan: Plan, results: Results) -> None:
    results.put("agent", "own_start", agent_own_start_ms(plan.first_byte_count))
    each_server(peers, FIRST_BYTE_AGENT, [measure_first_byte], plan, results, ceiling=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, a smoke check")
    parser.add_argument("--only", help="one section: rates, streams, idle, first_byte, "
                        "resume, scrape, startup, paths, watchers, watcher_memory or "
                        "history")  # fmt: skip
    parser.add_argument("--out", type=Path, default=HERE / "results", help="output folder")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    results = run(plan, args.only)
    from tests.bench.report import markdown

    args.out.mkdir(parents=True, exist_ok=True)
    stem = "quick" if args.quick else "latest"
    payload = {
        "machine": results.machine,
        "plan": asdict(plan),
        "figures": results.figures,
        "missing": results.missing,
        "seconds": round(time.monotonic() - started),
    }
    (args.out / f"{stem}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(payload))
    print(markdown(payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
