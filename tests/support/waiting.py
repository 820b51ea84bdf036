"""Waiting in tests: poll what can be observed, never sleep a fixed time, bound every wait.

``until`` is the one poller (``until_async`` the same, for a check to await); the others
here are conditions it polls. A wait that runs out is an AssertionError saying what was
waited for.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar, cast

from tests.support.processes import pid_alive

T = TypeVar("T")

POLL_SECONDS = 0.01
Describe = str | Callable[[], str] | None


async def until(check: Callable[[], T | None], what: Describe = None, *, seconds: float = 10) -> T:
    """Poll ``check`` until it returns something true, for at most ``seconds``; that value.

    ``what`` (text, or a function making it) names the wait in the AssertionError raised
    when it runs out.
    """
    value = await _poll(check, what, seconds)
    return cast(T, value)


async def until_async(
    check: Callable[[], Awaitable[T | None]], what: Describe = None, *, seconds: float = 10
) -> T:
    """:func:`until` for a check that must be awaited (one that asks the relay over HTTP)."""
    value = await _poll(check, what, seconds)
    return cast(T, value)


async def _poll(check: Callable[[], object], what: Describe, seconds: float) -> object:
    try:
        async with asyncio.timeout(seconds):
            while True:
                value = check()
                if inspect.isawaitable(value):
                    value = await value
                if value:
                    return value
                await asyncio.sleep(POLL_SECONDS)
    except TimeoutError:
        raise AssertionError(f"waited {seconds} s for {_described(what, check)}") from None


def _described(what: Describe, check: Callable[[], object]) -> str:
    if callable(what):
        return what()
    if what is not None:
        return what
    code = getattr(check, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{getattr(check, '__qualname__', 'the condition')}{where}"


async def until_gone(pids: Iterable[int], *, seconds: float = 10) -> bool:
    """Until none of ``pids`` is alive (zombies count as gone), for at most ``seconds``."""
    waiting = list(pids)

    def alive() -> list[int]:
        return [pid for pid in waiting if pid_alive(pid)]

    return await until(lambda: not alive(), seconds=seconds, what=lambda: f"{alive()} to exit")


async def until_steady(read: Callable[[], T], *, interval: float, seconds: float = 10) -> T:
    """Until ``read()`` has returned the same value for ``interval`` seconds; that value."""
    last = [(read(), time.monotonic())]  # the latest value and since when it has held

    def steady() -> bool:
        value, now = read(), time.monotonic()
        if value != last[0][0]:
            last[0] = (value, now)
            return False
        return now - last[0][1] >= interval

    await until(steady, seconds=seconds, what=lambda: f"a steady value (last {last[0][0]!r})")
    return last[0][0]
