"""One thread's permission requests: shown with their keycaps, mentioning who may answer,
each tap judged under the request's rule, its timers, its audit record, its decision.

I/O for :mod:`relay.chat.rules`, :mod:`relay.chat.approvals` and :mod:`relay.chat.audit`:
a request is posted through the thread's :class:`relay.client.chatbot.rounds.Showing`
(after the round that shows what came before it), mentioning the people who may answer
it, the bot reacting with each keycap. Each tap is judged by its sender's user id and the
request's rule (quorum, self-approval), kept with the request's tally and audit record in
the state file (a restart between two taps keeps the first), and once decided the
answer goes to the agent once (the state file is the judge) and the message is edited to
say what, by whom, when and from where. The rule's timers refuse the request (its reject
option, never an allow), escalate it to more people, or remind once; after a restart they
run for what is left of them.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from relay.acp.changes import Option
from relay.acp.refusals import id_key
from relay.chat.approvals import (
    Mentions,
    asked_text,
    decided_by,
    escalation_text,
    mentions_for,
    not_counted_text,
    reminder_text,
    timeout_words,
)
from relay.chat.audit import AuditTap, asked, decided, tapped
from relay.chat.events import message, reaction, replacing
from relay.chat.permissions import Request, answer, chosen, decided_text, request_of, request_state
from relay.chat.rules import (
    Decided,
    NotCounted,
    Tally,
    judge,
    tally_of,
    tally_state,
    timeout_option,
)
from relay.client.chatbot.rounds import Bot, Showing, now_text
from relay.client.chatbot.store import KeptRequest


@dataclass
class Pending:
    """A permission request shown and not yet decided: its taps under its rule, its timers."""

    request: Request
    event_id: str
    tally: Tally = field(default_factory=lambda: Tally(None, None))
    asked_at: float = 0.0  # the wall clock's (a restart runs its timers on from it)
    timers: list[asyncio.TimerHandle] = field(default_factory=list)


def keycap_txn(event_id: str, number: int) -> str:
    """The transaction id of the bot's keycap ``number`` under a request: the same after a
    restart, so that a keycap put again is not put twice."""
    return f"acp-relay.keycap.{hashlib.sha256(event_id.encode()).hexdigest()[:16]}.{number}"


class Asking:
    """The permission requests of one thread."""

    def __init__(self, bot: Bot, showing: Showing) -> None:
        self.bot = bot
        self.showing = showing
        self.requests: dict[str, Pending] = {}
        # Who prompted the turn that asks (the self-approval rule's): the thread's to say.
        self.prompter: Callable[[], str | None] = lambda: None
        self.decides_here = True  # False: the relay says whose answer was taken (a watch)
        self.chosen: dict[str, tuple[str, str, str]] = {}  # a watch's answers: by, from, outcome
        # Sends an answer to the agent with its decision kept (False: decided already).
        self.answer_agent: Callable[[bytes, str, str], Awaitable[bool]] | None = None

    def stop(self) -> None:
        """No more timers (the state file keeps when each request was asked)."""
        for pending in self.requests.values():
            for timer in pending.timers:
                timer.cancel()

    async def ask(self, request: Request) -> None:
        """Show ``request`` (after what came before it), mentioning who may answer it, and
        put its keycaps under it."""
        await self.showing.round()
        record = request_state(request)
        kept = self.bot.state.request_message(self.showing.root, record["id"])
        if kept is not None:  # shown before a restart, the agent's line read again
            if not kept[1] and kept[0] not in self.requests:  # else answered already
                self.watch_request(request, kept[0])
            return
        tally = Tally(self.bot.policy.rule_for(request.kind), self.prompter())
        content = await self._asked(request, tally)
        event_id, _ = await self.showing.post(content, f"request {record['id']}")
        if event_id is None:
            return  # refused (logged): the agent waits for the editor, or its own timeout
        asked_at = time.time()
        audit = asked(request, self.showing.room, self.showing.root, event_id, asked_at)
        self.bot.state.request_shown(self.showing.root, event_id, record, tally_state(tally), audit)
        self.watch_request(request, event_id, tally, asked_at)
        for number, key in enumerate(request.keycaps()):
            keycap = reaction(event_id, key)
            await self.showing.send("m.reaction", keycap, keycap_txn(event_id, number))

    def watch_request(
        self,
        request: Request,
        event_id: str,
        tally: Tally | None = None,
        asked_at: float | None = None,
    ) -> None:
        """Take reactions on ``event_id`` as taps under the request's rule, and run its
        timers (restored: for what is left of them)."""
        rule = self.bot.policy.rule_for(request.kind)
        pending = Pending(
            request,
            event_id,
            tally or Tally(rule, self.prompter()),
            asked_at if asked_at is not None else time.time(),
        )
        self.requests[event_id] = pending
        self._arm(pending)
        self.bot.owns_request(event_id, self)

    def restore_request(self, kept: KeptRequest) -> None:
        """A request pending before a restart: its tally and its timers as they were."""
        request = request_of(kept.record)
        rule = self.bot.policy.rule_for(request.kind)
        tally = tally_of(kept.tally, rule) if kept.tally is not None else None
        self.watch_request(request, kept.event_id, tally, kept.asked_at)

    def _arm(self, pending: Pending) -> None:
        loop = asyncio.get_running_loop()
        rule, tally = pending.tally.rule, pending.tally
        waited = time.time() - pending.asked_at
        due: list[tuple[float | None, Callable[[Pending], Awaitable[None]]]] = [
            (rule.timeout if rule else None, self._timed_out),
            (
                rule.escalate_after if rule and rule.escalate_to and not tally.escalated else None,
                self._escalate,
            ),
            (self.bot.policy.remind_after if not tally.reminded else None, self._remind),
        ]
        for after, then in due:
            if after is not None:
                pending.timers.append(
                    loop.call_later(max(after - waited, 0), self._fire, pending, then)
                )

    def _fire(self, pending: Pending, then: Callable[[Pending], Awaitable[None]]) -> None:
        if self.requests.get(pending.event_id) is pending:
            self.showing.tasks.spawn(then(pending), "a permission request's timer")

    async def _timed_out(self, pending: Pending) -> None:
        """Nobody decided in time: the request's reject option, never an allow."""
        rule = pending.tally.rule
        assert rule is not None
        assert rule.timeout is not None
        option = timeout_option(pending.request.options)
        words = timeout_words(option, rule.timeout, now_text())
        await self.decide(pending, option, words, source="timeout", outcome="timed out")

    async def _escalate(self, pending: Pending) -> None:
        """No decision yet: the rule's escalation people may answer too, and are told."""
        rule = pending.tally.rule
        assert rule is not None
        assert rule.escalate_after is not None
        pending.tally = replace(pending.tally, escalated=True)
        self.bot.state.save_tally(pending.event_id, tally_state(pending.tally))
        added = sorted(rule.escalate_to - pending.tally.counted() - {self.bot.matrix.user})
        self.bot.log.info("permission request escalated", request=pending.event_id, to=added)
        await self._edit_pending(pending)
        body, html = escalation_text(pending.request, Mentions(tuple(added)), rule.escalate_after)
        content = message(body, html=html, mentions=added)
        await self.showing.post(content, f"escalate {pending.event_id}")

    async def _remind(self, pending: Pending) -> None:
        """Once: the people who may answer and have not, mentioned again."""
        mentions = await self._mentions(pending.tally)
        if mentions.users:
            body, html = reminder_text(pending.request, mentions)
            content = message(body, html=html, mentions=mentions.users)
            await self.showing.post(content, f"remind {pending.event_id}")
        pending.tally = replace(pending.tally, reminded=True)
        self.bot.state.save_tally(pending.event_id, tally_state(pending.tally))

    async def _mentions(self, tally: Tally) -> Mentions:
        """Who may answer under ``tally`` now and would count (the room's members are read
        only for a power-level rule)."""
        rule_access = tally.rule.access(self.bot.access) if tally.rule else self.bot.access
        power = await self.bot.levels(self.showing.room)
        members: list[str] = []
        if rule_access.approver_level is not None:
            members = await self.bot.matrix.joined_members(self.showing.room)
        return mentions_for(tally, self.bot.access, members, power, self.bot.matrix.user)

    async def _asked(self, request: Request, tally: Tally) -> dict[str, Any]:
        """The request's message while pending: its tally, mentioning whom it waits for."""
        mentions = await self._mentions(tally)
        body, html = asked_text(request, tally, self.bot.access, mentions)
        return message(body, html=html, mentions=mentions.users)

    async def _edit_pending(self, pending: Pending) -> None:
        """The request's message as it stands: its tally, whom it waits for."""
        content = await self._asked(pending.request, pending.tally)
        await self.showing.send("m.room.message", replacing(pending.event_id, content))

    async def reacted(self, sender: str, target: str, key: str, power: Any) -> None:
        """A reaction on one of this thread's requests: a keycap is a tap on its option."""
        pending = self.requests.get(target)
        if pending is None or sender == self.bot.matrix.user:
            return
        option = pending.request.option_for(key)
        if option is not None:
            await self.tap(pending, sender, option, power, "in the chat")

    async def tap(
        self,
        pending: Pending,
        sender: str,
        option: Option,
        power: Any,
        where: str,
        *,
        tell: bool = True,
    ) -> str | None:
        """``sender`` chose ``option``: judged by their user id and the request's rule, kept
        (tally and audit), and carried out; why it did not count (None: it did). ``tell``:
        the thread says why, once per person and request."""
        told = pending.tally.told(sender)
        tally, verdict = judge(pending.tally, sender, option, self.bot.access, power)
        if tally != pending.tally:
            pending.tally = tally
            self.bot.state.save_tally(pending.event_id, tally_state(tally))
            last = tally.taps[-1]
            note = AuditTap(sender, option.option_id, last.counted, last.why_not, time.time())
            self.bot.state.audit.change(pending.event_id, lambda record: tapped(record, note))
        if isinstance(verdict, NotCounted):
            self.bot.log.info(
                "a tap that does not count", user=sender, request=pending.event_id, why=verdict.why
            )
            if tell and not told:
                self.showing.say(not_counted_text(sender, verdict.why))
            return verdict.why
        if isinstance(verdict, Decided):
            by = decided_by(tally, option)
            await self.decide(pending, option, chosen(option, by, now_text(), where), by=by)
        else:
            await self._edit_pending(pending)
        return None

    async def decide(
        self,
        pending: Pending,
        option: Option | None,
        words: str,
        *,
        by: str = "",
        source: str = "chat",
        outcome: str | None = None,
    ) -> None:
        """Answer the agent once (the state file is the judge), then edit the message."""
        line = answer(pending.request, option)
        what = outcome or ("selected" if option is not None else "cancelled")
        if not self.decides_here:
            self.chosen[pending.event_id] = (by, source, what)
        if self.answer_agent is not None:
            if not await self.answer_agent(line, pending.event_id, words):
                return
        elif not self.bot.state.decide(pending.event_id, words):
            return
        self.forget_request(pending.event_id)
        self.bot.log.info("permission request answered", request=pending.event_id, decision=words)
        if self.decides_here:
            self.audit_decided(pending.event_id, what, option, by, source)
            await self.decided(pending, words)
        # A watch's answer edited the message before it went, and the relay's notice edits
        # it last (whose answer was taken): an edit here could land after the notice's.

    def audit_decided(
        self, event_id: str, outcome: str, option: Option | None, by: str, source: str
    ) -> None:
        at = time.time()
        self.bot.state.audit.change(
            event_id, lambda record: decided(record, outcome, option, by, source, at)
        )

    async def decided(self, pending: Pending, words: str) -> None:
        body, html = decided_text(pending.request, words)
        edit = replacing(pending.event_id, message(body, html=html))
        await self.showing.send("m.room.message", edit)

    def forget_request(self, event_id: str) -> None:
        pending = self.requests.pop(event_id, None)
        if pending is not None:
            for timer in pending.timers:
                timer.cancel()
        self.bot.owns_request(event_id, None)

    async def cancelled(self, requests: list[Request], words: str, by: str = "") -> None:
        """Requests of a cancelled turn: each still pending is answered ``cancelled`` (once,
        as a tap would be) and its message says ``words``."""
        ids = {id_key(request.request_id) for request in requests}
        for pending in list(self.requests.values()):
            if id_key(pending.request.request_id) in ids:
                await self.decide(pending, None, words, by=by, source="cancel")

    async def no_longer_pending(self, why: str) -> None:
        """Every request still shown as pending says it no longer is (the turn or the
        connection ended)."""
        for pending in list(self.requests.values()):
            words = f"⏹ No longer pending: {why} ({now_text()})"
            if self.bot.state.decide(pending.event_id, words):
                self.forget_request(pending.event_id)
                self.audit_decided(pending.event_id, "no longer pending", None, "", "")
                await self.decided(pending, words)
