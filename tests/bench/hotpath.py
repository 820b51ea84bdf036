"""The relay's small-message hot path, counted rather than timed: work per message.

    .venv/bin/python -m tests.bench.hotpath                    # calls and /proc counts
    .venv/bin/python -m tests.bench.hotpath --callgrind        # plus instructions (slow)
    .venv/bin/python -m tests.bench.hotpath --top 25 --json out.json

Wall-clock rates move with the machine's load; these figures do not, or much less. Each
scenario opens one socket to a relay running ``cat`` (or the streaming agent), warms it
up, then counts over a fixed number of messages, in the relay's process only:

- ``calls``: Python function calls per message (:mod:`cProfile`, built-ins included),
  and the functions that make most of them;
- ``wakeups``: the times the relay's threads went to sleep (voluntary context switches),
  per message: each one is an ``epoll_wait`` that found nothing to do;
- ``syscalls``: read- and write-like system calls per message (``/proc/PID/io``);
- ``instructions`` (``--callgrind``): user-space instructions per message, under
  valgrind's callgrind, with the functions that execute most of them; and, to compare,
  what websockets' sans-I/O protocol alone (the frame codec the relay keeps) costs per
  message (``websockets_codec``);
- ``samples`` (``--py-spy``): where the wall-clock time goes, by whose code was running.

Scenarios: ``echo_x1`` and ``echo_x64`` (200 B messages through ``cat`` and back, 1 or
64 in flight: both directions), ``stream`` (agent to client only: the streaming agent's
notifications of 200 B), and ``resume_x1``, ``resume_x64``: the echoes under the resume
profile (``acp-relay.resume.v1``).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.commands.ticket import fresh_ticket
from tests.bench.peers import PEERS_VENV, py_spy
from tests.bench.run import HERE, SECRET, STREAMER, wait_for_port, with_group_killed
from tests.support.sockets import free_port


@dataclass(frozen=True)
class Scenario:
    """One fixed workload: a load generator command and the messages it counts."""

    name: str
    agent: str
    command: dict[str, Any]
    messages: int  # relay-side messages in the counted part: frames in plus frames out

    def loadgen(self, url: str) -> dict[str, Any]:
        return {**self.command, "url": url, "gate": True, "timeout": 600}


def scenarios(count: int) -> list[Scenario]:
    """The workloads, ``count`` round trips (or notifications) each (x1: a quarter)."""
    echo = {"command": "rate", "size": 200}
    return [
        Scenario("echo_x1", "cat", {**echo, "inflight": 1, "count": count // 4,
                                    "warmup": 200}, 2 * (count // 4)),
        Scenario("echo_x64", "cat", {**echo, "inflight": 64, "count": count,
                                     "warmup": 2000}, 2 * count),
        Scenario("stream", STREAMER, {"command": "stream", "size": 200, "updates": count,
                                      "warmup": 1000}, count),
        Scenario("resume_x1", "cat", {**echo, "inflight": 1, "count": count // 4,
                                      "warmup": 200, "resume": True}, 2 * (count // 4)),
        Scenario("resume_x64", "cat", {**echo, "inflight": 64, "count": count,
                                       "warmup": 2000, "resume": True}, 2 * count),
    ]  # fmt: skip


def proc_counts(pid: int) -> dict[str, int]:
    """Voluntary context switches of every thread, and the syscall counts of /proc/PID/io."""
    switches = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                switches += int(line.split()[1])
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return {"wakeups": switches, "syscalls_read": int(io["syscr"]),
            "syscalls_write": int(io["syscw"])}  # fmt: skip


@contextmanager
def relay_process(agent: str, prefix: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    argv = [*prefix, "serve", "--listen", f"127.0.0.1:{port}", "--agent", agent,
            "--log-level", "warning"]  # fmt: skip
    env = dict(os.environ, ACP_RELAY_SECRET=SECRET)
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_port(port, seconds=120)
        yield process, port
    finally:
        with_group_killed(process)


def counted(scenario: Scenario, port: int, on_warm: Any, on_done: Any) -> dict[str, Any]:
    """Run the scenario's load generator; call ``on_warm``/``on_done`` around the counted part."""
    url = f"ws://127.0.0.1:{port}/acp?ticket={fresh_ticket(SECRET, subject='bench')}"
    argv = ["node", str(HERE / "loadgen.mjs"), json.dumps(scenario.loadgen(url))]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as gen:
        assert gen.stdin is not None
        assert gen.stdout is not None
        first = json.loads(gen.stdout.readline() or '{"error": "no answer"}')
        if "warm" not in first:
            raise RuntimeError(f"{scenario.name}: {first}")
        before = on_warm()
        gen.stdin.write("go\n")
        gen.stdin.flush()
        result: dict[str, Any] = json.loads(gen.stdout.readline() or '{"error": "no result"}')
        after = on_done()
    if "error" in result:
        raise RuntimeError(f"{scenario.name}: {result['error']}")
    return {"loadgen": result, "before": before, "after": after}


