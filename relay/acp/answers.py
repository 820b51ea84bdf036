"""Which answer to an agent's permission request is taken: the first, from the controller
or from a watcher allowed to answer (``acp-relay.watch.v1``, :mod:`relay.core.watchprofile`).

Pure. The agent's requests a watcher may answer (:data:`ANSWERABLE`) are noted from its
lines; the controller's lines and the watchers' frames that answer one are judged: the
first answer is :class:`Taken` (it goes to the agent, and every attached socket is told),
a later one :class:`Late` (dropped). A controller line is judged by what it is once read
(:mod:`relay.core.strictjson`: a top-level ``method`` makes a request, escaped keys read as
the agent reads them), and read only while it matters: while an answer may come, for a
line whose bytes may hold a response (:func:`might_answer`), up to
:data:`ANSWER_MAX_BYTES`. An agent's request is read within :data:`READ_MAX_BYTES` and
:data:`relay.acp.crossings.READ_MAX_VALUES` values; past either only the controller may
answer it. Watchers are untrusted, so what they send costs the relay little: a read-only
watcher's frames are refused unread, a frame over :data:`WATCHER_FRAME_BYTES` is never
read (the socket is closed 1009), and a watcher whose :data:`MAX_REFUSED`-th frame is
refused is closed (:data:`TOO_MANY_REFUSED`).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relay.acp.crossings import may_hold_too_many_values
from relay.acp.outcome import Binary, Received
from relay.acp.readsearch import holds_any
from relay.acp.refusals import id_key
from relay.core import strictjson
from relay.core.framing import FrameRefused, error_reply, frame_to_line
from relay.core.watchprofile import ANSWERED, Origin, notification

ANSWERABLE = ("session/request_permission",)  # what a watcher may answer: never fs or terminal
MAX_PENDING = 256  # agent requests of one connection awaiting an answer, remembered
MAX_ANSWERED = 256  # answered requests remembered, so that late answers are dropped
READ_MAX_BYTES = 8 << 20  # a larger permission request is not read: the controller answers it
ANSWER_MAX_BYTES = 64 << 10  # a longer controller line is passed on unread: no answer is as long
WATCHER_FRAME_BYTES = 4096  # a watcher's frame at most: an answer to a permission request is small
MAX_REFUSED = 5  # a watcher's frames refused before it is closed
TOO_MANY_REFUSED = 1008  # close code (policy violation): MAX_REFUSED frames were refused
_MARKERS = tuple(f'"{method}"'.encode() for method in ANSWERABLE)
_LETTER_ESCAPE = re.compile(rb"\\u00[67][0-9a-fA-F]")  # a lowercase ASCII letter, escaped

Key = tuple[str, object]  # a request id as matched (relay.acp.refusals.id_key)


@dataclass(frozen=True)
class Taken:
    """The first answer to agent request ``key``: ``line`` goes to the agent, ``notice`` to
    every attached socket."""

    key: Key
    line: bytes
    notice: bytes


@dataclass(frozen=True)
class Late:
    """An answer to a request that was answered already: dropped."""

    key: Key


@dataclass(frozen=True)
class Refused:
    """A watcher's frame (or a controller's line) the relay does not pass on; ``reply`` (a
    JSON-RPC error) says why."""

    reply: bytes
    reason: str


class Answers:
    """The agent's requests a watcher may answer, pending and answered, for one connection.

    The agent's lines are shown to :meth:`agent_lines`; only a line that names an
    answerable method is parsed. The controller's lines are shown to :meth:`controller_line`
    and read only while an answer may come from it: a request is pending, or a watcher's
    answer was taken and the controller's own (late, to be dropped) is still to come.
    """

    def __init__(self) -> None:
        self._pending: OrderedDict[Key, str] = OrderedDict()  # key -> method
        self._answered: OrderedDict[Key, None] = OrderedDict()
        self._controller_late: OrderedDict[Key, None] = OrderedDict()  # a watcher's taken

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def awaiting(self) -> bool:
        """Whether an answer may come from the controller (its lines must be shown to
        :meth:`controller_line`): a request is pending, or a watcher's answer was taken."""
        return bool(self._pending or self._controller_late)

    def agent_lines(self, lines: Sequence[bytes]) -> bool:
        """Note the answerable requests among the agent's ``lines`` (the lines of one read:
        looked at together first, one search for all of them, nearly always the only one);
        whether any line was read (then :attr:`awaiting` may have changed)."""
        if not holds_any(b"\n".join(lines), _MARKERS):  # no marker spans a newline
            return False
        for line in lines:
            if holds_any(line, _MARKERS):
                self._note(line)
        return True

    def _note(self, line: bytes) -> None:
        if may_hold_too_many_values(line):  # reading it could hold up the event loop
            return  # left to the controller, as a request too large to read
        try:
            message = strictjson.loads(line, max_bytes=READ_MAX_BYTES)
        except strictjson.JsonRefused:
            return  # the controller's SDK answers it; nobody else can
        if not isinstance(message, dict) or message.get("method") not in ANSWERABLE:
            return
        key = id_key(message.get("id"))
        if key is None:
            return
        self._pending[key] = message["method"]
        while len(self._pending) > MAX_PENDING:
            self._pending.popitem(last=False)

    def controller_line(self, line: bytes, *, by: str) -> Taken | Late | Refused | None:
        """The controller's line: None to pass it on as it is (nearly always).

        Read only while an answer may come from the controller, when its bytes may hold a
        response (:func:`might_answer`) and within :data:`ANSWER_MAX_BYTES`; what cannot be
        read unambiguously then is refused, as the agent might read it as the answer."""
        if not self.awaiting:
            return None  # the caller may even skip the call
        if len(line) > ANSWER_MAX_BYTES or not might_answer(line):
            return None
        try:
            message = strictjson.loads(line, max_bytes=ANSWER_MAX_BYTES)
        except strictjson.JsonRefused as exc:
            return _unreadable_answer(exc)
        response = _response_of(message) if isinstance(message, dict) else None
        if response is None:
            return None  # a request or a notification (a top-level method), or no response
        return self._answer(response, line, Origin.CONTROLLER, by)

    def watcher_frame(
        self, frame: Received, *, may_answer: bool, by: str
    ) -> Taken | Late | Refused:
        """A watcher's frame: its answer, taken or late, or why it is refused. Only the
        text frame of a watcher allowed to answer is read, within
        :data:`WATCHER_FRAME_BYTES`; answers are text frames, as the controller's are."""
        if not may_answer:
            return READ_ONLY
        if isinstance(frame, Binary):
            return BINARY
        if len(frame) > WATCHER_FRAME_BYTES:
            return _refused(
                f"a watcher's frame is over {WATCHER_FRAME_BYTES} bytes: it is not read",
                "send an answer to a permission request, in a frame of its own",
            )
        line = frame_to_line(frame)
        if line is None:
            return _refused("a blank frame carries no message", "send a JSON-RPC response")
        if isinstance(line, FrameRefused):
            return Refused(line.reply, line.reason)
        try:
            message = strictjson.loads(line, max_bytes=WATCHER_FRAME_BYTES)
        except strictjson.JsonRefused as exc:
            return _refused(f"not one readable JSON object: {exc}", "send a JSON-RPC response")
        if not isinstance(message, dict) or "method" in message:
            return _refused(
                "a watcher sends no requests nor notifications to the agent",
                "answer a permission request of the agent with a JSON-RPC response",
            )
        response = _response_of(message)
        if response is None:
            return _refused(
                "not a JSON-RPC response (an id, and a result or an error)",
                "answer with {jsonrpc, id, result} or {jsonrpc, id, error}",
            )
        taken = self._answer(response, line, Origin.WATCHER, by)
        if taken is None:
            shown = strictjson.dumps(response[1])[:64].decode("utf-8", "replace")
            return _refused(
                f"no permission request {shown} of the agent awaits an answer",
                "answer a request from the conversation that no one has answered yet",
            )
        return taken

    def _answer(
        self, response: tuple[Key, Any, dict[str, Any]], line: bytes, role: Origin, by: str
    ) -> Taken | Late | None:
        key, request_id, message = response
        if self._pending.pop(key, None) is not None:
            _remember(self._answered, key)
            if role is Origin.WATCHER:
                _remember(self._controller_late, key)
            params: dict[str, Any] = {"id": request_id, "by": role.answerer, "subject": by}
            params.update({k: message[k] for k in ("result", "error") if k in message})
            return Taken(key, line, notification(ANSWERED, params))
        if key in self._answered:
            if role is Origin.CONTROLLER:
                self._controller_late.pop(key, None)
            return Late(key)
        return None


