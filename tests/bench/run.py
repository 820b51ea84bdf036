"""Benchmark: acp-relay side by side with websocketd and the load generator's own ceiling.

Run (from the project root, after the README's test set-up):

    .venv/bin/python -m tests.bench.run            # full run, about two minutes
    .venv/bin/python -m tests.bench.run --quick    # a few seconds, for a smoke check

Every server runs ``cat`` as its agent, so the relay is what is measured. The load
generator (``loadgen.mjs``, Node.js + ws) is measured against a trivial echo server with
no child process (``echo.mjs``) in the same run: that is the ceiling. Ratios are computed
pair by pair within the run, since absolute figures vary with the machine's load.
Writes ``results/latest.json`` and ``results/latest.md``. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.server import fresh_ticket
from tests.support.processes import rss_kib
from tests.support.sockets import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SECRET = "bench-secret-0123456789abcdef0123"
FIRST_BYTE_AGENT = "sh -c 'echo ready; exec cat'"
STREAMER = f"{sys.executable} {HERE / 'streamer.py'}"  # the streaming agent
KiB, MiB = 1024, 1024 * 1024


@dataclass(frozen=True)
class Plan:
    """How long and how much each measurement runs."""

    rate_seconds: float
    bulk: tuple[tuple[int, int, int], ...]  # (size, count, in flight)
    bulk_timeout: float
    idle_sockets: int
    first_byte_count: int


FULL = Plan(
    5.0,
    ((32 * KiB, 2000, 1), (32 * KiB, 4000, 8), (MiB, 200, 1), (MiB, 400, 4),
     (16 * MiB, 12, 1), (16 * MiB, 24, 2)),
    30.0, 1000, 50,
)  # fmt: skip
QUICK = Plan(
    0.5,
    ((32 * KiB, 100, 1), (32 * KiB, 200, 8), (MiB, 10, 1), (MiB, 20, 4),
     (16 * MiB, 2, 1), (16 * MiB, 2, 2)),
    10.0, 20, 5,
)  # fmt: skip


@dataclass
class Server:
    """A running server under test: how to make URLs for it and which pid to watch."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    ticketed: bool = False
    path: str = "/"

    def url(self) -> str:
        base = f"ws://127.0.0.1:{self.port}{self.path}"
        if not self.ticketed:
            return base
        ticket = fresh_ticket(SECRET, subject="bench")
        return f"{base}?ticket={ticket}"


@dataclass
class Results:
    """Figures by server name, plus the run's context."""

    machine: dict[str, Any]
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def put(self, server: str, key: str, value: Any) -> None:
        self.figures.setdefault(server, {})[key] = value
        print(f"  {server:10} {key:28} {json.dumps(value)}", file=sys.stderr, flush=True)


# -- processes -------------------------------------------------------------------