def profile_calls(scenario: Scenario, top: int) -> dict[str, Any]:
    """Python calls per message and /proc counts, under cProfile."""
    stats_file = Path(tempfile.mkstemp(suffix=".pstats")[1])
    prefix = [sys.executable, "-m", "tests.bench.profiled", str(stats_file), "--"]
    with relay_process(scenario.agent, prefix) as (process, port):

        def warm() -> dict[str, int]:
            counts = proc_counts(process.pid)
            process.send_signal(signal.SIGUSR1)
            return counts

        def done() -> dict[str, int]:
            counts = proc_counts(process.pid)
            stats_file.write_bytes(b"")
            process.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 30
            while not stats_file.stat().st_size and time.monotonic() < deadline:
                time.sleep(0.05)
            return counts

        run = counted(scenario, port, warm, done)
    time.sleep(0.2)  # the dump may still be written
    stats = pstats.Stats(str(stats_file))
    stats_file.unlink()
    n = scenario.messages
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    calls = sum(entry[1] for entry in raw.values())
    functions = sorted(raw.items(), key=lambda kv: kv[1][1], reverse=True)[:top]
    per = {k: (run["after"][k] - run["before"][k]) / n for k in run["before"]}
    parts: dict[str, float] = {}
    for key, entry in raw.items():
        part = _part(_name(key))
        parts[part] = parts.get(part, 0) + entry[1] / n
    return {
        "messages": n,
        "python_calls_per_message": round(calls / n, 2),
        "calls_by_part": {k: round(v, 2) for k, v in sorted(parts.items())},
        **{f"{k}_per_message": round(v, 3) for k, v in per.items()},
        "top_calls": [
            {
                "function": _name(key),
                "calls_per_message": round(entry[1] / n, 3),
                "own_s": round(entry[2], 3),
            }
            for key, entry in functions
        ],
        "loadgen": run["loadgen"],
    }


def _part(name: str) -> str:
    """Whose code a profiled function is: the relay's, websockets', the standard library's
    (asyncio and the rest), or a built-in (C) function or method."""
    if name.startswith("relay/"):
        return "relay"
    if name.startswith("websockets/"):
        return "websockets"
    if name.startswith("<"):
        return "built-in"
    return "stdlib"


def _name(key: tuple[str, int, str]) -> str:
    path, line, function = key
    if path == "~":
        return function
    short = re.sub(r"^.*/(site-packages|lib/python3\.\d+)/", "", path)
    short = re.sub(r"^.*?/(relay/)", r"\1", short)
    short = short.replace(str(Path.cwd()) + "/", "")
    return f"{short}:{line}({function})"


