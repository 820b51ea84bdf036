"""Helpers of the fault, abuse and soak suites: process figures, the log audit, the report.

Figures are printed (``pytest -s`` shows them) and merged into
``tests/artifacts/reliability.json`` (git-ignored), one entry per measurement.
Everything here reads ``/proc`` of processes on this machine and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from tests.conftest import child_states

ARTIFACTS = Path(__file__).parent / "artifacts"
FIGURES = ARTIFACTS / "reliability.json"
MIN_NEEDLE = 16  # shorter strings may occur in any log by chance


def record(name: str, **figures: Any) -> None:
    """Print ``figures`` and merge them into tests/artifacts/reliability.json under ``name``."""
    print(f"\n[reliability] {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    ARTIFACTS.mkdir(exist_ok=True)
    data: dict[str, Any] = {}
    with suppress(OSError, ValueError):
        loaded = json.loads(FIGURES.read_text())
        if isinstance(loaded, dict):
            data = loaded
    data[name] = {"measured": datetime.now(UTC).isoformat(timespec="seconds"), **figures}
    scratch = FIGURES.with_suffix(".tmp")
    scratch.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    scratch.replace(FIGURES)


# -- processes, from /proc ------------------------------------------------------------------


def fd_count(pid: int) -> int:
    """Open file descriptors of ``pid``."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def zombies(pid: int) -> list[int]:
    """Children of ``pid`` that exited and were not reaped."""
    return [child for child, state in child_states(pid).items() if state == "Z"]


# -- raw HTTP on 127.0.0.1 ---------------------------------------------------------------------

WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def upgrade_request(target: str, *headers: str) -> bytes:
    """A WebSocket upgrade request for ``target`` with extra ``headers`` ("Name: value")."""
    lines = [
        f"GET {target} HTTP/1.1",
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {WS_KEY}",
        "Sec-WebSocket-Version: 13",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def exchange(port: int, request: bytes, seconds: float = 5.0) -> bytes:
    """Send ``request`` on a new connection; everything answered until the relay closes it.

    Raises TimeoutError if the relay neither answers nor closes within ``seconds``.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = bytearray()
    try:
        with suppress(ConnectionError):
            writer.write(request)
            await writer.drain()
        async with asyncio.timeout(seconds):
            with suppress(ConnectionError):
                while chunk := await reader.read(65536):
                    answer += chunk
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()
    return bytes(answer)


def status_of(answer: bytes) -> int | None:
    """The HTTP status of a response, None when the answer is not one."""
    if not answer.startswith(b"HTTP/1.1 "):
        return None
    return int(answer.split(b" ", 2)[1])


async def busy(port: int) -> dict[str, Any]:
    """The relay's GET /busy report."""
    answer = await exchange(port, b"GET /busy HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    report = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert isinstance(report, dict)
    return report


async def wait_idle(port: int, relay_pid: int, seconds: float = 10.0) -> None:
    """Until the relay reports no connection and has no child process left, zombies included."""
    async with asyncio.timeout(seconds):
        while (await busy(port))["connections"] or child_states(relay_pid):  # noqa: ASYNC110
            await asyncio.sleep(0.02)


# -- the log audit -----------------------------------------------------------------------------


@dataclass
class LogAudit:
    """Strings that must never be logged, and the log lines to search for them."""

    needles: set[str] = field(default_factory=set)
    sources: list[Sequence[str]] = field(default_factory=list)
    in_process: io.StringIO = field(default_factory=io.StringIO)

    def secret(self, text: str) -> str:
        """Note ``text`` (a ticket, a secret) as never to be logged; returns it."""
        if len(text) >= MIN_NEEDLE:
            self.needles.add(text)
        return text

    def watch(self, lines: Sequence[str]) -> None:
        """Also search ``lines`` (a relay subprocess's stderr, as it grows)."""
        self.sources.append(lines)

    def lines(self) -> list[str]:
        found = self.in_process.getvalue().splitlines()
        for source in self.sources:
            found.extend(source)
        return found

    def leaks(self) -> tuple[int, list[str]]:
        """How many lines were searched, and the needles found in them (should be none)."""
        lines = self.lines()
        text = "\n".join(lines)
        return len(lines), sorted(needle[:24] + "..." for needle in self.needles if needle in text)


@contextmanager
def captured_relay_logs(into: io.StringIO) -> Iterator[None]:
    """Copy every log line of this process into ``into``, formatted and redacted as on stderr.

    Uses the formatter of the handler :func:`relay.logs.configure` installed, so the lines
    are exactly what the relay would print.
    """
    root = logging.getLogger()
    ours = [
        h for h in root.handlers if isinstance(h.formatter, structlog.stdlib.ProcessorFormatter)
    ]
    assert ours, "relay.logs.configure has not run"
    handler = logging.StreamHandler(into)
    handler.setFormatter(ours[0].formatter)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def elapsed_ms(since: float) -> float:
    """Milliseconds since ``since`` (a time.monotonic() value), to 0.1 ms."""
    return round((time.monotonic() - since) * 1000, 1)
