"""An agent's long lines read away from the event loop, for the boundary.

A line the relay must read whole (an ``fs/*`` or ``terminal/*`` request) may hold
millions of JSON values within ``--max-message-bytes``: read on the event loop it would
stop every connection for as long as it takes. It is read in a thread instead
(:func:`relay.acp.boundary.read_lines`); the GIL passes between that thread and the loop,
so the loop keeps serving meanwhile. The cyclic garbage collector is paused while such
reads last: building millions of containers would otherwise start collections that each
traverse all of them while holding the GIL, and those would stop the loop again. What
the reads make holds no cycles; other garbage waits for the collector until they end.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Sequence
from typing import Any

from relay.acp.boundary import read_lines


class CollectorPause:
    """Pauses the cyclic garbage collector while at least one reading lasts (reentrant
    across threads); leaves it as it found it when the last one ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._readings == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._readings += 1

    def __exit__(self, *_exc: object) -> None:
        with self._lock:
            self._readings -= 1
            if self._readings == 0 and self._resume:
                gc.enable()


COLLECTOR_PAUSE = CollectorPause()


def _read(lines: Sequence[bytes]) -> dict[bytes, Any]:
    with COLLECTOR_PAUSE:
        return read_lines(lines)


async def read_aside(lines: Sequence[bytes]) -> dict[bytes, Any]:
    """:func:`relay.acp.boundary.read_lines` of ``lines``, made in a thread."""
    return await asyncio.to_thread(_read, lines)