def profile_samples(scenario: Scenario, top: int) -> dict[str, Any]:
    """Where the relay's time goes (py-spy, sampled): shares of the busy samples by whose
    code was running (self time), and the share under websockets' frame codec."""
    spy = py_spy()
    if spy is None:
        return {"error": f"py-spy could not be installed in {PEERS_VENV}"}
    out = Path(tempfile.mkstemp(suffix=".txt")[1])
    prefix = [sys.executable, "-m", "relay"]
    with relay_process(scenario.agent, prefix) as (process, port):
        spying: list[subprocess.Popen[bytes]] = []

        def start() -> dict[str, int]:
            argv = [str(spy), "record", "--pid", str(process.pid), "--format", "raw",
                    "--rate", "250", "--nonblocking", "--output", str(out)]  # fmt: skip
            spying.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL))  # fmt: skip
            time.sleep(1.0)  # py-spy attaches
            return {}

        def stop() -> dict[str, int]:
            spying[0].send_signal(signal.SIGINT)
            spying[0].wait(timeout=30)
            return {}

        counted(scenario, port, start, stop)
    stacks = [line.rsplit(" ", 1) for line in out.read_text().splitlines() if line.strip()]
    out.unlink()
    total = sum(int(count) for _, count in stacks) or 1
    parts: dict[str, int] = {}
    leaves: dict[str, int] = {}
    codec = 0
    for stack, count in stacks:
        frames = stack.split(";")
        leaf = _sampled(frames[-1])
        parts[_part(leaf)] = parts.get(_part(leaf), 0) + int(count)
        leaves[leaf] = leaves.get(leaf, 0) + int(count)
        if any("websockets/frames.py" in frame for frame in frames):
            codec += int(count)
    return {
        "samples": total,
        "self_share_by_part": {k: round(v / total, 3) for k, v in sorted(parts.items())},
        "share_under_websockets_frames_py": round(codec / total, 3),
        "top_self": [
            {"function": leaf, "share": round(count / total, 3)}
            for leaf, count in sorted(leaves.items(), key=lambda kv: -kv[1])[:top]
        ],
    }


def _sampled(frame: str) -> str:
    """A py-spy frame, ``function (path:line)``, as ``_name`` spells it."""
    found = re.match(r"(.*) \((.*):(\d+)\)$", frame)
    if found is None:
        return frame
    function, path, line = found.groups()
    return _name((path, int(line), function))


def profile_syscalls(scenario: Scenario) -> dict[str, Any]:
    """System calls per message of the relay's threads (``strace -c``): each
    ``epoll_wait`` is a turn of the event loop, each ``write``/``writev`` a write."""
    if shutil.which("strace") is None:
        return {"error": "strace is not installed (tests/system/install-packages strace)"}
    out = Path(tempfile.mkstemp(suffix=".txt")[1])
    with relay_process(scenario.agent, [sys.executable, "-m", "relay"]) as (process, port):
        tracing: list[subprocess.Popen[bytes]] = []

        def start() -> dict[str, int]:
            argv = ["strace", "-f", "-c", "-o", str(out), "-p", str(process.pid)]
            tracing.append(subprocess.Popen(argv, stderr=subprocess.DEVNULL))
            time.sleep(1.0)  # strace attaches
            return {}

        def stop() -> dict[str, int]:
            tracing[0].send_signal(signal.SIGINT)
            tracing[0].wait(timeout=30)
            return {}

        counted(scenario, port, start, stop)
    table = out.read_text()
    out.unlink()
    calls: dict[str, int] = {}
    for row in re.findall(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", table, re.M):
        calls[row[1]] = int(row[0])
    n = scenario.messages
    ordered = sorted(calls.items(), key=lambda kv: -kv[1])
    return {k: round(v / n, 3) for k, v in ordered if v >= n / 100 or k == "total"}


CODEC_LOOP = """
import sys
from websockets.frames import Frame, Opcode
from websockets.protocol import OPEN, SERVER, Protocol
count, receive = int(sys.argv[1]), sys.argv[2] == "both"
payload = b'{"jsonrpc":"2.0","method":"bench","params":{"i":1,"pad":"' + b"x" * 140 + b'"}}'
wire = Frame(Opcode.TEXT, payload).serialize(mask=True, extensions=[])
protocol = Protocol(SERVER, state=OPEN, max_size=None)
for _ in range(count // 100):
    for _ in range(100):
        if receive:
            protocol.receive_data(wire)
            [frame] = protocol.events_received()
        protocol.send_text(payload)
    protocol.data_to_send()
"""


def codec_instructions() -> dict[str, Any]:
    """What websockets' sans-I/O protocol alone costs per 200 B message, under callgrind:
    a frame received and one sent (an echo's share at the relay: two messages), or one
    sent (streaming). The difference of two runs, so start-up cancels out."""
    if shutil.which("valgrind") is None:
        return {"error": "valgrind is not installed"}
    found: dict[str, Any] = {}
    for mode, messages_per_loop in (("both", 2), ("send", 1)):
        totals = []
        for count in (2_000, 12_000):
            with tempfile.TemporaryDirectory() as folder:
                out = Path(folder) / "callgrind.out"
                argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "-q",
                        sys.executable, "-c", CODEC_LOOP, str(count), mode]  # fmt: skip
                subprocess.run(argv, check=True, capture_output=True)
                annotated = subprocess.run(["callgrind_annotate", str(out)], check=True,
                                           capture_output=True, text=True).stdout  # fmt: skip
            totals.append(_number(re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS",
                                            annotated)))  # fmt: skip
        per_loop = (totals[1] - totals[0]) / 10_000
        found[f"{mode}_instructions_per_message"] = round(per_loop / messages_per_loop)
    return found


