"""Benchmark rows of the relay alone, for what it does to a stream beyond carrying it.

- ``paths`` (issue 21): streaming where every notification is a ``tool_call_update``
  whose ``locations[0].path`` lies under a ``--cwd-map``'ed box folder (the relay
  translates each to the editor's path, under the default ``--files box``), against the
  same streaming of plain ``agent_message_chunk`` text, alternating on one relay: the
  rate and the relay's CPU per message, so the translation's cost per message shows.
- ``watchers`` (issue 23): streaming to the controlling socket with no watcher and with
  ``watchers`` watchers attached (``acp-relay.watch.v1``, each reading everything),
  alternating on one relay: the controller's rate and the relay's CPU per controller
  message, until every watcher has read the stream too. Goal: with 4 watchers, the
  controller's rate at least 0.8x its rate without. The load generator's own CPU per
  message (the controller's process and the watchers') is kept beside it: on a machine
  of few cores the clients reading five streams compete with the relay for them.
- ``watcher_memory``: the relay's RSS with ``count`` watchers attached to one
  connection, idle but reading, over its RSS without them: KiB per watcher.
- ``history``: a connection whose agent floods ``updates`` lines of 200 B with no
  watcher, sharing off (``--max-watchers 0``) and on (``--watch-history`` at its 1 MiB
  default): the relay's RSS before, at its peak, and after, and the history's bytes
  (``acp_relay_watch_history_bytes``) at the end: the history keeps the relay bounded.

Each measurement brackets the relay's CPU with the load generator's gate: the socket
open, the agent started and a first short prompt answered (the warm-up) before the clock
and the CPU counter start. Every function hands its figures to ``put(server, key,
value)``, the main run's :meth:`tests.bench.run.Results.put`.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from relay.commands.ticket import fresh_ticket
from tests.bench.client import cpu_seconds, loadgen_file
from tests.bench.peers import SECRET, STREAMER, Server, relay
from tests.bench.report import RELAY
from tests.support.processes import rss_kib

Put = Callable[[str, str, Any], None]
EDITOR_ROOT = "/Users/bench"  # the editor's side of the --cwd-map rule of the paths rows
WARMUP = 100  # notifications of the prompt answered before the measured one
TIMEOUT = 300  # seconds any one load generator command may take
SETTLE = 1.0  # seconds the relay is left alone before its RSS is read


# -- the load generator's processes --------------------------------------------------------


class Controller:
    """A controlling socket streaming one prompt (loadgen ``stream``), held at its gate:
    connected, warmed up, waiting for :meth:`release`."""

    def __init__(self, server: Server, **command: Any) -> None:
        stream = {"command": "stream", "url": server.url(), "size": 200, "warmup": WARMUP,
                  "gate": True, "timeout": TIMEOUT, **command}  # fmt: skip
        self.argv = loadgen_file(stream)
        self.process = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        warm = self.line()
        self.error: str | None = warm.get("error")
        self.connection: str | None = warm.get("connection")

    def line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        text = self.process.stdout.readline()
        got: dict[str, Any] = json.loads(text) if text.strip() else {"error": "no answer"}
        return got

    def release(self) -> dict[str, Any]:
        """Start the measured prompt; its result once every notification came."""
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return self.line()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        Path(self.argv[-1][1:]).unlink(missing_ok=True)


@contextmanager
def controlling(server: Server, **command: Any) -> Iterator[Controller]:
    controller = Controller(server, **command)
    try:
        yield controller
    finally:
        controller.close()


def watch_url(server: Server, connection: str) -> str:
    """A watcher's URL for ``connection``, with a fresh watcher's ticket."""
    ticket = fresh_ticket(SECRET, subject="bench-watcher", watch=connection)
    return f"ws://127.0.0.1:{server.port}{server.path}?ticket={ticket}"


class Watchers:
    """``count`` watchers of one connection (loadgen ``watch``), each reading everything;
    constructed once every one has read the history."""

    def __init__(self, server: Server, connection: str, count: int, until: int | None) -> None:
        urls = [watch_url(server, connection) for _ in range(count)]
        command: dict[str, Any] = {"command": "watch", "urls": urls, "timeout": TIMEOUT}
        if until is not None:
            command["until"] = until
        self.argv = loadgen_file(command)
        self.process = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        opened = self.line()
        self.error: str | None = opened.get("error")

    def line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        text = self.process.stdout.readline()
        got: dict[str, Any] = json.loads(text) if text.strip() else {"error": "no answer"}
        return got

    def close(self) -> dict[str, Any]:
        """Detach them all; the frames each read and how each was closed (null: by us)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        final = self.line()
        self.process.wait(timeout=30)
        Path(self.argv[-1][1:]).unlink(missing_ok=True)
        return final


