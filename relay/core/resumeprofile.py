"""The resume profile (``acp-relay.resume.v1``): envelopes, control frames, the replay window.

Pure: bytes and values in, bytes and values out. The profile is written down for
client authors in ``docs/resume.md``; this module is its wire format and windows, for
both sides. The state of one connection across its sockets is
:mod:`relay.core.resumesession`'s; the I/O is :mod:`relay.server.connections.carriers` (serve) and
:mod:`relay.client.link.resuming` (connect).

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
# A welcome advertising more than these is absurd: connect refuses it as breaking the profile
# (a week of grace keeps an agent through any weekend; a TiB window is past any box's memory).
MAX_GRACE_SECONDS = 7 * 24 * 3600
MAX_WINDOW = 2**40
_NUMBER = rb"(0|[1-9][0-9]{0,14})"  # a whole number as JSON spells it, up to 15 digits
# (under MAX_SEQ); a longer one goes to the JSON reader, which checks it against MAX_SEQ
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
        seq, ack, alone = compact.groups()
        if seq is not None:
            return Message(int(seq), data[compact.end() :], None if ack is None else int(ack))
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
    return list(map(bytes.__add__, record_heads(first, len(lines), ack), lines))


def record_heads(first: int, count: int, ack: int | None = None) -> list[bytes]:
    """The headers (newline included) of records ``first`` to ``first + count - 1``, ``ack``
    riding on the first: each record is its header, then its line (made in one map)."""
    if not count:
        return []
    heads = [b'{"seq":%d}\n' % first if ack is None else b'{"seq":%d,"ack":%d}\n' % (first, ack)]
    heads += map(b'{"seq":%d}\n'.__mod__, range(first + 1, first + count))
    return heads


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
    return Welcome(
        connection=_bounded_text(fields, "connection", MAX_CONNECTION_ID_CHARS),
        secret=_bounded_text(fields, "secret", MAX_SECRET_CHARS),
        resumed=fields.get("resumed") is True,
        received=_seq(fields, "received"),
        next=_seq(fields, "next"),
        grace=_grace(fields.get("grace")),
        window=_window(fields.get("window")),
        last=_seq(fields, "last") if "last" in fields else _seq(fields, "next") - 1,
    )


def _grace(value: Any) -> float:
    """The welcome's grace: finite, from 0 to MAX_GRACE_SECONDS (1e999 reads as infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        value = -1
    if not 0 <= value <= MAX_GRACE_SECONDS:  # false for NaN too
        raise ProfileError(f"'grace' must be a number of seconds from 0 to {MAX_GRACE_SECONDS}")
    return float(value)


def _window(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_WINDOW:
        raise ProfileError("'window' must be a number of bytes from 0 to 2^40")
    return value


def parse_relay_frame(data: bytes) -> Record | Ack:
    """Read a frame of the relay after its welcome: a record or an acknowledgement alone."""
    head, body = _split(data)
    fields = _header(head)
    if body is None:
        _only(fields, {"ack"})
        return Ack(_seq(fields, "ack"))
    _only(fields, {"seq", "ack"})
    return Record(_seq(fields, "seq"), body, None if "ack" not in fields else _seq(fields, "ack"))