def _number(found: re.Match[str] | None) -> int:
    if found is None:
        raise RuntimeError("callgrind_annotate printed no program total")
    return int(found[1].replace(",", ""))


def profile_instructions(scenario: Scenario, top: int, keep: Path | None) -> dict[str, Any]:
    """User-space instructions per message of the relay process, under callgrind."""
    if shutil.which("valgrind") is None:
        return {"error": "valgrind is not installed (tests/system/install-packages valgrind)"}
    folder = Path(tempfile.mkdtemp())
    out = folder / "callgrind.out"
    prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
              "--trace-children=no", "-q", sys.executable, "-m", "relay"]  # fmt: skip
    with relay_process(scenario.agent, prefix) as (process, port):

        def control(option: str) -> dict[str, int]:
            subprocess.run(["callgrind_control", option, str(process.pid)], check=True,
                           capture_output=True)  # fmt: skip
            return {}

        counted(scenario, port, lambda: control("-z"), lambda: control("-d"))
    dumps = sorted(folder.glob("callgrind.out*"), key=lambda p: p.stat().st_mtime)
    dump = next(p for p in dumps if p.name != "callgrind.out") if len(dumps) > 1 else dumps[-1]
    argv = ["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", str(dump)]
    annotated = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(dump, keep / f"callgrind-{scenario.name}.out")
        (keep / f"callgrind-{scenario.name}.txt").write_text(annotated)
    shutil.rmtree(folder)
    total = _number(re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", annotated))
    # Entries over 99 % are callgrind's recursion cycles (the interpreter calling itself).
    rows = re.findall(r"^\s*([\d,]+) \(\s*([\d.]+)%\)\s+(\S.*)$", annotated, re.M)
    functions = [(ir, name) for ir, share, name in rows if float(share) < 99][:top]
    n = scenario.messages
    return {
        "messages": n,
        "instructions_per_message": round(total / n),
        "top_instructions": [
            {"function": _short(name), "per_message": round(int(ir.replace(",", "")) / n)}
            for ir, name in functions
        ],
    }


def _short(name: str) -> str:
    """``file:function [object]`` cut to the function and the object's base name."""
    where, _, rest = name.strip().partition(":")
    function, _, obj = rest.partition(" [")
    return f"{function} ({Path(obj.rstrip(']')).name or Path(where).name})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000, help="round trips at 64 in flight")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions")
    parser.add_argument("--only", help="one scenario by name")
    parser.add_argument("--top", type=int, default=15, help="functions listed per scenario")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--keep", type=Path, help="keep callgrind's dumps in this folder")
    parser.add_argument("--py-spy", action="store_true", help="also sample with py-spy")
    parser.add_argument("--strace", action="store_true", help="also count system calls")
    args = parser.parse_args(argv)
    installer = HERE.parent / "system" / "install-packages"
    for wanted, package in ((args.callgrind, "valgrind"), (args.strace, "strace")):
        if wanted:
            subprocess.run([str(installer), package], check=False)
    if not (HERE / "node_modules" / "ws").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(HERE)], check=True)
    found: dict[str, Any] = {}
    for scenario in scenarios(args.count):
        if args.only and scenario.name != args.only:
            continue
        found[scenario.name] = {"calls": profile_calls(scenario, args.top)}
        if args.callgrind:
            small = scenarios(args.count // 10)
            slow = next(s for s in small if s.name == scenario.name)
            found[scenario.name]["instructions"] = profile_instructions(slow, args.top, args.keep)
        if args.py_spy:
            found[scenario.name]["samples"] = profile_samples(scenario, args.top)
        if args.strace:
            found[scenario.name]["syscalls_per_message"] = profile_syscalls(scenario)
        print(json.dumps({scenario.name: found[scenario.name]}, indent=1), flush=True)
    if args.callgrind and not args.only:
        found["websockets_codec"] = codec_instructions()
        print(json.dumps({"websockets_codec": found["websockets_codec"]}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
