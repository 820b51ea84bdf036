"""The waits of a connection: a reader timed on an empty pipe, the agent's output flushed,
the first of its tasks to fail, a wait that gives up.

I/O helpers of :mod:`relay.server.connections.connection`, apart so that the lifecycle reads on
its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

from websockets.asyncio.connection import Connection


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


class Flushes(Protocol):
    """What holds the agent's output on its way to the socket (a connection's carrier)."""

    async def flush(self, closed: asyncio.Task[None]) -> None: ...


class Warns(Protocol):
    """Where a connection's warnings go (its observer)."""

    def warn(self, event: str) -> None: ...


async def output_flushed(
    ws: Connection,
    stdout_done: asyncio.Event,
    children: asyncio.Task[None],
    stdout: IdleClock,
    *,
    grace: float,
    carrier: Flushes,
    observer: Warns,
) -> None:
    """Wait until what the agent wrote has been sent on ``ws``, or ``ws`` is gone.

    The wait ends with the end of stdout (``stdout_done``), which comes once the agent's
    process group is gone (``children`` stops what is left of it). A process that left the
    group may hold stdout open for ever: once the group is gone, the wait ends when the
    relay has waited ``grace`` on an empty pipe. Then the carrier sends what it still holds.
    """
    closed = asyncio.create_task(ws.wait_closed())
    flushed = asyncio.create_task(stdout_done.wait())
    try:
        while not (flushed.done() or closed.done()):
            if not children.done():
                wanted = {flushed, closed, children}
                await asyncio.wait(wanted, return_when=asyncio.FIRST_COMPLETED)
                continue
            idle = stdout.idle_for()
            if idle >= grace:
                observer.warn("agent's stdout held open outside its process group: closing anyway")
                break
            await asyncio.wait({flushed, closed}, timeout=grace - idle)
        if not closed.done():
            await carrier.flush(closed)
    finally:
        flushed.cancel()
        closed.cancel()
