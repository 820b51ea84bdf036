"""The resume profile (``acp-relay.resume.v1``): envelopes, control frames, the replay window.

Pure: bytes and values in, bytes and values out. The profile is written down for
client authors in ``docs/resume.md``; this module is its wire format and windows, for
both sides. The state of one connection across its sockets is
:mod:`relay.core.session`'s; the I/O is :mod:`relay.connections.carriers` (serve) and
:mod:`relay.connect.resuming` (connect).

Every frame of the profile is a text frame. A frame that carries an ACP message is a
small JSON *header*, one ``\\n``, then the message exactly as the agent wrote it (or as
the client sent it): the envelope is built around the raw bytes, never by re-encoding
them. A frame without a ``\\n`` is a control frame: a header alone.

relay -> client: ``{"seq":N}\\n<agent line>`` (``"ack":M`` may ride along),
``{"ack":M}``, and once ``{"type":"welcome",...}``.
client -> relay: first ``{"type":"open"}`` or ``{"type":"resume",...}``, then
``{"seq":N}\\n<message>`` (``"ack":M`` may ride along) and ``{"ack":M}``.

``seq`` numbers the messages of one direction from 1, without gaps, across every
socket of the connection. ``ack`` is cumulative: every message up to it was received.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PROFILE = "acp-relay.resume.v1"
MAX_HEADER_BYTES = 1024  # a client header longer than this is refused
MAX_SECRET_CHARS = 128
MAX_CONNECTION_ID_CHARS = 64
MAX_SEQ = 2**53 - 1  # the largest integer every JSON parser reads exactly
_NUMBER = rb"(0|[1-9][0-9]*)"  # a whole number as JSON spells it (fewer than 16 digits:
# under MAX_SEQ, checked by the caller)
_COMPACT = re.compile(
    rb'(?:\{"seq":%b(?:,"ack":%b)?\}\n|\{"ack":%b\}\Z)' % (_NUMBER, _NUMBER, _NUMBER)
)  # the headers clients send: a message's (with its newline) or an acknowledgement alone
SEPARATOR = b"\n"

NO_CONNECTION = "this relay no longer has the connection"

# The profile's close codes (docs/resume.md).
CANNOT_RESUME = 4404  # nothing to resume: unknown, expired, wrong secret or subject
FENCED = 4001  # this socket was replaced by a resumed one
FENCED_REASON = "superseded: the connection was resumed on another socket"
PROFILE_ERROR = 1002  # a peer broke the profile (RFC 6455's protocol error)


class ProfileError(ValueError):
    """A frame that breaks the profile; the message says how (for the close reason)."""


# -- client -> relay --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Open:
    """The first frame of a new connection."""


@dataclass(frozen=True, slots=True)
class Resume:
    """The first frame of a socket that resumes ``connection``."""

    connection: str
    secret: str
    ack: int  # the last relay record the client received
    sent: int  # the last message the client sent (it re-sends those the relay lacks)


@dataclass(slots=True)  # not frozen: one is made per client frame, and a frozen
# dataclass sets each field through object.__setattr__ (a tenth of the profile's cost)
class Message:
    """An ACP message from the client, its sequence number, and maybe an acknowledgement."""

    seq: int
    message: bytes
    ack: int | None = None


@dataclass(slots=True)  # not frozen, as Message
class Ack:
    """A cumulative acknowledgement alone."""

    ack: int


ClientFrame = Open | Resume | Message | Ack


def parse_first_frame(data: bytes) -> Open | Resume:
    """Read a socket's first frame, ``open`` or ``resume``; ProfileError otherwise."""
    head, body = _split(data)
    return _first(_header(head), has_body=body is not None)


