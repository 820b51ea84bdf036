"""One thread as the room sees it: its messages sent and edited in paced rounds, and its
permission requests with their keycaps, answered by approvers' reactions.

I/O for :mod:`relay.chat`: a thread's :class:`relay.chat.turns.TurnView` says what each
of its messages should read; :class:`Showing` sends a new message for a new slot and an
edit for a changed one, one round at a time (:class:`relay.chat.pacing.Pacer`: about
one per second, never before the homeserver's retry time). A permission request is sent
at once (after the round that shows what came before it), the bot reacting with each
keycap; an approver's reaction decides it, and the message is edited to say what, by
whom, when and from where. What it needs of the bot: :class:`Bot`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from relay.acp.refusals import id_key
from relay.chat.access import Access
from relay.chat.events import in_thread, message, reaction, replacing
from relay.chat.pacing import Pacer
from relay.chat.permissions import (
    Option,
    Request,
    answer,
    chosen,
    decided_text,
    request_state,
    request_text,
)
from relay.chat.text import safe_line
from relay.chat.turns import Shown, TurnView
from relay.client.chatbot.matrix import MatrixSession, TokenRevoked
from relay.client.chatbot.state import State
from relay.observe.logs import Logger
from relay.observe.tasks import Tasks


class Bot(Protocol):
    """What a thread needs of the bot that runs it."""

    matrix: MatrixSession
    state: State
    access: Access
    log: Logger
    approval_timeout: float | None
    edit_interval: float

    def owns_request(self, event_id: str, showing: Showing | None) -> None:
        """Route reactions on ``event_id`` to ``showing`` (None: no longer)."""


@dataclass
class Pending:
    """A permission request shown and not yet decided."""

    request: Request
    event_id: str
    timer: asyncio.TimerHandle | None = None


def keycap_txn(event_id: str, number: int) -> str:
    """The transaction id of the bot's keycap ``number`` under a request: the same after a
    restart, so that a keycap put again is not put twice."""
    return f"acp-relay.keycap.{hashlib.sha256(event_id.encode()).hexdigest()[:16]}.{number}"


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
        self.requests: dict[str, Pending] = {}
        self.told: set[str] = set()  # who was told their reaction does not count
        # Sends an answer to the agent with its decision kept (False: decided already).
        self.answer_agent: Callable[[bytes, str, str], Awaitable[bool]] | None = None
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
        for pending in self.requests.values():
            if pending.timer is not None:
                pending.timer.cancel()
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

    # -- permission requests ---------------------------------------------------------------------

    async def ask(self, request: Request) -> None:
        """Show ``request`` (after what came before it) and put its keycaps under it."""
        await self.round()
        record = request_state(request)
        kept = self.bot.state.request_message(self.root, record["id"])
        if kept is not None:  # shown before a restart, the agent's line read again
            if not kept[1]:  # else answered already: the answer is kept until the relay has it
                self.watch_request(request, kept[0])
            return
        body, html = request_text(request, self.bot.access.approvers_text())
        event_id, _ = await self.post(message(body, html=html), f"request {record['id']}")
        if event_id is None:
            return  # refused (logged): the agent waits for the editor, or its own timeout
        self.bot.state.request_shown(self.root, event_id, record)
        self.watch_request(request, event_id)
        for number, key in enumerate(request.keycaps()):
            await self.send("m.reaction", reaction(event_id, key), keycap_txn(event_id, number))

    def watch_request(self, request: Request, event_id: str) -> None:
        """Take reactions on ``event_id`` as answers (and time it out, if set)."""
        pending = Pending(request, event_id)
        timeout = self.bot.approval_timeout
        if timeout is not None:
            loop = asyncio.get_running_loop()
            pending.timer = loop.call_later(timeout, self._timed_out, event_id)
        self.requests[event_id] = pending
        self.bot.owns_request(event_id, self)

    def _timed_out(self, event_id: str) -> None:
        pending = self.requests.get(event_id)
        if pending is not None:
            words = (
                f"⌛ No answer within {self.bot.approval_timeout:g} s: cancelled at {now_text()}"
            )
            self.tasks.spawn(self.decide(pending, None, words), "answer a timed-out request")

    async def reacted(self, sender: str, target: str, key: str, power: Any) -> None:
        """A reaction on one of this thread's requests: an approver's keycap answers it."""
        pending = self.requests.get(target)
        if pending is None or sender == self.bot.matrix.user:
            return
        if not self.bot.access.may_approve(sender, power):
            if sender not in self.told:
                self.told.add(sender)
                self.say(
                    f"{safe_line(sender)}: only approvers ({self.bot.access.approvers_text()})"
                    " answer permission requests here; your reaction was not counted."
                )
            self.bot.log.info("reaction of a non-approver ignored", user=sender, request=target)
            return
        option = pending.request.option_for(key)
        if option is None:
            return
        await self.decide(pending, option, chosen(option, sender, now_text(), "in the chat"))

    async def decide(self, pending: Pending, option: Option | None, words: str) -> None:
        """Answer the agent once (the state file is the judge), then edit the message."""
        line = answer(pending.request, option)
        if self.answer_agent is not None:
            if not await self.answer_agent(line, pending.event_id, words):
                return
        elif not self.bot.state.decide(pending.event_id, words):
            return
        self.forget_request(pending.event_id)
        self.bot.log.info("permission request answered", request=pending.event_id, decision=words)
        await self.decided(pending, words)

    async def decided(self, pending: Pending, words: str) -> None:
        body, html = decided_text(pending.request, words)
        await self.send("m.room.message", replacing(pending.event_id, message(body, html=html)))

    def forget_request(self, event_id: str) -> None:
        pending = self.requests.pop(event_id, None)
        if pending is not None and pending.timer is not None:
            pending.timer.cancel()
        self.bot.owns_request(event_id, None)

    async def cancelled(self, requests: list[Request], words: str) -> None:
        """Requests of a cancelled turn: each still pending is answered ``cancelled`` (once,
        as a tap would be) and its message says ``words``."""
        ids = {id_key(request.request_id) for request in requests}
        for pending in list(self.requests.values()):
            if id_key(pending.request.request_id) in ids:
                await self.decide(pending, None, words)

    async def no_longer_pending(self, why: str) -> None:
        """Every request still shown as pending says it no longer is (the turn or the
        connection ended)."""
        for pending in list(self.requests.values()):
            words = f"⏹ No longer pending: {why} ({now_text()})"
            if self.bot.state.decide(pending.event_id, words):
                self.forget_request(pending.event_id)
                await self.decided(pending, words)
