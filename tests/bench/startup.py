"""Benchmark of start-up (issue 15): first reply with a slow-starting agent, exec to listening.

Run on its own (from the project root, after the README's test set-up):

    .venv/bin/python -m tests.bench.startup            # about 2 minutes
    .venv/bin/python -m tests.bench.startup --quick    # a few samples of each

or through :func:`measure` from the main runner. Four measurements, loopback only:

- **First reply**: socket opening (the client's connect, handshake included) to the
  agent's ``initialize`` reply, with an agent that takes ``AGENT_START`` seconds to start
  (tests/agents/slow_start.py): the relay starting it cold, the relay with
  ``--warm-agents 1`` (the agent waiting, its start over, before the socket opens), and
  websocketd (which starts it per socket). Beside them, the agent's own ``initialize``
  handling: the same request written to its stdin once it is ready, to the reply on its
  stdout. The goal: warm within 10 ms of the agent's own.
- **Exec to listening**: from the exec of the server to its port taking a TCP connection,
  and to its first HTTP answer on that connection (``GET /healthz``; websocketd's answer
  to ``GET /``), for acp-relay and websocketd. ``serve`` binds its port before it loads
  the server (relay/server/http/listener.py): a client that connects in between is answered once the
  server runs; both figures say how long that is.
- **connect's first byte**: from the exec of ``acp-relay connect`` to the first byte of
  its upgrade request reaching a listening socket.
- **ticket's exec to exit**: from the exec of ``acp-relay ticket`` to its exit, the ticket
  printed (``connect --ticket-command`` runs such a command before every connect and every
  resume).

Each figure is the median (and min, max) of its samples, in milliseconds. The relay's
bytecode is compiled first (:func:`compile_relay`), as ``pip install`` does for an
installed relay: an editable checkout run with ``PYTHONDONTWRITEBYTECODE`` set would
otherwise compile every module of the relay at each start.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from websockets.asyncio.client import connect

import relay
from relay.commands.ticket import fresh_ticket
from tests.bench.peers import SECRET, prepare, running, wait_for_port, websocketd
from tests.bench.report import RELAY, Check, Row
from tests.support.agents import SLOW_START
from tests.support.sockets import free_port

AGENT_START = 1.5  # seconds the test agent sleeps before it reads stdin
READY_MARGIN = 0.5  # seconds past a warm agent's start before a warm sample's socket opens
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
POLL = 0.002  # seconds between connection attempts while a server starts
Figures = dict[str, Any]


def compile_relay() -> None:
    """Write the relay package's bytecode (``__pycache__``), as installing it would."""
    compileall.compile_dir(os.path.dirname(relay.__file__), quiet=1)


