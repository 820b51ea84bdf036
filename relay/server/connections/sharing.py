"""A connection's watchers (``acp-relay.watch.v1``): the conversation shown, answers taken.

Beside its controlling socket, a connection may have up to ``--max-watchers`` watchers.
:class:`Watching` keeps the conversation so far for them (the lines the controller sent
to the agent and the lines the agent wrote, as the agent received them (the values of
the relay's own MCP servers hidden: :func:`shown_line`) and as the client received them:
:class:`relay.core.watchhistory.History`, bounded by
``--watch-history``), shows it to each watcher that attaches, then every line as the
relay carries it; and it decides, with :class:`relay.acp.answers.Answers`, which answer
to an agent's permission request is taken: the first, from the controller or from a
watcher allowed to answer.

Watchers never hold anything up: their frames are encoded once and written to each
watcher without waiting (:class:`relay.streams.wsadapter.EncodedFrames`); a watcher
whose unsent frames pass its bound is closed (:data:`relay.core.watchprofile.FELL_BEHIND`).
They do not keep the connection alive: when it ends, each is closed saying why.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay.acp.answers import (
    MAX_REFUSED,
    TOO_MANY_REFUSED,
    WATCHER_FRAME_BYTES,
    Answers,
    Late,
    Taken,
    too_many_refused,
)
from relay.acp.mcp import hide_injected
from relay.acp.outcome import Forward, Outcome, Received, Refuse, Skip
from relay.core.tickets import Claims
from relay.core.watchhistory import History
from relay.core.watchprofile import (
    FELL_BEHIND,
    FROM_AGENT,
    FROM_CLIENT,
    FROM_WATCHER,
    Origin,
    conversation_frames,
    conversation_heads,
    notification,
    relay_frame,
    watching_frame,
)
from relay.observe.logs import redactor
from relay.server.connections.attachments import Attachment
from relay.streams.wsadapter import EncodedFrames, Receiver, text_frames, text_frames_of

if TYPE_CHECKING:
    from relay.observe.observer import ConnectionObserver
    from relay.streams.pump import Judge, Judging, Tap

MIN_LAG_BYTES = 1 << 20  # a watcher may leave at least this much unread before it is dropped
LAG_HISTORIES = 2  # ... or this many histories' worth


@dataclass(eq=False)
class Watcher:
    """One watcher's socket: who, whether it may answer, and its frames' way out."""

    attachment: Attachment
    subject: str
    may_answer: bool
    frames: EncodedFrames


class Watching:
    """The watchers of one connection, the conversation kept for them, and the answers."""

    def __init__(
        self,
        conn_id: str,
        observer: ConnectionObserver,
        *,
        history: int,
        tell_controller: Callable[[bytes], Awaitable[None]],
        to_agent: Callable[[Sequence[bytes]], Awaitable[None]],
        left: Callable[[], None],
    ) -> None:
        """``left`` is told once of each watcher that is no longer shown the conversation
        (its socket gone, or dropped for falling behind)."""
        self.conn_id = conn_id
        self.observer = observer
        self.history = History(history)
        self.answers = Answers()
        self.lag_bytes = max(LAG_HISTORIES * history, MIN_LAG_BYTES)
        self.watchers: set[Watcher] = set()
        self._tell_controller = tell_controller
        self._to_agent = to_agent
        self._left = left
        self._tasks: set[asyncio.Task[None]] = set()
        self._judgings: weakref.WeakSet[_ControllerJudging] = weakref.WeakSet()

    @property
    def count(self) -> int:
        return len(self.watchers)

    # -- the conversation, as the relay carries it: the watchers' tap on the pumps -------

    @property
    def client_frame_tap(self) -> Tap:
        """What the client → agent pump tells of the lines it wrote to the agent."""
        return self.client_forwarded

    @property
    def agent_lines_tap(self) -> Callable[[Sequence[bytes]], None]:
        """What the agent → client pump tells of the lines of each read it sent."""
        return self.agent_lines

    def client_forwarded(self, outcomes: list[Forward]) -> None:
        """A batch of the controller's lines reached the agent (as the boundary made them):
        kept in a few C-speed calls, whatever the batch's length; each shown as the agent
        got it, but for the values of the MCP servers the relay added (:func:`shown_line`)."""
        if len(outcomes) == 1:  # one message in flight: a line alone, with fewer calls
            outcome = outcomes[0]
            self._keep_line(
                FROM_CLIENT, outcome.line if outcome.rewrite is None else shown_line(outcome)
            )
            return
        lines = list(map(_LINE, outcomes))
        if list(map(_REWRITE, outcomes)).count(None) != len(lines):  # rare: lines rewritten
            lines = [shown_line(outcome) for outcome in outcomes]
        self._keep(FROM_CLIENT, lines)

    def agent_lines(self, lines: Sequence[bytes]) -> None:
        """Lines the agent wrote went to the client (as the client got them)."""
        if self.answers.agent_lines(lines):  # a request read: the controller's answer awaited
            self._judge_answers()
        self._keep(FROM_AGENT, lines)

    def _keep(self, origin: Origin, lines: Sequence[bytes]) -> None:
        """``lines`` of ``origin`` into the history, and to every watcher: a batch in a few
        C-speed calls, its frames encoded once."""
        first = self.history.add(origin, lines)
        if self.watchers:
            heads = conversation_heads(first, origin, len(lines))
            self._show_data(text_frames_of(heads, lines))

    def _keep_line(self, origin: Origin, line: bytes) -> None:
        """:meth:`_keep` of one line, with fewer calls."""
        first = self.history.add_line(origin, line)
        if self.watchers:
            self._show(conversation_frames(first, origin, (line,)))

    def controller_judge(self, judge: Judge, subject: str) -> Judging:
        """``judge`` for the controller's frames, with its answers to the agent's permission
        requests checked while one may come (:attr:`Answers.awaiting`): the first answer
        goes on, a late one is dropped, one the relay cannot read is refused. While none
        may come (nearly always), the frames meet ``judge`` alone: no call of the
        watchers' per frame."""

        def judged(frame: Received) -> Outcome:
            outcome = judge(frame)
            if outcome.__class__ is not Forward:
                return outcome
            assert isinstance(outcome, Forward)
            verdict = self.answers.controller_line(outcome.line, by=subject)
            if verdict is None:
                return outcome
            if isinstance(verdict, Taken):
                self.observer.answer_taken(Origin.CONTROLLER, subject)
                self._announce(verdict.notice)
                self._judge_answers()
            elif isinstance(verdict, Late):
                self.observer.answer_late(Origin.CONTROLLER, subject)
                self._judge_answers()
                return Skip("answered", len(outcome.line))
            else:
                return Refuse(verdict.reply, verdict.reason, outcome.frame)
            return outcome

        judging = _ControllerJudging(judge, judged)
        judging.check(self.answers.awaiting)
        self._judgings.add(judging)
        return judging

    def _judge_answers(self) -> None:
        """The answers awaited changed: the controller's judges check its lines or not."""
        awaiting = self.answers.awaiting
        for judging in self._judgings:
            judging.check(awaiting)

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Tell every watcher something of the relay's own (the controller detached, came
        back)."""
        if self.watchers:
            self._show([relay_frame(notification(method, params))])

    # -- one watcher -----------------------------------------------------------------------

    async def watch(self, attachment: Attachment, claims: Claims) -> None:
        """Show ``attachment`` the conversation so far, then live, and take its answers,
        until the socket or the connection goes."""
        watcher = Watcher(attachment, claims.sub, claims.may_answer, EncodedFrames(attachment.ws))
        history = self.history
        first = watching_frame(
            self.conn_id,
            may_answer=watcher.may_answer,
            first=history.first,
            messages=len(history),
            dropped=history.dropped,
        )
        self.watchers.add(watcher)
        self.observer.watcher_attached(watcher.subject, watcher.may_answer, len(self.watchers))
        try:
            watcher.frames.write(text_frames([first, *history.frames()]))
            await self._receive(watcher)
        finally:
            self._drop(watcher)
            self.observer.watcher_left(watcher.subject, attachment.close_code, len(self.watchers))

    async def _receive(self, watcher: Watcher) -> None:
        """A watcher's frames: answers taken or not, anything else refused, until it goes
        or :data:`MAX_REFUSED` of its frames were refused.

        websockets closes the socket with 1009 on a frame's header over
        :data:`WATCHER_FRAME_BYTES` (the limit was set at the upgrade: websockets'
        ``max_size``); a larger frame sent before the upgrade's answer gets here, and is
        closed the same way without being read."""
        receive, refused = Receiver(watcher.attachment.ws), 0
        with suppress(ConnectionClosed):
            while True:
                data = await receive()  # a text frame's bytes, or a binary frame's size
                if len(data) > WATCHER_FRAME_BYTES:
                    reason = f"frame exceeds limit of {WATCHER_FRAME_BYTES} bytes"
                    await watcher.attachment.close(CloseCode.MESSAGE_TOO_BIG, reason)
                    return
                verdict = self.answers.watcher_frame(
                    data, may_answer=watcher.may_answer, by=watcher.subject
                )
                if isinstance(verdict, Taken):
                    self._judge_answers()  # the controller's own answer is now late
                    await self._to_agent([verdict.line])
                    self._keep_line(FROM_WATCHER, verdict.line)
                    self.observer.answer_taken(Origin.WATCHER, watcher.subject)
                    self._announce(verdict.notice)
                elif isinstance(verdict, Late):
                    self.observer.answer_late(Origin.WATCHER, watcher.subject)
                else:
                    self._send(watcher, text_frames([relay_frame(verdict.reply)]))
                    self.observer.watcher_refused(watcher.subject, verdict.reason)
                    refused += 1
                    if refused >= MAX_REFUSED:
                        await watcher.attachment.close(TOO_MANY_REFUSED, too_many_refused())
                        return

    # -- frames out ------------------------------------------------------------------------

    def _show(self, frames: Sequence[bytes]) -> None:
        """The same frames to every watcher: encoded once, written without waiting."""
        self._show_data(text_frames(frames))

    def _show_data(self, data: bytes) -> None:
        """The same encoded frames to every watcher, written without waiting."""
        for watcher in list(self.watchers):
            self._send(watcher, data)

    def _send(self, watcher: Watcher, data: bytes) -> None:
        if watcher.frames.write(data) and watcher.frames.buffered() > self.lag_bytes:
            self._drop(watcher)
            self.observer.watcher_fell_behind(watcher.subject, watcher.frames.buffered())
            reason = f"fell behind: more than {self.lag_bytes} bytes unread"
            self._spawn(watcher.attachment.close(FELL_BEHIND, reason))

    def _drop(self, watcher: Watcher) -> None:
        """``watcher`` is shown nothing more (told once, however it went)."""
        if watcher in self.watchers:
            self.watchers.discard(watcher)
            self._left()

    def _announce(self, notice: bytes) -> None:
        """Which answer was taken, to every attached socket (the controller too) while any
        watcher is attached: a controller alone is told nothing it did not send."""
        if not self.watchers:
            return
        self._show([relay_frame(notice)])
        self._spawn(self._tell_controller(notice))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close_all(self, code: int, reason: str) -> None:
        """Close every watcher with ``code`` and ``reason``, and wait for what is still being
        sent."""
        closing = [watcher.attachment.close(code, reason) for watcher in list(self.watchers)]
        await asyncio.gather(*closing, *list(self._tasks), return_exceptions=True)

    def release(self) -> None:
        """The connection ended: nothing goes to it any more."""
        self._tell_controller = self._to_agent = _nowhere
        self._left = _nothing


class Watchers(Protocol):
    """What a connection asks of its watchers: :class:`Watching` when sharing is on, else
    :data:`NO_WATCHING`, which has none and costs the pumps nothing."""

    @property
    def history(self) -> History: ...

    @property
    def count(self) -> int: ...

    @property
    def client_frame_tap(self) -> Tap | None: ...

    @property
    def agent_lines_tap(self) -> Callable[[Sequence[bytes]], None] | None: ...

    def controller_judge(self, judge: Judge, subject: str) -> Judge | Judging: ...

    def notify(self, method: str, params: dict[str, Any]) -> None: ...

    async def watch(self, attachment: Attachment, claims: Claims) -> None: ...

    async def close_all(self, code: int, reason: str) -> None: ...

    def release(self) -> None: ...


class _ControllerJudging:
    """The controller's judge (a :class:`relay.streams.pump.Judging`): ``plain`` alone, or
    ``checked`` (its answers to permission requests checked) while one may come."""

    __slots__ = ("__weakref__", "checked", "now", "plain")

    def __init__(self, plain: Judge, checked: Judge) -> None:
        self.plain, self.checked, self.now = plain, checked, plain

    def check(self, answers: bool) -> None:
        self.now = self.checked if answers else self.plain


_LINE = attrgetter("line")
_REWRITE = attrgetter("rewrite")


class NoWatching:
    """A connection without sharing (``--max-watchers 0``): no tap on the pumps, no
    history, nothing to tell; the upgrade admits no watcher."""

    history = History(0)
    count = 0
    client_frame_tap = None
    agent_lines_tap = None

    def controller_judge(self, judge: Judge, subject: str) -> Judge:
        return judge

    def notify(self, method: str, params: dict[str, Any]) -> None:
        pass

    async def watch(self, attachment: Attachment, claims: Claims) -> None:
        raise AssertionError("sharing is off: the upgrade admits no watcher")

    async def close_all(self, code: int, reason: str) -> None:
        pass

    def release(self) -> None:
        pass


NO_WATCHING = NoWatching()


def shown_line(outcome: Forward) -> bytes:
    """The line of ``outcome`` as watchers see it: the agent's, with every header and env
    value of the relay's own MCP servers ``[redacted]`` and their other strings redacted
    (:func:`relay.acp.mcp.hide_injected`); the client's frame should that line be
    unreadable. Only a line the relay merged its servers into is read again."""
    report = outcome.rewrite
    injected = report.mcp.injected if report is not None and report.mcp is not None else ()
    if not injected:
        return outcome.line
    hidden = hide_injected(outcome.line, injected, redactor().redact_text)
    return outcome.frame if hidden is None else hidden[0]


async def _nowhere(_: Any) -> None:
    """Where lines meant for an ended connection go."""


def _nothing() -> None:
    """What an ended connection is told of its watchers."""
