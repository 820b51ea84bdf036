"""Which of the editor's requests still await the agent's response.

Pure: lines in, ids out. :class:`InFlight` remembers the ids of the editor requests that
``connect`` sent on and the agent has not answered, so that when the relay connection
fails each of them can be answered with the failure
(:mod:`relay.client.link.editorerrors`). Telling a request from a response reads a line's
top-level keys from its first :data:`HEAD_CHARS` characters when they decide, so a big
prompt or reply is not parsed whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_IN_FLIGHT = 4096  # requests tracked at once; past that, new ones are not tracked
MAX_ID_CHARS = 256  # a string id longer than this is not tracked
HEAD_CHARS = 4096  # how much of a line is read to find its top-level keys

RequestId = str | int | float


class InFlight:
    """Ids of the editor's requests that the agent has not answered yet (at most ``limit``).

    A request is an editor line with ``method`` and ``id``; a response is an agent line
    with ``id`` and ``result`` or ``error`` and no ``method``. The agent's own requests
    to the editor do not count. A line over :data:`HEAD_CHARS` is classified by its
    first keys when they decide (``id`` and ``method``, or ``id`` and ``result``),
    else parsed whole; the two agree on every valid message (a line with both
    ``method`` and ``result`` is not one: it goes by whichever comes first).
    """

    def __init__(self, limit: int = MAX_IN_FLIGHT) -> None:
        self.limit = limit
        self._ids: dict[tuple[bool, RequestId], RequestId] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def request_sent(self, line: bytes) -> bool:
        """Note an editor line on its way to the agent; False if a request was left untracked."""
        request = request_id(line)
        if request is None:
            return True
        if len(self._ids) >= self.limit or (
            isinstance(request, str) and len(request) > MAX_ID_CHARS
        ):
            return False
        self._ids[_key(request)] = request
        return True

    def response_received(self, line: bytes) -> None:
        """Note an agent line on its way to the editor: a response settles its request."""
        if not self._ids:
            return
        response = response_id(line)
        if response is not None:
            self._ids.pop(_key(response), None)

    def settle_all(self) -> list[RequestId]:
        """Every request still awaiting an answer, oldest first; forgets them."""
        pending = list(self._ids.values())
        self._ids.clear()
        return pending


def _key(request: RequestId) -> tuple[bool, RequestId]:
    return (isinstance(request, str), request)


def request_id(line: bytes) -> RequestId | None:
    """The id of a JSON-RPC request line (``method`` and ``id``); None for anything else."""
    envelope = _envelope(line, _request_decided)
    if envelope is None or not envelope.method or envelope.outcome:
        return None
    return _valid_id(envelope.id)


def response_id(line: bytes) -> RequestId | None:
    """The id of a JSON-RPC response line (``id``, ``result`` or ``error``, no ``method``)."""
    envelope = _envelope(line, _response_decided)
    if envelope is None or envelope.method or not envelope.outcome:
        return None
    return _valid_id(envelope.id)


def _valid_id(value: object) -> RequestId | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    return value


_MISSING = object()


@dataclass
class _Envelope:
    """The top-level keys of a message that tell requests from responses."""

    id: object = field(default=_MISSING)
    method: bool = False
    outcome: bool = False  # has "result" or "error"


def _request_decided(envelope: _Envelope) -> bool:
    return envelope.outcome or (envelope.method and envelope.id is not _MISSING)


def _response_decided(envelope: _Envelope) -> bool:
    return envelope.method or (envelope.outcome and envelope.id is not _MISSING)


def _envelope(line: bytes, decided: Callable[[_Envelope], bool]) -> _Envelope | None:
    """The envelope of a JSON object line, from its head when that decides, else parsed whole."""
    if len(line) > HEAD_CHARS:
        head = line[:HEAD_CHARS].decode("utf-8", "ignore")
        try:
            envelope = _scan(head, decided)
        except _Undecided:
            pass
        else:
            return envelope
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    return _Envelope(
        id=message.get("id", _MISSING),
        method="method" in message,
        outcome="result" in message or "error" in message,
    )


class _Undecided(Exception):
    """The head of a line ended (or was not JSON) before its kind was known."""


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _scan(text: str, decided: Callable[[_Envelope], bool]) -> _Envelope:
    """Read top-level members of the JSON object in ``text`` until ``decided`` says enough."""
    envelope = _Envelope()
    pos = _expect(text, _skip(text, 0), "{")
    while True:
        key, pos = _value(text, _skip(text, pos))
        if not isinstance(key, str):
            raise _Undecided
        pos = _skip(text, _expect(text, _skip(text, pos), ":"))
        if key == "method":
            envelope.method = True
        elif key in ("result", "error"):
            envelope.outcome = True
        if decided(envelope):
            return envelope
        value, pos = _value(text, pos)
        if key == "id":
            envelope.id = value
            if decided(envelope):
                return envelope
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos += 1
        else:
            raise _Undecided  # the object ended undecided: let the full parse say why


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _expect(text: str, pos: int, char: str) -> int:
    if not text.startswith(char, pos):
        raise _Undecided
    return pos + 1


def _value(text: str, pos: int) -> tuple[Any, int]:
    """Decode one JSON value at ``pos``; it must end before the head does (a cut number lies)."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except ValueError:
        raise _Undecided from None
    if end >= len(text):
        raise _Undecided
    return value, end
