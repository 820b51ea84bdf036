"""A connection the bot follows as a watcher (``chat share``): what its thread shows, and
which answer to each permission request was taken.

Pure. The watch profile's frames (:func:`relay.core.watchprofile.read_frame`) come in: the
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

from relay.acp.refusals import id_key
from relay.chat.permissions import Request, read_request, request_of, request_state
from relay.chat.text import cut, safe, safe_line
from relay.chat.turns import Thoughts, TurnView
from relay.core import strictjson
from relay.core.watchprofile import ANSWERED, DETACHED, RESUMED, Frame, Garbled, Opening, Said, Told

MAX_LINE_BYTES = 8 << 20
MAX_REMEMBERED = 1024  # the editor's requests and the agent's permission requests remembered
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
        self.may_answer = False
        self.last_seq = 0  # the last conversation line taken (a re-attach skips up to it)
        self._prompts: OrderedDict[Any, None] = OrderedDict()  # the editor's prompt ids
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
        try:
            message = strictjson.loads(line, max_bytes=MAX_LINE_BYTES)
        except strictjson.JsonRefused:
            return WatchStep()
        if not isinstance(message, dict):
            return WatchStep()
        if origin == "client":
            return self._editor(message)
        if origin == "agent":
            return self._agent(message)
        return WatchStep()

    def _editor(self, message: dict[str, Any]) -> WatchStep:
        method = message.get("method")
        if method == "session/prompt" and "id" in message:
            _remember(self._prompts, id_key(message["id"]), None)
            text = _prompt_text(message.get("params"))
            self.view.start_turn()
            self.view.note(f"🧑‍💻 The editor's prompt: {cut(safe(text), PROMPT_CHARS)}")
            return WatchStep()
        if method is None and "id" in message:  # the editor answered one of the agent's requests
            request = self._requests.pop(id_key(message["id"]), None)
            if request is not None:
                return WatchStep(taken=[Taken(request, "controller", "", message.get("result"))])
        return WatchStep()

    def _agent(self, message: dict[str, Any]) -> WatchStep:
        method = message.get("method")
        if method == "session/update":
            params = message.get("params")
            if isinstance(params, dict):
                self.view.update(params.get("update"))
        elif method == "session/request_permission" and "id" in message:
            request = read_request(message)
            if request is not None:
                _remember(self._requests, id_key(request.request_id), request)
                return WatchStep(requests=[request])
        elif method is None and id_key(message.get("id")) in self._prompts:
            self._prompts.pop(id_key(message.get("id")))
            result = message.get("result")
            reason = result.get("stopReason") if isinstance(result, dict) else None
            self.view.end_turn(reason if isinstance(reason, str) else "error")
        return WatchStep()

    def _told(self, text: bytes) -> WatchStep:
        try:
            message = strictjson.loads(text, max_bytes=MAX_LINE_BYTES)
        except strictjson.JsonRefused:
            return WatchStep()
        params = message.get("params") if isinstance(message, dict) else None
        params = params if isinstance(params, dict) else {}
        method = message.get("method") if isinstance(message, dict) else None
        if method == ANSWERED:
            request = self._requests.pop(id_key(params.get("id")), None)
            if request is not None:
                by, subject = params.get("by"), params.get("subject")
                return WatchStep(
                    taken=[
                        Taken(
                            request,
                            by if isinstance(by, str) else "?",
                            subject if isinstance(subject, str) else "",
                            params.get("result"),
                        )
                    ]
                )
        elif method == DETACHED:
            self.view.note("⏸ The editor's connection dropped; the relay waits for it to resume.")
        elif method == RESUMED:
            self.view.note("▶️ The editor's connection resumed.")
        return WatchStep()

    def snapshot(self) -> dict[str, Any]:
        """Everything this holds, as JSON values (for the state file)."""
        return {
            "view": self.view.snapshot(),
            "last": self.last_seq,
            "answer": self.may_answer,
            "prompts": [[kind, str(value)] for kind, value in self._prompts],
            "requests": [request_state(r) for r in self._requests.values()],
        }

    def restore(self, kept: dict[str, Any]) -> None:
        """Back to what :meth:`snapshot` kept."""
        self.view.restore(kept["view"])
        self.last_seq, self.may_answer = kept["last"], kept["answer"]
        for kind, value in kept["prompts"]:
            _remember(self._prompts, (kind, Decimal(value) if kind == "n" else value), None)
        for state in kept["requests"]:
            request = request_of(state)
            _remember(self._requests, id_key(request.request_id), request)


def _prompt_text(params: Any) -> str:
    blocks = params.get("prompt") if isinstance(params, dict) else None
    texts = (
        [b.get("text") for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []
    )
    return " ".join(text for text in texts if isinstance(text, str))


def _remember(book: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    if key is None:
        return
    book[key] = value
    while len(book) > MAX_REMEMBERED:
        book.popitem(last=False)