def _remember(keys: OrderedDict[Key, None], key: Key) -> None:
    keys[key] = None
    while len(keys) > MAX_ANSWERED:
        keys.popitem(last=False)


def might_answer(line: bytes) -> bool:
    """Cheap test on raw bytes: False means the line certainly is no JSON-RPC response (it
    has no ``id`` key, or neither ``result`` nor ``error``), however its keys are spelled.

    A key is a JSON string: spelled without escapes, its quotes are around it; with
    escapes, a letter of it is ``\\u0061`` to ``\\u007a``.
    """
    # find(), not ``in``: on bytes ``in`` makes and drops a TypeError each time (CPython 3.11)
    if line.find(b'"id"') != -1 and (line.find(b'"result"') != -1 or line.find(b'"error"') != -1):
        return True
    return line.find(b"\\u00") != -1 and _LETTER_ESCAPE.search(line) is not None


def _unreadable_answer(problem: strictjson.JsonRefused) -> Refused:
    """The -32600 to a controller line that may answer a permission request, unreadable."""
    reason = f"a line that may answer a permission request is not readable JSON: {problem}"
    reply = error_reply(
        -32600,
        "Invalid request: the relay cannot check this answer",
        reason,
        "send each answer as one JSON object, each key once, with valid Unicode text",
    )
    return Refused(reply, reason)


def _response_of(message: dict[str, Any]) -> tuple[Key, Any, dict[str, Any]] | None:
    """(key, id, message) of a JSON-RPC response; None for anything else."""
    if "method" in message or ("result" in message) == ("error" in message):
        return None
    key = id_key(message.get("id"))
    return None if key is None else (key, message["id"], message)


def _refused(detail: str, hint: str) -> Refused:
    return Refused(error_reply(-32600, "Invalid request from a watcher", detail, hint), detail)


READ_ONLY = _refused(
    "this watcher's ticket lets it watch only: the relay reads none of its frames",
    "to answer permission requests, ask for a ticket minted with "
    "acp-relay ticket --watch ID --may-answer",
)


BINARY = _refused(
    "a binary frame: answers are text frames, as the controller's are",
    "send the JSON-RPC response as a text frame",
)


def too_many_refused() -> str:
    """The reason a watcher is closed with :data:`TOO_MANY_REFUSED`."""
    return f"{MAX_REFUSED} frames refused: a watcher sends only answers it may give"