@contextmanager
def watching(
    server: Server, connection: str, count: int, until: int | None = None
) -> Iterator[Watchers]:
    watchers = Watchers(server, connection, count, until)
    try:
        yield watchers
    finally:
        if watchers.process.poll() is None:
            watchers.process.kill()
            watchers.process.wait()
        Path(watchers.argv[-1][1:]).unlink(missing_ok=True)


def averaged(rounds: Sequence[dict[str, Any]], *keys: str) -> dict[str, Any]:
    """The mean of ``keys`` over the rounds, and each round; the first failure, if any."""
    failed = [got for got in rounds if "error" in got]
    if failed:
        return failed[0] | {"rounds": list(rounds)}
    means = {key: sum(got[key] for got in rounds) / len(rounds) for key in keys}
    return means | {"rounds": list(rounds)}


# -- paths: tool-call locations translated ----------------------------------------------


def gated_stream(server: Server, updates: int, **command: Any) -> dict[str, Any]:
    """One measured prompt of ``updates`` notifications; its rate and the relay's CPU µs
    per message."""
    with controlling(server, updates=updates, **command) as controller:
        if controller.error:
            return {"error": controller.error}
        before = cpu_seconds(server.process.pid)
        got = controller.release()
        used = cpu_seconds(server.process.pid) - before
    if "error" not in got and got.get("messages"):
        got["cpu_us_per_message"] = used * 1e6 / got["messages"]
    return got


def translated(sample: str | None, box: Path) -> str | None:
    """Why the first tool-call notification was not translated, if it was not."""
    if sample is None:
        return "no notification sampled"
    if f'"{EDITOR_ROOT}/project/' not in sample or str(box) in sample:
        return f"the location was not translated: {sample[:300]}"
    return None


def measure_paths(put: Put, *, updates: int, size: int, rounds: int) -> None:
    """Text chunks against tool-call updates with a location, alternating on one relay."""
    with tempfile.TemporaryDirectory() as tmp:
        box = Path(tmp) / "box"
        box.mkdir()
        agent = f"{STREAMER} --box {box}"
        with relay(agent, "--cwd-map", f"{EDITOR_ROOT}={box}") as server:
            check = gated_stream(server, 10, size=size, mode="tool", sample=True)
            why = check.get("error") or translated(check.get("first"), box)
            if why:
                put(RELAY, "paths_tool", {"error": why})
                return
            text: list[dict[str, Any]] = []
            tool: list[dict[str, Any]] = []
            for _ in range(rounds):
                text.append(gated_stream(server, updates, size=size, mode="text"))
                tool.append(gated_stream(server, updates, size=size, mode="tool"))
    keys = ("rate", "cpu_us_per_message")
    put(RELAY, "paths_text", averaged(text, *keys) | {"size": size})
    put(RELAY, "paths_tool", averaged(tool, *keys) | {"size": size, "sample": check["first"]})


# -- watchers: the controller's stream with watchers attached ----------------------------


def watched_stream(server: Server, updates: int, count: int) -> dict[str, Any]:
    """One measured prompt with ``count`` watchers attached after the warm-up: the
    controller's rate, and the relay's CPU µs per controller message until every watcher
    has read the answer too."""
    with controlling(server, updates=updates) as controller:
        if controller.error or controller.connection is None:
            return {"error": controller.error or "no Acp-Connection-Id in the 101"}
        if count == 0:
            pids: tuple[int, ...] = (server.process.pid, controller.process.pid)
            before = [cpu_seconds(pid) for pid in pids]
            got = controller.release()
            used = [cpu_seconds(pid) - was for pid, was in zip(pids, before, strict=True)]
            seen: dict[str, Any] = {}
        else:
            with watching(server, controller.connection, count, until=1) as watchers:
                if watchers.error:
                    return {"error": f"watchers: {watchers.error}"}
                pids = (server.process.pid, controller.process.pid, watchers.process.pid)
                before = [cpu_seconds(pid) for pid in pids]
                got = controller.release()
                done = watchers.line()
                used = [cpu_seconds(pid) - was for pid, was in zip(pids, before, strict=True)]
                seen = watchers.close()
                if "error" in done:
                    got.setdefault("error", f"watchers: {done['error']}")
    if "error" not in got and got.get("messages"):
        got["cpu_us_per_message"] = used[0] * 1e6 / got["messages"]
        got["clients_cpu_us_per_message"] = sum(used[1:]) * 1e6 / got["messages"]
    frames = seen.get("frames", [])
    closed = [code for code in seen.get("closed", []) if code is not None]
    return got | {"watchers": count, "watcher_frames_min": min(frames, default=None),
                  "watchers_closed": closed}  # fmt: skip


