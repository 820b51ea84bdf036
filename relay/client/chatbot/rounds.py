"""One thread as the room sees it: its messages sent and edited in paced rounds.

I/O for :mod:`relay.chat`: a thread's :class:`relay.chat.turns.TurnView` says what each
of its messages should read; :class:`Showing` sends a new message for a new slot and an
edit for a changed one, one round at a time (:class:`relay.chat.pacing.Pacer`: about
one per second, never before the homeserver's retry time). Its permission requests are
:class:`relay.client.chatbot.asking.Asking`'s, posted through it. What a thread needs of
the bot: :class:`Bot`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, Protocol

from relay.chat.access import Access
from relay.chat.events import in_thread, message, replacing
from relay.chat.pacing import Pacer
from relay.chat.rules import (
    Policy,
)
from relay.chat.turns import Shown, TurnView
from relay.client.chatbot.matrix import MatrixSession, TokenRevoked
from relay.client.chatbot.store import State
from relay.observe.logs import Logger
from relay.observe.tasks import Tasks


class Answerable(Protocol):
    """What takes the reactions on a request's message (a thread's
    :class:`relay.client.chatbot.asking.Asking`)."""

    async def reacted(self, sender: str, target: str, key: str, power: Any) -> None:
        """``sender`` reacted ``key`` on ``target``, under the room's ``power`` levels."""


class Bot(Protocol):
    """What a thread needs of the bot that runs it."""

    matrix: MatrixSession
    state: State
    access: Access
    policy: Policy
    log: Logger
    edit_interval: float

    def owns_request(self, event_id: str, owner: Answerable | None) -> None:
        """Route reactions on ``event_id`` to ``owner`` (None: no longer)."""

    async def levels(self, room: str) -> dict[str, Any] | None:
        """The room's power levels (None: unknown)."""


def now_text() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S UTC")


class Showing:
    """The room's side of one thread: its messages, rounds, and permission requests."""

    def __init__(self, bot: Bot, room: str, root: str, view: TurnView) -> None:
        self.bot = bot
        self.room = room
        self.root = root
        self.view = view
        self.latest = root  # the thread's last event: the reply fallback's target
        self.slots: dict[str, str] = bot.state.slots(root)  # slot -> event id
        self.bodies: dict[str, str] = {}  # slot -> the text it shows (no edit repeats it)
        self.pacer = Pacer(bot.matrix.hold, bot.edit_interval)
        self.changed = asyncio.Event()
        self.checkpoint: Callable[[], None] = lambda: None
        self.tasks = Tasks(bot.log.bind(thread=root))
        self._rounding = asyncio.Lock()
        self._rounds: asyncio.Task[object] | None = None

    def start(self) -> None:
        self._rounds = self.tasks.spawn(self._round_loop(), "the thread's rounds of edits")
        if self.view.pending:  # restored with changes a killed bot had not shown yet
            self.wake()

    async def stop(self) -> None:
        """No more rounds (what is pending is shown first)."""
        if self._rounds is not None:
            self._rounds.cancel()
            await asyncio.gather(self._rounds, return_exceptions=True)
            self._rounds = None
        await self.tasks.stop()

    def wake(self) -> None:
        """Something changed: a round will show it."""
        self.changed.set()

    def say(self, text: str) -> None:
        """A line of the bot's own in the thread (``text`` safe), in the next round."""
        self.view.note(text)
        self.wake()

    # -- rounds ----------------------------------------------------------------------------------

    async def _round_loop(self) -> None:
        with suppress(TokenRevoked):  # the bot stops: it says why
            await self._rounds_until_stopped()

    async def _rounds_until_stopped(self) -> None:
        while True:
            await self.changed.wait()
            wait = self.pacer.due(time.monotonic()) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.changed.clear()
            await self.round()

    async def round(self) -> None:
        """Show what changed now: a message per new slot, an edit per changed one. One round
        at a time (the paced loop's, a request's, the thread's last), so that messages are
        posted in the order their slots were made."""
        async with self._rounding:
            taken = self.view.take()
            for shown in taken:
                await self._show(shown)
            self.view.shown([shown.slot for shown in taken])
            self.pacer.went(time.monotonic())
            self._forget_finished()
            self.checkpoint()

    async def _show(self, shown: Shown) -> None:
        if self.bodies.get(shown.slot) == shown.body and shown.slot in self.slots:
            return
        content = message(shown.body, html=shown.html, msgtype=shown.msgtype)
        known = self.slots.get(shown.slot)
        if known is not None:
            await self.send("m.room.message", replacing(known, content))
        else:
            event_id, again = await self.post(content, shown.slot)
            if event_id is None:
                return  # refused (logged): posted when the slot changes again
            self.slots[shown.slot] = event_id
            if again:  # posted before a restart, maybe with fewer words: these now
                await self.send("m.room.message", replacing(event_id, content))
        self.bodies[shown.slot] = shown.body

    def _forget_finished(self) -> None:
        """Slots that will not change again are forgotten here; the state file keeps their
        events until the thread ends: a bot killed before its next checkpoint may restore a
        view that shows one again, and must then edit its message, not post a second."""
        done = [slot for slot in self.slots if not self.view.is_live(slot)]
        for slot in done:
            del self.slots[slot]
            self.bodies.pop(slot, None)

    async def post(self, content: dict[str, Any], slot: str) -> tuple[str | None, bool]:
        """A new message in the thread for ``slot``: its event id (None: the homeserver
        refused it, logged), and True when a restart came between keeping its transaction id
        and keeping its event (the homeserver answered the same transaction with the first
        event: nothing is posted twice)."""
        txn, again = self.bot.state.posting(self.root, slot)
        threaded = in_thread(content, self.root, self.latest)
        event_id = await self.bot.matrix.send_or_log(
            self.room, "m.room.message", threaded, txn, thread=self.root, slot=slot
        )
        if event_id is not None:
            self.bot.state.shown(self.root, slot, event_id)
            self.latest = event_id
        return event_id, again

    async def send(self, kind: str, content: dict[str, Any], txn: str | None = None) -> None:
        """An edit or a reaction (an edit sent twice shows the same words); a refusal of
        the homeserver's is logged and costs that edit only."""
        txn = txn or uuid.uuid4().hex
        await self.bot.matrix.send_or_log(self.room, kind, content, txn, thread=self.root)