def wait_for_port(port: int, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {seconds} s")


@contextmanager
def running(
    argv: Sequence[str], env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        with_group_killed(process)


def with_group_killed(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=5)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


@contextmanager
def relay(agent: str) -> Iterator[Server]:
    port = free_port()
    env = dict(os.environ, ACP_RELAY_SECRET=SECRET)
    argv = [sys.executable, "-m", "relay", "serve", "--listen", f"127.0.0.1:{port}",
            "--agent", agent, "--max-connections", "2000", "--log-level", "warning"]  # fmt: skip
    with running(argv, env) as process:
        wait_for_port(port)
        yield Server("acp-relay", process, port, ticketed=True, path="/acp")


@contextmanager
def websocketd(agent: str) -> Iterator[Server]:
    port = free_port()
    argv = ["websocketd", "--address=127.0.0.1", f"--port={port}", "--loglevel=error",
            "sh", "-c", f"exec {agent}"]  # fmt: skip
    with running(argv) as process:
        wait_for_port(port)
        yield Server("websocketd", process, port)


@contextmanager
def ceiling() -> Iterator[Server]:
    port = free_port()
    with running(["node", str(HERE / "echo.mjs"), str(port)]) as process:
        wait_for_port(port)
        yield Server("ceiling", process, port)


def loadgen(command: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
    argv = ["node", str(HERE / "loadgen.mjs"), json.dumps(command)]
    done = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if not last:
        return {"error": f"load generator failed: {done.stderr.strip()[-500:]}"}
    result: dict[str, Any] = json.loads(last)
    return result


# -- /proc readings --------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- measurements ----------------------------------------------------------------


def measure_rates(server: Server, plan: Plan, results: Results) -> None:
    for inflight in (1, 64):
        got = loadgen({"command": "rate", "url": server.url(), "size": 200,
                       "inflight": inflight, "seconds": plan.rate_seconds})  # fmt: skip
        results.put(server.name, f"rate_200B_x{inflight}", got)


def measure_bulk(server: Server, plan: Plan, results: Results) -> None:
    for size, count, inflight in plan.bulk:
        cpu_before = cpu_seconds(server.process.pid)
        got = loadgen({"command": "bulk", "url": server.url(), "size": size, "count": count,
                       "inflight": inflight, "timeout": plan.bulk_timeout})  # fmt: skip
        if size == MiB and "error" not in got:
            relayed_gb = 2 * size * got["messages"] / 1e9  # in and out of the relay
            got["cpu_s_per_gb"] = (cpu_seconds(server.process.pid) - cpu_before) / relayed_gb
        results.put(server.name, f"bulk_{label(size)}_x{inflight}", got)


def measure_idle_memory(server: Server, plan: Plan, results: Results) -> None:
    loadgen({"command": "idle", "urls": [server.url()]})  # warm up lazily created state
    time.sleep(0.5)
    before = rss_kib(server.process.pid)
    urls = [server.url() for _ in range(plan.idle_sockets)]
    command = Path(tempfile.mkstemp(suffix=".json")[1])
    command.write_text(json.dumps({"command": "idle", "urls": urls}))  # too long for argv
    argv = ["node", str(HERE / "loadgen.mjs"), f"@{command}"]
    holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdin is not None
    opened = json.loads(holder.stdout.readline() or '{"error": "no answer"}')
    time.sleep(1.0)  # let the server settle after the burst of opens
    after = rss_kib(server.process.pid)
    holder.stdin.close()
    holder.wait(timeout=60)
    command.unlink()
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


def label(size: int) -> str:
    return f"{size // MiB}MiB" if size >= MiB else f"{size // KiB}KiB"


# -- the run ---------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")), platform.processor())  # fmt: skip
    return {
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
        "kernel": platform.release(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip


def prepare() -> bool:
    """Install the load generator's npm packages and websocketd; False if websocketd is out."""
    if not (HERE / "node_modules" / "ws").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(HERE)], check=True)
    installer = ROOT / "tests" / "system" / "install-packages"
    subprocess.run([str(installer), "websocketd"], check=False)
    return shutil.which("websocketd") is not None


def run(plan: Plan) -> Results:
    results = Results(machine())
    have_websocketd = prepare()
    with ceiling() as server:
        measure_rates(server, plan, results)
        measure_bulk(server, plan, results)
    servers = [relay, websocketd] if have_websocketd else [relay]
    for start in servers:
        with start("cat") as server:
            measure_rates(server, plan, results)
            measure_bulk(server, plan, results)
        with start("cat") as server:  # a fresh process: RSS not inflated by the bulk runs
            measure_idle_memory(server, plan, results)
    results.put("agent", "own_start", agent_own_start_ms(plan.first_byte_count))
    with relay(FIRST_BYTE_AGENT) as server:
        measure_first_byte(server, plan, results)
    if have_websocketd:
        with websocketd(FIRST_BYTE_AGENT) as server:
            measure_first_byte(server, plan, results)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts, a smoke check")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="output folder")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    results = run(plan)
    from tests.bench.report import markdown

    args.out.mkdir(parents=True, exist_ok=True)
    stem = "quick" if args.quick else "latest"
    payload = {"machine": results.machine, "plan": vars(plan), "figures": results.figures}
    (args.out / f"{stem}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(payload))
    print(markdown(payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
