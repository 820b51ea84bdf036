"""Debian's Prometheus on loopback, scraping given targets, and its HTTP query API.

The server runs from a configuration and a data directory of its own in a temporary
directory, on a free port of 127.0.0.1; both the process and the directory are gone when
the block ends.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import stop
from tests.support.sockets import free_port
from tests.system import require_packages

SCRAPE_INTERVAL = "1s"
START_TIMEOUT = 30.0  # seconds until /-/ready answers 200


@dataclass
class Prometheus:
    """A running Prometheus: its port and its log file."""

    port: int
    log: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (blocking): ``[{"metric": {...}, "value": [t, v]}]``."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": promql}
        )
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.loads(response.read())
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The value of a query that yields one series, None while it yields none."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None


def scrape_config(job: str, targets: Sequence[str]) -> str:
    """A prometheus.yml scraping ``targets`` (HOST:PORT) every second under ``job``."""
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
    }
    return json.dumps(config, indent=2)  # JSON is YAML


@asynccontextmanager
async def prometheus(job: str, targets: Sequence[str]) -> AsyncIterator[Prometheus]:
    """Run Debian's ``prometheus`` scraping ``targets``; installed first, or the test skips.

    Started and stopped in a thread, so that a relay in this event loop answers its scrapes
    meanwhile.
    """
    await asyncio.to_thread(require_packages, "prometheus", commands=("prometheus",))
    with tempfile.TemporaryDirectory(prefix="acp-relay-prometheus-") as scratch:
        home = Path(scratch)
        (home / "prometheus.yml").write_text(scrape_config(job, targets))
        server = Prometheus(free_port(), home / "prometheus.log")
        proc = await asyncio.to_thread(_start, home, server)
        try:
            await asyncio.to_thread(_until_ready, proc, server)
            yield server
        finally:
            await asyncio.to_thread(stop, proc)


def _start(home: Path, server: Prometheus) -> subprocess.Popen[bytes]:
    with server.log.open("wb") as log:
        return subprocess.Popen(
            [
                "prometheus",
                f"--config.file={home / 'prometheus.yml'}",
                f"--storage.tsdb.path={home / 'data'}",
                f"--web.listen-address=127.0.0.1:{server.port}",
            ],
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )


def _until_ready(proc: subprocess.Popen[bytes], server: Prometheus) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    ready = f"http://127.0.0.1:{server.port}/-/ready"
    while True:
        assert proc.poll() is None, f"prometheus exited: {server.log.read_text()[-3000:]}"
        with suppress(OSError), urllib.request.urlopen(ready, timeout=2) as response:
            if response.status == 200:
                return
        assert time.monotonic() < deadline, f"prometheus not ready: {server.log.read_text()}"
        time.sleep(0.1)
