"""The bot's care of its live threads beside the sync: idle sessions ended, and a pending
request answered by number (``!answer N``).

I/O for :mod:`relay.chat.limits` and :mod:`relay.chat.meanings`: the clock is read here.
Idle threads are ended from outside the thread, through its public ``end``, as ``!end``
does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from relay.chat.limits import Idleness, Limits
from relay.client.chatbot.sessionthread import SessionThread
from relay.client.chatbot.watchthread import WatchThread
from relay.observe.logs import Logger


async def end_idle_threads(
    threads: Mapping[str, SessionThread | WatchThread],
    idleness: Idleness,
    limits: Limits,
    log: Logger,
) -> None:
    """Every little while: a session thread with a turn running or a request pending is
    active; one idle for --idle-timeout is ended, saying why (a watch thread follows its
    editor's connection, which ends it)."""
    while True:
        await asyncio.sleep(idleness.check_every())
        now = time.monotonic()
        for root, thread in list(threads.items()):
            if isinstance(thread, SessionThread) and (
                thread.session.turn_running or thread.asking.requests
            ):
                idleness.active(root, now)
        for root in idleness.idle(now):
            idleness.forget(root)
            idle = threads.get(root)
            if isinstance(idle, SessionThread):
                log.info("idle thread ended", thread=root)
                idle.end(limits.idle_words())


async def answer_by_number(
    thread: SessionThread | WatchThread,
    sender: str,
    number: int,
    power: Mapping[str, Any] | None,
) -> str | None:
    """``!answer N``: the thread's latest pending request answered with its option N, judged
    by the sender's user id and the request's rule exactly as a tap on its keycap; what to
    reply when it does not count (None: it did)."""
    pending = list(thread.asking.requests.values())
    if not pending:
        return "no permission request is pending in this thread."
    options = pending[-1].request.options
    if not 1 <= number <= len(options):
        return f"!answer takes a number from 1 to {len(options)} here."
    where = f"in the chat (!answer {number})"
    return await thread.asking.tap(
        pending[-1], sender, options[number - 1], power, where, tell=False
    )
