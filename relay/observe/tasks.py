"""Work started in the background: each task kept until it ends, its failure logged.

``asyncio`` keeps only a weak reference to a task: one started and forgotten can be
collected while it runs, and its exception is lost (at best a "never retrieved" line at
exit). A :class:`Tasks` keeps every task it started until it ends, logs the exception of
one that failed (with what it was doing), and cancels and awaits what is left when its
owner stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from relay.observe.logs import Logger


class Tasks:
    """The background tasks of one owner (a bot, a thread, a link)."""

    def __init__(self, log: Logger) -> None:
        self.log = log
        self._running: set[asyncio.Task[object]] = set()

    def spawn(self, work: Awaitable[object], what: str) -> asyncio.Task[object]:
        """Run ``work`` in the background, kept until it ends; ``what`` names it in the log
        should it fail."""
        task: asyncio.Task[object] = asyncio.ensure_future(work)
        self._running.add(task)
        task.add_done_callback(lambda done: self._ended(done, what))
        return task

    def _ended(self, task: asyncio.Task[object], what: str) -> None:
        self._running.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.log.error(
                "background task failed", task=what, error=f"{type(exc).__name__}: {exc}"[:500]
            )

    def __len__(self) -> int:
        return len(self._running)

    async def stop(self) -> None:
        """Cancel every task still running and wait until each has ended."""
        running = list(self._running)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
