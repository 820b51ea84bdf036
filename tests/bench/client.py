"""The load generator (``loadgen.mjs``) run from Python, and what the benchmark reads of a
server's process while it works: CPU time and resident memory.

Shared by :mod:`tests.bench.run` and :mod:`tests.bench.features`.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.bench.peers import HERE


def loadgen(command: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
    """Run one load generator command to its end; its JSON result (``error`` if it failed)."""
    argv = ["node", str(HERE / "loadgen.mjs"), json.dumps(command)]
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:g} s"}
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if not last:
        return {"error": f"load generator failed: {done.stderr.strip()[-500:]}"}
    result: dict[str, Any] = json.loads(last)
    return result


def loadgen_file(command: dict[str, Any]) -> list[str]:
    """argv for a command too long for argv itself (many URLs): written to a file."""
    path = Path(tempfile.mkstemp(suffix=".json")[1])
    path.write_text(json.dumps(command))
    return ["node", str(HERE / "loadgen.mjs"), f"@{path}"]


def written_bytes(pid: int) -> int:
    """Bytes the process has sent to storage (``/proc/PID/io``: files, not pipes or
    sockets), as its pages were dirtied."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise ValueError(f"no write_bytes in /proc/{pid}/io")


def cpu_seconds(pid: int) -> float:
    """CPU time of the process's live threads, to the nanosecond (schedstat), else to the
    tick (stat)."""
    try:
        tasks = Path(f"/proc/{pid}/task").glob("*/schedstat")
        return sum(int(task.read_text().split()[0]) for task in tasks) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
