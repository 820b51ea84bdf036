"""The waits of a connection: a reader timed on an empty pipe, the first of its tasks to
fail, a wait that gives up.

I/O helpers of :mod:`relay.connections.connection`, apart so that the lifecycle reads on
its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any


class IdleClock:
    """Times the waits of a reader on an empty pipe: how long has it waited, right now?"""

    def __init__(self) -> None:
        self._since: float | None = None
        self._reader: asyncio.StreamReader | None = None

    def watch(self, reader: asyncio.StreamReader) -> IdleClock:
        self._reader = reader
        return self

    async def read(self, n: int) -> bytes:
        """``reader.read(n)``, timed."""
        assert self._reader is not None
        self._since = time.monotonic()
        try:
            return await self._reader.read(n)
        finally:
            self._since = None

    def idle_for(self) -> float:
        """Seconds the current read has waited; 0 when no read is waiting."""
        return 0.0 if self._since is None else time.monotonic() - self._since


async def first_failure(tasks: Sequence[asyncio.Task[Any]]) -> BaseException:
    """The exception of the first of ``tasks`` to fail; waits for ever if none does."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                return error
    await asyncio.Future()  # every task ended normally: nothing to report, ever
    raise AssertionError("unreachable")


async def bounded_wait(task: asyncio.Task[None], seconds: float) -> None:
    try:
        await asyncio.wait_for(task, max(seconds, 0.1))
    except Exception:  # TimeoutError included
        task.cancel()