def parse_frame(data: bytes) -> Message | Ack:
    """Read a later frame, a message or an acknowledgement; ProfileError otherwise.

    Only the header is parsed (bounded by MAX_HEADER_BYTES); the message after it is
    left as it is, for the relay's usual judgment. The compact headers clients send
    (``{"seq":N}``, ``{"seq":N,"ack":A}``, ``{"ack":A}``) are read by one pattern; any
    other spelling goes through the JSON reader, with the same result.
    """
    compact = _COMPACT.match(data)
    if compact is not None:
        seq, ack, alone = compact.group(1, 2, 3)
        if seq is not None and len(seq) < 16 and (ack is None or len(ack) < 16):
            return Message(int(seq), data[compact.end() :], None if ack is None else int(ack))
        if alone is not None and len(alone) < 16:
            return Ack(int(alone))
    head, body = _split(data)
    fields = _header(head)
    if body is not None:
        return Message(_seq(fields, "seq"), body, _optional_seq(fields, "ack"))
    _only(fields, {"ack"})
    return Ack(_seq(fields, "ack"))


def _split(data: bytes) -> tuple[bytes, bytes | None]:
    """The header, and what follows its ``\n`` (None for a control frame)."""
    cut = data.find(SEPARATOR, 0, MAX_HEADER_BYTES + 1)
    head = data if cut < 0 else data[:cut]
    if len(head) > MAX_HEADER_BYTES:
        raise ProfileError(f"frame header over {MAX_HEADER_BYTES} bytes")
    return head, None if cut < 0 else data[cut + 1 :]


def _first(fields: dict[str, Any], *, has_body: bool) -> Open | Resume:
    kind = fields.get("type")
    if has_body or kind not in ("open", "resume"):
        raise ProfileError('the first frame must be {"type":"open"} or {"type":"resume",...}')
    if kind == "open":
        _only(fields, {"type"})
        return Open()
    _only(fields, {"type", "connection", "secret", "ack", "sent"})
    return Resume(
        _bounded_text(fields, "connection", MAX_CONNECTION_ID_CHARS),
        _bounded_text(fields, "secret", MAX_SECRET_CHARS),
        _seq(fields, "ack"),
        _seq(fields, "sent"),
    )


