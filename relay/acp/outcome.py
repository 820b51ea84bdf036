"""What becomes of one client frame: forwarded as a line, refused with a reply, or skipped.

Pure. Every WebSocket frame a client sends is judged once, by :func:`judge_frame`, into
one :data:`Outcome` value; the pump carries it out (write the line, send the reply, or
nothing) and hands the same value to the connection's observer, which logs and traces
it. Nothing else looks at a frame.

- :class:`Forward`: the line for the agent. ``line is frame`` when the frame passes
  byte for byte (nearly always); otherwise the frame was compacted (it held raw
  newlines) or rewritten (a session-opening request, with ``rewrite`` saying how).
- :class:`Refuse`: the frame cannot be given to the agent; ``reply`` is the JSON-RPC
  error the relay sends back instead.
- :class:`Skip`: nothing to forward and nothing to answer (a blank or a binary frame,
  or under the resume profile a message the agent already has or an acknowledgement).
- :class:`Close`: the frame breaks the socket's subprotocol (the resume profile's
  envelope): the socket is closed with ``code`` and ``reason``.

A frame comes to a judge as :data:`Received`: a text frame as its UTF-8 bytes (as
websockets received them: never decoded into a ``str`` and encoded again, which would
hold the message three times over), a binary frame as :class:`Binary`. A ``str`` is
taken too, as text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from relay.core.framing import FrameRefused, error_reply, frame_to_line

if TYPE_CHECKING:  # only serve rewrites: connect loads none of it
    from relay.acp.rewrite import RewriteReport, Rewritten

SkipReason = Literal["blank", "binary", "duplicate", "acknowledgement", "fenced", "answered"]


@dataclass(slots=True)  # not frozen: one is made per client frame, and frozen makes it slower
class Forward:
    """Write ``line`` (without its ``\\n``) to the agent; ``frame`` is what the client sent."""

    line: bytes
    frame: bytes
    rewrite: RewriteReport | None = None

    @property
    def changed(self) -> bool:
        """Whether the agent gets other bytes than the client sent."""
        return self.line is not self.frame and self.line != self.frame


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer the client with ``reply`` and forward nothing; ``reason`` is for the log."""

    reply: bytes
    reason: str
    frame: bytes
    session: bool = False  # refused by the session-opening rewrite, not by the framing


@dataclass(frozen=True, slots=True)
class Skip:
    """Forward nothing, answer nothing."""

    reason: SkipReason
    size: int


@dataclass(frozen=True, slots=True)
class Close:
    """Forward nothing: close the socket with ``code`` and ``reason``."""

    code: int
    reason: str


Outcome = Forward | Refuse | Skip | Close
"""The one value each client frame yields."""


@dataclass(frozen=True, slots=True)
class Binary:
    """A binary frame, as the judges see it: only its size (it is never forwarded)."""

    size: int

    def __len__(self) -> int:
        return self.size


Received = bytes | Binary
"""A frame as received: a text frame's UTF-8 bytes, or a binary frame."""

Rewrite = Callable[[bytes], "bytes | FrameRefused | Rewritten"]
"""The boundary's rewrite of one client line (:meth:`relay.acp.boundary.Boundary.client_line`,
or :meth:`relay.acp.rewrite.SessionRewriter.client_line`)."""


BATCH_REASON = "a JSON array (a JSON-RPC batch) is not an ACP v1 message"
BATCH_REPLY = error_reply(
    -32600,
    "Invalid request: batches are not supported",
    BATCH_REASON,
    "send each message as a JSON object in a frame of its own",
)


def judge_client_frame(frame: Received | str, rewrite: Rewrite | None = None) -> Outcome:
    """The outcome of a frame from a client of ``serve``: :func:`judge_frame`, batches refused.

    A batch is not ACP v1: passed on, it crashes some agents and would carry a
    session-opening request past the rewrite. It gets one -32600 and nothing is forwarded.
    """
    if isinstance(frame, bytes):
        return judge_client_text(frame, rewrite)
    if isinstance(frame, Binary):
        return Skip("binary", frame.size)
    return judge_client_text(frame.encode(), rewrite)


NOT_UTF8_REASON = (
    "the message holds a NUL byte or a byte-order mark: it is not UTF-8 JSON text "
    "(UTF-16 or UTF-32, perhaps)"
)
NOT_UTF8_REPLY = error_reply(
    -32700,
    "Parse error: a message must be JSON text encoded as UTF-8",
    NOT_UTF8_REASON,
    "encode each message as UTF-8, without a byte-order mark; a NUL character inside a "
    "string is written \\u0000",
)
_BOM = "\ufeff".encode()
_SPACE = b" \t\r\n"
# The bytes tested by their code: ``10 in data`` is a memchr, while ``b"\n" in data`` first
# tries b"\n" as an integer, making and dropping a TypeError each time (CPython 3.11).
_NUL, _LF, _CR, _OPEN_BRACE = 0, 10, 13, 0x7B


def judge_client_text(data: bytes, rewrite: Rewrite | None = None) -> Outcome:
    """:func:`judge_client_frame` for a message as UTF-8 bytes (a resume envelope's).

    A message with a NUL byte or a byte-order mark is refused (-32700): JSON text never
    holds a raw NUL, and an agent's parser may read such bytes as UTF-16 or UTF-32 (Python's
    ``json.loads(bytes)`` does), seeing a request the relay never saw.
    """
    if data and data[0] == _OPEN_BRACE and _NUL not in data and _LF not in data and _CR not in data:
        # Nearly every frame: one JSON object on one line, the line as it came (no batch,
        # not blank, nothing to compact, no NUL, no byte-order mark), judged here without
        # the calls below.
        if rewrite is None:
            return Forward(data, data)
        line = rewrite(data)
        return Forward(data, data) if line is data else _rewritten(line, data)
    if _NUL in data or data[:3] == _BOM or (data[:1] in _SPACE and _bom_after_space(data)):
        return Refuse(NOT_UTF8_REPLY, NOT_UTF8_REASON, data)
    if data[:1] in (b"[", b" ", b"\t", b"\r", b"\n") and _is_batch(data):
        return Refuse(BATCH_REPLY, BATCH_REASON, data)
    return judge_text(data, rewrite)


def _bom_after_space(data: bytes) -> bool:
    return data.lstrip(_SPACE).startswith(_BOM)


def _is_batch(data: bytes) -> bool:
    return data.lstrip(b" \t\r\n")[:1] == b"["


def judge_frame(frame: Received | str, rewrite: Rewrite | None = None) -> Outcome:
    """The outcome of one frame as received (:data:`Received`, or text as a ``str``)."""
    if isinstance(frame, Binary):
        return Skip("binary", frame.size)
    return judge_text(frame if isinstance(frame, bytes) else frame.encode(), rewrite)


def judge_text(data: bytes, rewrite: Rewrite | None = None) -> Outcome:
    """The outcome of one text message, as UTF-8 bytes (a frame, or a resume envelope's)."""
    line = frame_to_line(data)
    if line is None:
        return Skip("blank", len(data))
    if isinstance(line, FrameRefused):
        return Refuse(line.reply, line.reason, data)
    if rewrite is None:
        return Forward(line, data)
    return _rewritten(rewrite(line), data)


def _rewritten(result: bytes | FrameRefused | Rewritten, data: bytes) -> Outcome:
    """The outcome of the frame ``data`` given what the rewrite made of its line."""
    if isinstance(result, bytes):
        return Forward(result, data)
    if isinstance(result, FrameRefused):
        return Refuse(result.reply, result.reason, data, session=True)
    return Forward(result.line, data, result.report)