def measure_watchers(put: Put, *, updates: int, watchers: int, rounds: int) -> None:
    """The controller's stream with no watcher and with ``watchers``, alternating."""
    alone: list[dict[str, Any]] = []
    watched: list[dict[str, Any]] = []
    with relay(STREAMER, "--max-watchers", str(max(watchers, 1))) as server:
        for _ in range(rounds):
            alone.append(watched_stream(server, updates, 0))
            watched.append(watched_stream(server, updates, watchers))
    keys = ("rate", "cpu_us_per_message", "clients_cpu_us_per_message")
    put(RELAY, "watchers_0", averaged(alone, *keys))
    put(RELAY, f"watchers_{watchers}", averaged(watched, *keys) | {"watchers": watchers})


# -- memory per watcher ------------------------------------------------------------------


def measure_watcher_memory(put: Put, *, count: int) -> None:
    """The relay's RSS with ``count`` watchers reading one idle connection, per watcher."""
    with (
        relay(STREAMER, "--max-watchers", str(count)) as server,
        controlling(server, updates=1) as controller,
    ):
        if controller.error or controller.connection is None:
            put(RELAY, f"watcher_memory_{count}", {"error": controller.error or "no id"})
            return
        with watching(server, controller.connection, 1) as first:  # lazily made state
            first.close()
        time.sleep(SETTLE)
        before = rss_kib(server.process.pid)
        with watching(server, controller.connection, count) as watchers:
            if watchers.error:
                put(RELAY, f"watcher_memory_{count}", {"error": watchers.error})
                return
            time.sleep(SETTLE)
            after = rss_kib(server.process.pid)
            seen = watchers.close()
        controller.release()
    closed = [code for code in seen.get("closed", []) if code is not None]
    put(RELAY, f"watcher_memory_{count}", {
        "watchers": count, "rss_before_kib": before, "rss_after_kib": after,
        "kib_per_watcher": round((after - before) / count, 1), "watchers_closed": closed,
    })  # fmt: skip


# -- the history under a flood ------------------------------------------------------------


@contextmanager
def peak_rss(pid: int, every: float = 0.02) -> Iterator[list[int]]:
    """Samples ``pid``'s RSS while the block runs; yields [peak KiB], filled in as it goes."""
    peak = [rss_kib(pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every):
            peak[0] = max(peak[0], rss_kib(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join(timeout=5)
        peak[0] = max(peak[0], rss_kib(pid))


def history_bytes(port: int) -> float | None:
    """``acp_relay_watch_history_bytes`` from the relay's /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    for line in text.splitlines():
        if line.startswith("acp_relay_watch_history_bytes "):
            return float(line.split()[1])
    return None


def flooded(updates: int, *flags: str) -> dict[str, Any]:
    """One connection streaming ``updates`` lines of 200 B with no watcher: the relay's RSS
    before the flood, at its peak, after it (the connection still open), and the history's
    bytes then."""
    with relay(STREAMER, *flags) as server:
        pid = server.process.pid
        with controlling(server, updates=updates, hold=True) as controller:
            if controller.error:
                return {"error": controller.error}
            time.sleep(SETTLE)
            before = rss_kib(pid)
            with peak_rss(pid) as peak:
                got = controller.release()
            time.sleep(SETTLE)
            after = rss_kib(pid)
            kept = history_bytes(server.port)
    if "error" in got:
        return got
    return {"messages": got["messages"], "mb": got["messages"] * 200 / 1e6,
            "rss_before_kib": before, "rss_peak_kib": peak[0], "rss_after_kib": after,
            "peak_growth_kib": peak[0] - before, "history_bytes": kept}  # fmt: skip


def measure_history(put: Put, *, updates: int, rounds: int) -> None:
    """The relay's memory under a flood, sharing off and on, alternating."""
    off: list[dict[str, Any]] = []
    on: list[dict[str, Any]] = []
    for _ in range(rounds):
        off.append(flooded(updates, "--max-watchers", "0"))
        on.append(flooded(updates))
    keys = ("rss_peak_kib", "peak_growth_kib", "rss_after_kib")
    put(RELAY, "history_off", highest(off, *keys, "history_bytes"))
    put(RELAY, "history_on", highest(on, *keys, "history_bytes"))


def highest(rounds: Sequence[dict[str, Any]], *keys: str) -> dict[str, Any]:
    """The highest of ``keys`` over the rounds (memory: the worst is the figure), and each
    round; the first failure, if any."""
    failed = [got for got in rounds if "error" in got]
    if failed:
        return failed[0] | {"rounds": list(rounds)}
    worst = {key: max(got[key] or 0 for got in rounds) for key in keys}
    return worst | {"rounds": list(rounds)}
