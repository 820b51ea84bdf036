"""Watchers of a connection (``acp-relay.watch.v1``): the frames of the watch profile,
written by the relay and read back by a watcher.

Pure. A connection has its controlling socket and may have watchers: sockets that see
the conversation (the lines the controller sent to the agent and the lines the agent
wrote, in the order the relay carried them) and, with a ticket that allows it, answer
the agent's permission requests. Written down for client authors in
``docs/sharing.md``.

Frames to a watcher, all text:

- once, first: ``{"type":"watching",...}``, a control frame (no newline) saying which
  connection, whether this watcher may answer, and how much of the history follows;
- a conversation line: ``{"seq":N,"from":"client"}`` or ``{"seq":N,"from":"agent"}``, a
  newline, then the line exactly as the agent received it or wrote it, except that the
  values of the MCP servers the relay added to a session request are hidden
  (:func:`relay.acp.mcp.hide_injected`: they are the operator's). ``seq`` numbers the
  conversation's lines from 1 since the connection opened;
- a line of the relay's own: ``{"from":"relay"}``, a newline, then a JSON-RPC message:
  a notification in an ``_acp-relay/`` extension method (an answer was taken, the
  controller detached or resumed) or the error answering a frame the relay refused.

A watcher sends JSON-RPC responses only, and which answer to an agent's request is taken
is :mod:`relay.acp.answers`'s; every attached socket is told (:data:`ANSWERED`). What a
watcher is shown first is the conversation so far (:mod:`relay.core.watchhistory`).

A watcher's side reads those frames back with :func:`read_frame` (``acp-relay watch``),
and writes them for scripts as NDJSON records with :func:`raw_record`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from relay.core import strictjson

WATCH_PROFILE = "acp-relay.watch.v1"
FELL_BEHIND = 4429  # close code: a watcher that did not read fast enough is dropped
ANSWERED = "_acp-relay/answered"
DETACHED = "_acp-relay/detached"
RESUMED = "_acp-relay/resumed"
MAX_HEADER_BYTES = 4096  # a frame's header (or the first frame) is read up to this size
HEADER_ROOM = 1024  # what a watcher takes past the longest line: a frame's header and newline


class Origin(enum.Enum):
    """Who a line of the conversation (or an answer to a permission request) came from: one
    vocabulary for the history, the answers, the logs, the metrics and the frames.

    Its value is a frame's ``from``; :attr:`answerer` names the controller and a watcher as
    the answered notice's ``by`` and the metrics' labels do. Both are public
    (docs/sharing.md, docs/operations.md): they do not change.
    """

    CONTROLLER = "client"  # the controlling socket's client
    AGENT = "agent"
    WATCHER = "watcher"  # an answer a watcher gave, as the agent received it
    RELAY = "relay"  # a message of the relay's own

    @property
    def answerer(self) -> str:
        """Who answered a permission request, by name: ``controller`` or ``watcher``."""
        return "controller" if self is Origin.CONTROLLER else self.value


ORIGINS = (Origin.CONTROLLER, Origin.AGENT, Origin.WATCHER)  # of the conversation's lines
# The names serve's watchers (relay.server.connections.sharing) give the conversation's origins.
FROM_CLIENT, FROM_AGENT, FROM_WATCHER = ORIGINS
_FROM = {origin: origin.value.encode() for origin in Origin}  # as a frame's header has it
_RELAY_HEADER = b'{"from":"%b"}\n' % _FROM[Origin.RELAY]


def conversation_frame(seq: int, origin: Origin, line: bytes) -> bytes:
    """The frame carrying conversation line ``seq`` to watchers: header, newline, line."""
    return _frame(seq, _FROM[origin], line)


def conversation_frames(first: int, origin: Origin, lines: Sequence[bytes]) -> list[bytes]:
    """The frames of ``lines`` from ``origin``, numbered from ``first``."""
    return list(map(bytes.__add__, conversation_heads(first, origin, len(lines)), lines))


def conversation_heads(first: int, origin: Origin, count: int) -> list[bytes]:
    """The headers (newline included) of ``count`` conversation frames from ``origin``,
    numbered from ``first``: each frame is its header, then its line (made in one map)."""
    return list(map(_HEAD.__mod__, zip(range(first, first + count), repeat(_FROM[origin]))))


def _frame(seq: int, name: bytes, line: bytes) -> bytes:
    return _HEAD % (seq, name) + line


_HEAD = b'{"seq":%d,"from":"%b"}\n'


def relay_frame(message: bytes) -> bytes:
    """The frame carrying a JSON-RPC message of the relay's own to a watcher."""
    return _RELAY_HEADER + message


