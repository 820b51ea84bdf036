"""A connection the bot follows as a watcher (``chat share``): what its thread shows, and
which answer to each permission request was taken.

Pure. The watch profile's frames (:func:`relay.core.watchprofile.read_frame`) come in, read
by the conversation model every surface shares (:mod:`relay.acp.conversation`): the
editor's prompts and the agent's turns are shown as a session's are
(:class:`relay.chat.turns.TurnView`), each prompt named as the editor's; the agent's
permission requests become :class:`relay.chat.permissions.Request` to show, answerable
from the chat when the watcher's ticket allows; the relay's ``_acp-relay/answered``
notice (or, in the history, the editor's own answer) says which answer was taken, the
editor's or a watcher's.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from relay.acp.changes import (
    AnswerTaken,
    ControllerDetached,
    ControllerResumed,
    PermissionAnswered,
    PermissionAsked,
    Prompted,
    Replied,
    TurnEnded,
)
from relay.acp.refusals import id_key
from relay.chat.permissions import Request, read_request, request_of, request_state
from relay.chat.text import cut, safe, safe_line
from relay.chat.turns import Thoughts, TurnView
from relay.core.watchprofile import Frame, Garbled, Opening, Said, Told

MAX_REMEMBERED = 1024  # the agent's permission requests remembered
PROMPT_CHARS = 2000


@dataclass(frozen=True)
class Taken:
    """Request ``request`` was answered: by the editor (``controller``) or a watcher, with
    ``result``; ``subject`` names the answerer's ticket."""

    request: Request
    by: str
    subject: str
    result: Any


@dataclass
class WatchStep:
    requests: list[Request] = field(default_factory=list)
    taken: list[Taken] = field(default_factory=list)


class Watched:
    """The followed conversation: what its thread shows, and its requests' fates."""

    def __init__(self, thoughts: Thoughts = "folded") -> None:
        self.view = TurnView(thoughts)
        self.conversation = self.view.conversation
        self.may_answer = False
        self.last_seq = 0  # the last conversation line taken (a re-attach skips up to it)
        self._requests: OrderedDict[Any, Request] = OrderedDict()  # pending, by id key

    def frame(self, frame: Frame) -> WatchStep:
        if isinstance(frame, Opening):
            return self._opening(frame)
        if isinstance(frame, Said):
            if frame.seq <= self.last_seq:
                return WatchStep()  # seen before a re-attach
            self.last_seq = frame.seq
            return self._said(frame.origin, frame.line)
        if isinstance(frame, Told):
            return self._told(frame.message)
        assert isinstance(frame, Garbled)
        self.view.note(f"⚠️ A frame the watch profile does not know: {cut(safe(frame.why), 200)}")
        return WatchStep()

    def _opening(self, opening: Opening) -> WatchStep:
        self.may_answer = opening.may_answer
        answers = "may be answered here" if opening.may_answer else "are only shown here"
        older = f"; {opening.dropped} older lines no longer kept" if opening.dropped else ""
        self.view.note(
            f"👀 Following the editor's connection {safe_line(opening.connection, 80)}: what "
            f"came before ({opening.messages} lines{older}), then live. Its permission "
            f"requests {answers}."
        )
        return WatchStep()

    def _said(self, origin: str, line: bytes) -> WatchStep:
        if origin not in ("client", "agent"):
            return WatchStep()
        change = self.conversation.line("client" if origin == "client" else "agent", line)
        match change:
            case Prompted(blocks=blocks):
                self.view.start_turn()
                text = cut(safe(_prompt_text(blocks)), PROMPT_CHARS)
                self.view.note(f"🧑‍💻 The editor's prompt: {text}")
            case TurnEnded(stop_reason=reason):
                self.view.end_turn(reason or "error")
            case PermissionAsked(message=message):
                request = read_request(message)
                if request is not None:
                    _remember(self._requests, id_key(request.request_id), request)
                    return WatchStep(requests=[request])
            case PermissionAnswered() | Replied() if origin == "client":
                # the editor answered one of the agent's requests
                request = self._requests.pop(id_key(change.request_id), None)
                if request is not None:
                    return WatchStep(taken=[Taken(request, "controller", "", change.result)])
            case _:
                self.view.show(change)
        return WatchStep()

    def _told(self, text: bytes) -> WatchStep:
        change = self.conversation.notice(text)
        match change:
            case AnswerTaken(request_id=request_id, by=by, subject=subject):
                request = self._requests.pop(id_key(request_id), None)
                if request is not None:
                    return WatchStep(taken=[Taken(request, by or "?", subject, change.result)])
            case ControllerDetached():
                self.view.note(
                    "⏸ The editor's connection dropped; the relay waits for it to resume."
                )
            case ControllerResumed():
                self.view.note("▶️ The editor's connection resumed.")
        return WatchStep()

    def snapshot(self) -> dict[str, Any]:
        """Everything this holds, as JSON values (for the state file)."""
        return {
            "view": self.view.snapshot(),
            "last": self.last_seq,
            "answer": self.may_answer,
            "prompts": [[kind, str(value)] for kind, value in self.conversation.prompts()],
            "requests": [request_state(r) for r in self._requests.values()],
        }

    def restore(self, kept: dict[str, Any]) -> None:
        """Back to what :meth:`snapshot` kept."""
        self.view.restore(kept["view"])
        self.last_seq, self.may_answer = kept["last"], kept["answer"]
        for kind, value in kept["prompts"]:
            self.conversation.prompted((kind, Decimal(value) if kind == "n" else value))
        for state in kept["requests"]:
            request = request_of(state)
            _remember(self._requests, id_key(request.request_id), request)


def _prompt_text(blocks: list[Any]) -> str:
    texts = [b.get("text") for b in blocks if isinstance(b, dict)]
    return " ".join(text for text in texts if isinstance(text, str))


def _remember(book: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    if key is None:
        return
    book[key] = value
    while len(book) > MAX_REMEMBERED:
        book.popitem(last=False)
