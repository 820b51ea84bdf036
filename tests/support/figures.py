"""Measured figures: printed (``pytest -s`` shows them) and kept in tests/artifacts/.

They are merged into ``tests/artifacts/reliability.json`` (git-ignored), one entry per
measurement, for docs/reliability.md to quote.
"""

from __future__ import annotations

import json
import time
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
FIGURES = ARTIFACTS / "reliability.json"


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


def elapsed_ms(since: float) -> float:
    """Milliseconds since ``since`` (a time.monotonic() value), to 0.1 ms."""
    return round((time.monotonic() - since) * 1000, 1)