def watching_frame(
    connection: str, *, may_answer: bool, first: int, messages: int, dropped: int
) -> bytes:
    """The first frame a watcher gets: the history follows it (``messages`` lines from
    ``first`` on; ``dropped`` older ones no longer kept), then the conversation live."""
    frame = {
        "type": "watching",
        "connection": connection,
        "mayAnswer": may_answer,
        "history": {"first": first, "messages": messages, "dropped": dropped},
    }
    return json.dumps(frame, separators=(",", ":")).encode()


def notification(method: str, params: dict[str, Any]) -> bytes:
    """A JSON-RPC notification of the relay's own (an ``_acp-relay/`` extension method)."""
    message = {"jsonrpc": "2.0", "method": method, "params": params}
    return strictjson.dumps(message)


# -- the frames, as a watcher reads them ---------------------------------------------------


@dataclass(frozen=True)
class Opening:
    """The first frame: the connection watched, and the history that follows it."""

    connection: str
    may_answer: bool
    first: int
    messages: int
    dropped: int


@dataclass(frozen=True)
class Said:
    """A line of the conversation: its number, who sent it (the ``from`` as the relay wrote
    it: an :class:`Origin`'s value, or a name of a newer relay's) and the line as it
    crossed."""

    seq: int
    origin: str
    line: bytes


@dataclass(frozen=True)
class Told:
    """A JSON-RPC message of the relay's own (its text, unparsed)."""

    message: bytes


@dataclass(frozen=True)
class Garbled:
    """A frame that is none of the profile's; ``why`` says what is wrong with it."""

    frame: bytes
    why: str


Frame = Opening | Said | Told | Garbled


def read_frame(frame: bytes) -> Frame:
    """What one frame to a watcher is (its header read within :data:`MAX_HEADER_BYTES`)."""
    head, newline, line = frame.partition(b"\n")
    try:
        header = strictjson.loads(head, max_bytes=MAX_HEADER_BYTES)
    except strictjson.JsonRefused as exc:
        return Garbled(frame, f"its header is not readable JSON: {exc}")
    if not isinstance(header, dict):
        return Garbled(frame, "its header is not a JSON object")
    if not newline:
        return _opening(header) or Garbled(frame, "a control frame of no known type")
    origin, seq = header.get("from"), _count(header.get("seq"))
    if origin == Origin.RELAY.value:
        return Told(line)
    if isinstance(origin, str) and seq is not None:
        return Said(seq, origin, line)
    return Garbled(frame, "its header has no seq and from")


def _opening(header: dict[str, Any]) -> Opening | None:
    history = header.get("history")
    if header.get("type") != "watching" or not isinstance(history, dict):
        return None
    counts = [_count(history.get(key)) for key in ("first", "messages", "dropped")]
    connection, may_answer = header.get("connection"), header.get("mayAnswer")
    if not isinstance(connection, str) or not isinstance(may_answer, bool):
        return None
    first, messages, dropped = counts
    if first is None or messages is None or dropped is None:
        return None
    return Opening(connection, may_answer, first, messages, dropped)


def _count(value: Any) -> int | None:
    """A non-negative integer of a header, or None."""
    if isinstance(value, strictjson.Number) and value.text.isdigit():
        return int(value.text)
    return None


def raw_record(frame: Frame) -> bytes:
    """``frame`` as one NDJSON object for scripts, without the newline: the first frame as
    it came, ``{"seq","from","line"}`` with the line as a JSON string, ``{"from":"relay",
    "message"}``, or ``{"type":"garbled","why","frame"}``. ASCII only: a terminal shows it
    as it is."""
    if isinstance(frame, Opening):
        return watching_frame(
            frame.connection,
            may_answer=frame.may_answer,
            first=frame.first,
            messages=frame.messages,
            dropped=frame.dropped,
        )
    if isinstance(frame, Said):
        record: dict[str, Any] = {"seq": frame.seq, "from": frame.origin, "line": _text(frame.line)}
    elif isinstance(frame, Told):
        record = {"from": Origin.RELAY.value, "message": _message(frame.message)}
    else:
        record = {"type": "garbled", "why": frame.why, "frame": _text(frame.frame)}
    return json.dumps(record, separators=(",", ":")).encode()


def closed_record(code: int, reason: str) -> bytes:
    """The last NDJSON object: how the relay closed the socket."""
    record = {"type": "closed", "code": code, "reason": reason}
    return json.dumps(record, separators=(",", ":")).encode()


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _message(data: bytes) -> Any:
    """The relay's message as a JSON value (its text when it is not readable JSON)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return _text(data)