def summary(samples: Sequence[float]) -> Figures:
    """Median, min and max of millisecond samples, rounded to 0.1 ms."""
    return {
        "count": len(samples),
        "median_ms": round(statistics.median(samples), 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
    }


def slow_agent() -> list[str]:
    return [*SLOW_START, str(AGENT_START)]


# -- first reply -----------------------------------------------------------------


async def first_reply_ms(url: str) -> tuple[float, float, float]:
    """Milliseconds from opening ``url`` to the ``initialize`` reply; the wall-clock times
    the socket was opened and the answering agent was ready."""
    opened_wall, opened = time.time(), time.perf_counter()
    async with connect(url, compression=None, open_timeout=30) as ws:
        await ws.send(json.dumps(INITIALIZE))
        reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
    elapsed = (time.perf_counter() - opened) * 1000
    return elapsed, opened_wall, reply["result"]["_meta"]["ready"]


def relay_argv(port: int, *extra: str) -> list[str]:
    """``acp-relay serve`` on 127.0.0.1:``port`` with the slow agent."""
    return [sys.executable, "-m", "relay", "serve", "--listen", f"127.0.0.1:{port}",
            "--agent", " ".join(slow_agent()), "--log-level", "warning", *extra]  # fmt: skip


@contextmanager
def relay_server(*extra: str) -> Iterator[int]:
    """A relay subprocess (``extra`` flags) on a free port; its port."""
    port = free_port()
    with running(relay_argv(port, *extra), dict(os.environ, ACP_RELAY_SECRET=SECRET)):
        wait_for_port(port)
        yield port


def relay_url(port: int) -> str:
    return f"ws://127.0.0.1:{port}/acp?ticket={fresh_ticket(SECRET, subject='bench')}"


def warm_count(port: int) -> int:
    """What the relay's /busy says of its warm agents."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /busy HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while b"}" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    count: int = json.loads(answer.partition(b"\r\n\r\n")[2])["warm"]
    return count


def wait_warm_and_ready(port: int, seconds: float = 30) -> None:
    """Until a warm agent waits, then until its start must be over."""
    deadline = time.monotonic() + seconds
    while warm_count(port) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no warm agent after {seconds} s")
        time.sleep(0.02)
    time.sleep(AGENT_START + READY_MARGIN)


def cold_samples(count: int) -> list[float]:
    with relay_server() as port:
        return [asyncio.run(first_reply_ms(relay_url(port)))[0] for _ in range(count)]


def warm_samples(count: int) -> tuple[list[float], int]:
    """Warm first replies, and how many of them an agent ready before the socket answered."""
    samples, ready_before = [], 0
    with relay_server("--warm-agents", "1") as port:
        for _ in range(count):
            wait_warm_and_ready(port)
            elapsed, opened, ready = asyncio.run(first_reply_ms(relay_url(port)))
            samples.append(elapsed)
            ready_before += ready < opened
    return samples, ready_before


def websocketd_samples(count: int) -> list[float]:
    with websocketd(" ".join(slow_agent())) as server:
        return [asyncio.run(first_reply_ms(server.url()))[0] for _ in range(count)]


def agent_own_samples(count: int) -> list[float]:
    """The agent's own ``initialize`` handling once ready: stdin write to stdout reply."""
    pipe = subprocess.PIPE
    agents = [
        subprocess.Popen(slow_agent(), stdin=pipe, stdout=pipe, stderr=pipe, start_new_session=True)
        for _ in range(count)
    ]
    samples = []
    for agent in agents:
        assert agent.stdin is not None
        assert agent.stdout is not None
        assert agent.stderr is not None
        while b"ready after" not in agent.stderr.readline():
            pass
        began = time.perf_counter()
        agent.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        agent.stdin.flush()
        agent.stdout.readline()
        samples.append((time.perf_counter() - began) * 1000)
        agent.stdin.close()
        agent.wait(timeout=10)
    return samples


def first_reply(count: int, with_websocketd: bool) -> Figures:
    """Cold, warm and websocketd first replies, and the agent's own handling."""
    warm, ready_before = warm_samples(count)
    figures: Figures = {
        "agent_start_s": AGENT_START,
        "agent_own": summary(agent_own_samples(count)),
        "cold": summary(cold_samples(count)),
        "warm": summary(warm) | {"agent_ready_before_socket": ready_before},
    }
    if with_websocketd:
        figures["websocketd"] = summary(websocketd_samples(count))
    figures["warm_over_agent_own_ms"] = round(
        figures["warm"]["median_ms"] - figures["agent_own"]["median_ms"], 1
    )
    return figures


# -- exec to listening -----------------------------------------------------------


def exec_to_answer(
    argv: Sequence[str], port: int, request: bytes, env: dict[str, str]
) -> tuple[float, float]:
    """Milliseconds from exec to the port taking a connection, and to the first bytes of
    the answer to ``request`` sent on that connection."""
    began = time.perf_counter()
    process = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        while True:
            sock = socket.socket()
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
            sock.close()
            if process.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {process.returncode} before listening")
            time.sleep(POLL)
        listening = time.perf_counter()
        with sock:
            sock.settimeout(30)
            sock.sendall(request)
            sock.recv(1)
        answered = time.perf_counter()
    finally:
        with_group_stopped(process)
    return (listening - began) * 1000, (answered - began) * 1000


def with_group_stopped(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, 15)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, 9)
        process.wait()


def listening_figures(argv_for: Callable[[int], list[str]], request: bytes, count: int) -> Figures:
    env = dict(os.environ, ACP_RELAY_SECRET=SECRET)
    listening, answered = [], []
    for _ in range(count):
        port = free_port()
        to_listen, to_answer = exec_to_answer(argv_for(port), port, request, env)
        listening.append(to_listen)
        answered.append(to_answer)
        time.sleep(0.2)  # let the machine settle between samples
    return {"listening": summary(listening), "first_answer": summary(answered)}


def exec_to_listening(count: int, with_websocketd: bool) -> Figures:
    """Exec to listening and to the first answer, acp-relay (and websocketd)."""

    def relay(port: int) -> list[str]:
        return [sys.executable, "-m", "relay", "serve", "--listen", f"127.0.0.1:{port}",
                "--agent", "cat", "--log-level", "warning"]  # fmt: skip

    def websocketd(port: int) -> list[str]:
        return ["websocketd", "--address=127.0.0.1", f"--port={port}", "--loglevel=error", "cat"]

    healthz = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    figures = {"acp-relay": listening_figures(relay, healthz, count)}
    if with_websocketd:
        root = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        figures["websocketd"] = listening_figures(websocketd, root, count)
    return figures


