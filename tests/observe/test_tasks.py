"""Background tasks: kept until they end, failures logged, stopped on demand."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from relay.observe import logs
from relay.observe.tasks import Tasks


async def test_a_spawned_task_is_kept_until_it_ends_even_without_another_reference() -> None:
    """A task nobody else refers to survives a garbage collection and runs to its end."""
    tasks = Tasks(logs.get_logger("test"))
    done = asyncio.Event()

    async def work() -> None:
        await asyncio.sleep(0)
        gc.collect()
        await asyncio.sleep(0)
        done.set()

    tasks.spawn(work(), "work")
    assert len(tasks) == 1
    async with asyncio.timeout(5):
        await done.wait()
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(tasks) == 0


async def test_a_failing_task_is_logged_with_what_it_was_doing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A task's exception becomes one error line naming the task and the error."""
    caplog.set_level(logging.ERROR)
    tasks = Tasks(logs.get_logger("test"))

    async def fails() -> None:
        raise RuntimeError("homeserver said no")

    task = tasks.spawn(fails(), "edit the request's message")
    async with asyncio.timeout(5):
        await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)
    text = caplog.text
    assert "background task failed" in text
    assert "edit the request's message" in text
    assert "RuntimeError: homeserver said no" in text
    assert len(tasks) == 0


async def test_stop_cancels_and_awaits_what_is_still_running() -> None:
    """stop() cancels every running task and returns once each has ended; none is logged."""
    tasks = Tasks(logs.get_logger("test"))
    forever = tasks.spawn(asyncio.Event().wait(), "waits for ever")
    async with asyncio.timeout(5):
        await tasks.stop()
    assert forever.cancelled()
    assert len(tasks) == 0