def _header(head: bytes) -> dict[str, Any]:
    try:
        value = json.loads(head, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise ProfileError(f"frame header is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProfileError("frame header is not a JSON object")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ProfileError("frame header has a key twice")
    return result


def _no_constant(name: str) -> Any:
    raise ProfileError(f"frame header holds {name}")


def _only(fields: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(fields) - allowed)
    if extra:
        raise ProfileError(f"frame header has unknown field {extra[0]!r}")


def _seq(fields: dict[str, Any], key: str) -> int:
    value = fields.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
        raise ProfileError(f"{key!r} must be a whole number from 0 to 2^53-1")
    return value


def _optional_seq(fields: dict[str, Any], key: str) -> int | None:
    _only(fields, {"seq", "ack"})
    return None if key not in fields else _seq(fields, key)


def _bounded_text(fields: dict[str, Any], key: str, limit: int) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise ProfileError(f"{key!r} must be a string of 1 to {limit} characters")
    return value


# -- relay -> client --------------------------------------------------------------------


def record(seq: int, line: bytes, ack: int | None = None) -> bytes:
    """The frame that carries agent line ``line`` (raw bytes, no ``\\n``) as record ``seq``."""
    if ack is None:
        return b'{"seq":%d}\n%b' % (seq, line)
    return b'{"seq":%d,"ack":%d}\n%b' % (seq, ack, line)


def records(first: int, lines: Sequence[bytes], ack: int | None = None) -> list[bytes]:
    """The frames of ``lines`` as records ``first``, ``first + 1``, ...; ``ack`` rides on
    the first one."""
    if not lines:
        return []
    out = [record(first, lines[0], ack)]
    out += [b'{"seq":%d}\n%b' % pair for pair in zip(range(first + 1, first + len(lines)),
                                                         lines[1:], strict=True)]  # fmt: skip
    return out


def ack_frame(ack: int) -> bytes:
    """A standalone cumulative acknowledgement."""
    return b'{"ack":%d}' % ack


@dataclass(frozen=True)
class Welcome:
    """The relay's answer to ``open`` or a successful ``resume``.

    ``received`` is the last client message the relay delivered to the agent (the
    client re-sends the ones after it); ``next`` is the first record this socket
    carries (the client's ``ack`` + 1 on a resume); ``last`` the last record the relay
    holds as it welcomes: ``next`` to ``last`` is the backlog kept for the client.
    """

    connection: str
    secret: str
    resumed: bool
    received: int
    next: int
    grace: float
    window: int
    last: int

    def frame(self) -> bytes:
        """The welcome as a control frame."""
        payload = {
            "type": "welcome",
            "connection": self.connection,
            "secret": self.secret,
            "resumed": self.resumed,
            "received": self.received,
            "next": self.next,
            "grace": self.grace,
            "window": self.window,
            "last": self.last,
        }
        return json.dumps(payload, separators=(",", ":")).encode()


def message_frame(seq: int, message: bytes, ack: int | None = None) -> bytes:
    """The frame a client sends to carry ``message`` as its message ``seq``."""
    return record(seq, message, ack)


# -- the replay window ---------------------------------------------------------------------


class Outbox:
    """The records the client has not acknowledged yet, bounded by their bytes.

    Records are numbered as they are added (from 1). :meth:`has_room` tells the reader
    of the agent's output whether to add more: past ``limit`` bytes it waits (the agent
    pauses on its full pipe) until acknowledgements make room. One record larger than
    ``limit`` is still taken when the outbox is empty, so memory stays within
    ``limit`` plus one message.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.first_seq = 1  # the oldest record kept (``next_seq`` when none is)
        self._lines: list[bytes] = []  # records first_seq, first_seq + 1, ... from _head on
        self._head = 0

    def __len__(self) -> int:
        return len(self._lines) - self._head

    @property
    def next_seq(self) -> int:
        """The number the next record gets."""
        return self.first_seq + len(self)

    @property
    def acked(self) -> int:
        """The last record acknowledged (every record before ``first_seq``)."""
        return self.first_seq - 1

    def has_room(self) -> bool:
        return self.size < self.limit or not len(self)

    def add(self, line: bytes) -> int:
        """Keep ``line`` as the next record; its number."""
        lines = self._lines
        lines.append(line)
        self.size += len(line)
        return self.first_seq + len(lines) - self._head - 1

    def take(self, lines: Sequence[bytes], start: int = 0) -> int:
        """Keep ``lines[start:]`` as the next records while there is room before each (as
        :meth:`has_room` says); how many were kept. One call per read of the agent's output
        instead of two per line: this is the profile's hot path."""
        kept, size, limit = self._lines, self.size, self.limit
        end, index = len(lines), start
        while index < end and (size < limit or len(kept) == self._head):
            line = lines[index]
            kept.append(line)
            size += len(line)
            index += 1
        self.size = size
        return index - start

    def acknowledge(self, ack: int) -> None:
        """Forget every record up to ``ack``; ProfileError for a record never sent."""
        if ack >= self.first_seq + len(self._lines) - self._head:  # next_seq, inlined
            raise ProfileError(f"ack {ack} is for a record the relay never sent")
        drop = ack - (self.first_seq - 1)  # past the last record acknowledged
        if drop <= 0:
            return
        lines, head = self._lines, self._head
        self.size -= sum(map(len, lines[head : head + drop]))
        self._head = head + drop
        self.first_seq += drop
        if self._head > len(lines) // 2:  # compact: the list never holds twice what is kept
            del lines[: self._head]
            self._head = 0

    def since(self, seq: int, limit: int | None = None) -> list[bytes]:
        """The lines of the records from ``seq`` on (at most ``limit``), oldest first."""
        start = self._head + max(seq - self.first_seq, 0)
        return self._lines[start : None if limit is None else start + limit]


# -- the client's side -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """A record from the relay: its number, the agent's line, maybe an acknowledgement."""

    seq: int
    line: bytes
    ack: int | None = None


def parse_welcome(data: bytes) -> Welcome:
    """Read the relay's welcome; ProfileError if ``data`` is not one."""
    fields = _header(data)
    if fields.get("type") != "welcome":
        raise ProfileError("expected the relay's welcome")
    grace = fields.get("grace")
    if isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0:
        raise ProfileError("'grace' must be a number of seconds")
    return Welcome(
        connection=_bounded_text(fields, "connection", MAX_CONNECTION_ID_CHARS),
        secret=_bounded_text(fields, "secret", MAX_SECRET_CHARS),
        resumed=fields.get("resumed") is True,
        received=_seq(fields, "received"),
        next=_seq(fields, "next"),
        grace=float(grace),
        window=_seq(fields, "window"),
        last=_seq(fields, "last") if "last" in fields else _seq(fields, "next") - 1,
    )


def parse_relay_frame(data: bytes) -> Record | Ack:
    """Read a frame of the relay after its welcome: a record or an acknowledgement alone."""
    head, body = _split(data)
    fields = _header(head)
    if body is None:
        _only(fields, {"ack"})
        return Ack(_seq(fields, "ack"))
    _only(fields, {"seq", "ack"})
    return Record(_seq(fields, "seq"), body, None if "ack" not in fields else _seq(fields, "ack"))


class Sent:
    """The client's messages the relay has not acknowledged yet, to re-send after a resume.

    Bounded by count and bytes: :meth:`has_room` tells the reader of the editor's lines
    whether to take more (past the bound it waits, and the editor waits on its pipe).
    One message larger than the byte bound is still taken when nothing else is kept.
    """

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.size = 0
        self.last = 0  # the number of the last message numbered
        self._messages: dict[int, bytes] = {}  # in number order (dicts keep insertion order)

    def __len__(self) -> int:
        return len(self._messages)

    def has_room(self) -> bool:
        if not self._messages:
            return True
        return len(self._messages) < self.max_messages and self.size < self.max_bytes

    def number(self, message: bytes) -> int:
        """Keep ``message`` as the next message; its number."""
        self.last += 1
        self._messages[self.last] = message
        self.size += len(message)
        return self.last

    def acknowledge(self, ack: int) -> None:
        """Forget every message up to ``ack`` (the relay has them)."""
        messages = self._messages
        while messages:
            seq = next(iter(messages))
            if seq > ack:
                return
            self.size -= len(messages.pop(seq))

    def after(self, received: int) -> list[tuple[int, bytes]]:
        """The messages after ``received``, in order: what to re-send after a resume."""
        self.acknowledge(received)
        return list(self._messages.items())


def backoff(attempt: int, rand: float, *, first: float = 0.1, most: float = 2.0) -> float:
    """Seconds to wait before reconnect ``attempt`` (0 first): exponential, full jitter.

    ``rand`` is a random number in [0, 1), passed in so this stays pure.
    """
    return rand * min(most, first * 2.0**attempt)


class Received:
    """The client's record of what the relay sent: the last record, and what to acknowledge."""

    def __init__(self, ack_every: int = 64) -> None:
        self.ack_every = ack_every
        self.last = 0  # the last record received (every one before it too)
        self.acked = 0  # the last record the relay was told of

    def take(self, record_: Record) -> bytes | None:
        """The record's line if it is new, None for one the client already has."""
        if record_.seq <= self.last:
            return None
        if record_.seq != self.last + 1:
            raise ProfileError(f"record {self.last + 1} is missing (got {record_.seq})")
        self.last = record_.seq
        return record_.line

    def due(self) -> bool:
        """Whether an acknowledgement should go now rather than ride on a later message."""
        return self.last - self.acked >= self.ack_every

    def ack(self) -> int | None:
        """The acknowledgement to send, if there is anything new to acknowledge."""
        if self.last == self.acked:
            return None
        self.acked = self.last
        return self.last