def connect_first_byte(count: int) -> Figures:
    """Exec of ``acp-relay connect`` to its first byte on a listening socket."""
    samples = []
    env = dict(os.environ, ACP_RELAY_TICKET=fresh_ticket(SECRET, subject="bench"))
    for _ in range(count):
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            argv = [sys.executable, "-m", "relay", "connect", f"ws://127.0.0.1:{port}/acp"]
            began = time.perf_counter()
            with running(argv, env):
                server.settimeout(30)
                peer, _ = server.accept()
                with peer:
                    peer.recv(1)
                samples.append((time.perf_counter() - began) * 1000)
        time.sleep(0.2)
    return summary(samples)


def ticket_exec_to_exit(count: int) -> Figures:
    """Exec of ``acp-relay ticket`` to its exit, its ticket read from its stdout."""
    samples = []
    env = dict(os.environ, ACP_RELAY_SECRET=SECRET)
    argv = [sys.executable, "-m", "relay", "ticket", "--subject", "bench"]
    for _ in range(count):
        began = time.perf_counter()
        done = subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=True
        )
        samples.append((time.perf_counter() - began) * 1000)
        if not done.stdout.strip():
            raise RuntimeError("acp-relay ticket printed no ticket")
        time.sleep(0.2)
    return summary(samples)


# -- the run ---------------------------------------------------------------------


def measure(
    first_reply_count: int = 10, listen_count: int = 10, *, with_websocketd: bool = True
) -> Figures:
    """Every start-up figure, as one JSON-ready dict (see the module's docstring)."""
    compile_relay()
    return {
        "exec_to_listening": exec_to_listening(listen_count, with_websocketd),
        "connect_first_byte": connect_first_byte(listen_count),
        "ticket_exec_to_exit": ticket_exec_to_exit(listen_count),
        "first_reply": first_reply(first_reply_count, with_websocketd),
    }


# -- in the main run's report ------------------------------------------------------

ROWS: tuple[Row, ...] = (
    ("first reply ms, agent starting 1.5 s, cold", "first_reply_cold", "median_ms", 1),
    ("first reply ms, same agent, --warm-agents 1", "first_reply_warm", "median_ms", 1),
    ("exec to listening ms (median)", "exec_to_listening", "median_ms", 1),
    ("exec to first HTTP answer ms (median)", "exec_to_first_answer", "median_ms", 1),
    ("connect: exec to first byte on the socket ms", "connect_first_byte", "median_ms", 1),
    ("ticket: exec to exit ms (median)", "ticket_exec_to_exit", "median_ms", 1),
)


def put_figures(quick: bool, put: Callable[[str, str, Any], None]) -> None:
    """Measure (3 samples of each if ``quick``, else 10) and hand each figure to the main
    run's ``put(server, key, value)``, under the keys of :data:`ROWS`."""
    count = 3 if quick else 10
    figures = measure(count, count, with_websocketd="websocketd" in prepare().starts)
    reply = figures["first_reply"]
    put(RELAY, "first_reply_cold", reply["cold"])
    put(RELAY, "first_reply_warm", reply["warm"] | {"agent_own": reply["agent_own"]})
    if "websocketd" in reply:
        put("websocketd", "first_reply_cold", reply["websocketd"])
    for server, listening in figures["exec_to_listening"].items():
        put(server, "exec_to_listening", listening["listening"])
        put(server, "exec_to_first_answer", listening["first_answer"])
    put(RELAY, "connect_first_byte", figures["connect_first_byte"])
    put(RELAY, "ticket_exec_to_exit", figures["ticket_exec_to_exit"])


def _median(figures: dict[str, Any], key: str) -> float | None:
    value = figures.get(RELAY, {}).get(key)
    got = value.get("median_ms") if isinstance(value, dict) else None
    return float(got) if isinstance(got, int | float) else None


def targets(figures: dict[str, Any]) -> list[Check]:
    """Issue 15's start-up targets: a warm first reply within 25 ms, listening (and, as
    strictly read, the first answer) within 150 ms of exec."""
    return [
        Check("first reply with a warm agent", _median(figures, "first_reply_warm"),
              "<= 25 ms", 25, higher_is_better=False),
        Check("exec to listening", _median(figures, "exec_to_listening"), "<= 150 ms", 150,
              higher_is_better=False),
        Check("exec to the first HTTP answer", _median(figures, "exec_to_first_answer"),
              "<= 150 ms", 150, higher_is_better=False),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 samples of each")
    parser.add_argument(
        "--only", choices=("listen", "first-reply"), help="one of the measurements only"
    )
    args = parser.parse_args(argv)
    count = 3 if args.quick else 10
    have_websocketd = "websocketd" in prepare().starts
    compile_relay()
    if args.only == "listen":
        figures = {
            "exec_to_listening": exec_to_listening(count, have_websocketd),
            "connect_first_byte": connect_first_byte(count),
            "ticket_exec_to_exit": ticket_exec_to_exit(count),
        }
    elif args.only == "first-reply":
        figures = {"first_reply": first_reply(count, have_websocketd)}
    else:
        figures = measure(count, count, with_websocketd=have_websocketd)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
