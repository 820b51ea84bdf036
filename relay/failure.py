"""What ``connect`` tells the editor when the relay connection fails, and whom it must tell.

Pure: values in, values out. An editor that launched ``acp-relay connect`` as its agent
waits for an answer to every request it sent; when the relay cannot be reached, refuses
the upgrade, or the socket ends, each of those requests (and every later one) gets a
JSON-RPC error whose ``message`` says the cause in words and whose ``data`` carries the
details. :class:`InFlight` remembers which editor requests still await the agent's
response, cheaply: a line's top-level keys are read from its first few KiB, so a 16 MiB
prompt or reply costs about as much as a small one.

Error code: -32603 (internal error) for every cause. ACP's -32000 ("authentication
required") would make an editor offer the agent's sign-in methods, which cannot fix a
relay ticket; -32002 ("resource not found") is about sessions and files, not the relay's
URL. ``data.cause`` tells the causes apart for programs.
"""

from __future__ import annotations

import http
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from relay.redact import REDACTED

INTERNAL_ERROR = -32603
MAX_IN_FLIGHT = 4096  # requests tracked at once; past that, new ones are not tracked
MAX_ID_CHARS = 256  # a string id longer than this is not tracked
HEAD_CHARS = 4096  # how much of a line is read to find its top-level keys
MAX_REASON_CHARS = 300  # how much of an HTTP body a message quotes

HEARTBEAT_REASON = "keepalive ping timeout"  # websockets' own close reason

RequestId = str | int | float
Cause = Literal["ticket", "dns", "refused", "reset", "timeout", "network", "tls", "handshake"]

_CLOSE_NAMES = {
    1000: "normal closure",
    1001: "going away",
    1002: "protocol error",
    1003: "unsupported data",
    1006: "abnormal closure",
    1007: "invalid data",
    1008: "policy violation",
    1009: "message too big",
    1011: "internal error",
    1012: "service restart",
    1013: "try again later",
}


# -- failures ---------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """Why the relay connection is unusable: the error every editor request now gets.

    ``exit_status`` is what ``connect`` exits with once the editor closes its stdin.
    """

    message: str
    data: Mapping[str, Any]
    code: int = INTERNAL_ERROR
    exit_status: int = 1

    def error_response(self, request_id: RequestId) -> bytes:
        """The JSON-RPC error response to request ``request_id``, one line without ``\\n``."""
        error = {"code": self.code, "message": self.message, "data": dict(self.data)}
        response = {"jsonrpc": "2.0", "id": request_id, "error": error}
        return json.dumps(response, ensure_ascii=False, separators=(",", ":")).encode()

    def redacted(self, secret: str | None) -> Failure:
        """This failure with every occurrence of ``secret`` (the ticket) replaced."""
        if not secret:
            return self

        def scrub(value: Any) -> Any:
            return value.replace(secret, REDACTED) if isinstance(value, str) else value

        data = {key: scrub(value) for key, value in self.data.items()}
        return replace(self, message=scrub(self.message), data=data)


@dataclass(frozen=True)
class Close:
    """A close frame: code and reason."""

    code: int
    reason: str = ""


def cannot_connect(url: str, cause: Cause, detail: str) -> Failure:
    """The connection could not be made (no HTTP answer): DNS, TCP, TLS, handshake, ticket."""
    host = urlsplit(url).hostname or url
    message = _CANNOT_CONNECT[cause].format(url=url, host=host, detail=detail)
    return Failure(message, {"url": url, "cause": cause, "detail": detail})


_CANNOT_CONNECT: dict[Cause, str] = {
    "ticket": "cannot get a ticket for relay at {url}: {detail}",
    "dns": "cannot reach relay at {url}: cannot resolve {host} ({detail})",
    "refused": "cannot reach relay at {url}: connection refused",
    "reset": "cannot reach relay at {url}: {detail}",
    "timeout": "cannot reach relay at {url}: {detail}",
    "network": "cannot reach relay at {url}: {detail}",
    "tls": "TLS handshake with relay at {url} failed: {detail}",
    "handshake": "relay at {url} did not accept a WebSocket: {detail}",
}


def http_refusal(url: str, status: int, body: bytes, retry_after: str | None = None) -> Failure:
    """The relay (or a proxy) answered the upgrade with ``status`` and a reason in ``body``."""
    reason = reason_from_body(status, body)
    if status == 401:
        message = f"relay refused the ticket (401): {reason}"
    elif status == 404:
        message = f"relay has no ACP endpoint at {url} (404): {reason}"
    elif status == 503:
        message = f"relay is busy (503): {reason}"
    else:
        message = f"relay refused the connection ({status}): {reason}"
    data: dict[str, Any] = {"url": url, "cause": "http", "status": status, "reason": reason}
    if retry_after is not None:
        data["retryAfter"] = retry_after
    return Failure(message, data)


def reason_from_body(status: int, body: bytes) -> str:
    """The first line of a plain-text body, or the status phrase for an empty or HTML body."""
    text = body.decode("utf-8", "replace").strip()
    if not text or text.startswith("<"):
        try:
            return http.HTTPStatus(status).phrase
        except ValueError:
            return f"HTTP {status}"
    line = text.splitlines()[0].strip()
    if len(line) > MAX_REASON_CHARS:
        return line[: MAX_REASON_CHARS - 3] + "..."
    return line


def connection_closed(
    url: str,
    *,
    received: Close | None,
    sent: Close | None,
    relay_first: bool,
    ping_timeout: float,
) -> Failure:
    """The open socket ended; who closed it and how decides the words.

    ``received``/``sent`` are the close frames received from and sent to the relay
    (None when there was none); ``relay_first`` is True when the relay's came first.
    """
    if received is not None and (sent is None or relay_first):
        return _closed_by_relay(url, received)
    if sent is not None:
        return _closed_by_connect(url, sent, ping_timeout)
    data = {"url": url, "cause": "lost", "closeCode": 1006, "closeReason": ""}
    return Failure(f"lost the connection to the relay at {url} (no close frame)", data)


def _closed_by_relay(url: str, close: Close) -> Failure:
    if close.reason.startswith("agent "):
        message = close.reason  # the relay's words: "agent exited with status 3", ...
    else:
        message = f"relay closed the connection ({_describe(close)})"
    data = {
        "url": url,
        "cause": "closed",
        "closedBy": "relay",
        "closeCode": close.code,
        "closeReason": close.reason,
    }
    return Failure(message, data, exit_status=0 if close.code == 1000 else 1)


def _closed_by_connect(url: str, close: Close, ping_timeout: float) -> Failure:
    data: dict[str, Any] = {
        "url": url,
        "cause": "closed",
        "closedBy": "connect",
        "closeCode": close.code,
        "closeReason": close.reason,
    }
    if close.code == 1011 and close.reason == HEARTBEAT_REASON:
        data.update(cause="heartbeat", pingTimeout=ping_timeout)
        message = (
            f"lost the relay at {url}: no answer to a heartbeat ping within {ping_timeout:g} s"
        )
    elif close.code == 1009:
        message = f"relay sent a message over --max-message-bytes ({close.reason})"
    else:
        message = f"connection to the relay at {url} failed ({_describe(close)})"
    return Failure(message, data)


def _describe(close: Close) -> str:
    name = _CLOSE_NAMES.get(close.code, "close code")
    return f"{close.code} {name}" + (f": {close.reason}" if close.reason else "")


# -- which requests await an answer ------------------------------------------------


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
