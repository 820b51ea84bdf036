"""Line framing between ACP's newline-delimited stdio and WebSocket text frames.

Pure: bytes in, bytes (or a verdict) out. ACP stdio carries one JSON-RPC message per
``\\n``-terminated line; a WebSocket carries one message per text frame. This module
splits a byte stream into lines without a per-line size limit of its own (unlike
``StreamReader.readline``), drops lines over the configured limit without buffering
them, and turns a client frame into exactly one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from relay.core import strictjson

NEWLINE = b"\n"
MAX_CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's payload is 125 bytes, the code 2
MAX_COMPACT_BYTES = strictjson.MAX_BYTES  # a larger frame with raw newlines is refused
_JSON_SPACE = b" \t\r\n"  # the only whitespace JSON has
_SPACE_BYTES = frozenset(_JSON_SPACE)
# Single bytes are looked for by their code: ``10 in data`` is a memchr, while ``b"\n" in
# data`` first tries b"\n" as an integer, making and dropping a TypeError (CPython 3.11).
_LF, _CR, _SPACE = 10, 13, 32


def is_blank(data: bytes) -> bool:
    """True for bytes that carry no message: empty, or JSON whitespace only."""
    return not data or (data[0] in _SPACE_BYTES and not data.strip(_JSON_SPACE))


@dataclass(frozen=True, slots=True)
class Dropped:
    """The verdict on a line that is not forwarded: its full size in bytes and why."""

    size: int
    reason: str


Line = bytes | Dropped
"""A line's verdict: its bytes (to be sent as they are) or :class:`Dropped`."""


class LineSplitter:
    """Splits a byte stream into lines and judges each: a :data:`Line` verdict per line.

    Lines are returned without their terminator (``\\n``, or ``\\r\\n``). Empty lines
    carry no message and are skipped. A line over ``max_line_bytes`` is counted, not
    kept, and comes out :class:`Dropped`; with ``utf8`` so does a line that is not valid
    UTF-8 (it cannot be a WebSocket text frame). Memory held between calls is at most
    ``max_line_bytes`` plus one chunk: ``partial``, the line begun (empty between lines).
    """

    def __init__(self, max_line_bytes: int, *, utf8: bool = False) -> None:
        self.max_line_bytes = max_line_bytes
        self.utf8 = utf8
        self.partial = bytearray()
        self._discarding = 0  # bytes of an oversized line seen so far, 0 when not discarding
        self.dropped = 0  # lines judged Dropped so far

    def feed(self, chunk: bytes) -> list[Line]:
        """Consume a chunk; return the lines it completed, in order."""
        pieces = chunk.split(NEWLINE)
        tail = pieces.pop()
        if self.partial or self._discarding:
            if not pieces:
                self._extend_partial(tail)
                return []
            first = self._finish_partial(pieces[0])
            lines = self._complete_lines(pieces[1:], chunk)
            if first != b"":
                lines.insert(0, first)
        else:
            lines = self._complete_lines(pieces, chunk)
        self._extend_partial(tail)
        return lines

    def finish(self) -> Line | None:
        """End of stream: return the unterminated last line, if any."""
        if not self.partial and not self._discarding:
            return None
        line = self._finish_partial(b"")
        return None if line == b"" else line

    def _complete_lines(self, pieces: list[bytes], chunk: bytes) -> list[Line]:
        """The verdicts on ``pieces``, whole lines cut from ``chunk`` (or from a line begun
        before it): nearly always the pieces themselves, decided by a few tests of the
        whole chunk rather than of each line."""
        if not pieces or self._plain(pieces, chunk):
            return pieces  # type: ignore[return-value]  # each a whole line (no cast call)
        return self._judge_each(pieces)

    def _judge_each(self, pieces: list[bytes]) -> list[Line]:
        """The verdicts on ``pieces``, one line at a time."""
        limit = self.max_line_bytes
        out: list[Line] = []
        for piece in pieces:
            if piece.endswith(b"\r"):
                piece = piece[:-1]
            if len(piece) > limit:
                self.dropped += 1
                out.append(_dropped(len(piece)))
            elif not piece or (piece[0] in _SPACE_BYTES and is_blank(piece)):
                continue
            elif self.utf8 and not piece.isascii() and (problem := utf8_problem(piece)):
                self.dropped += 1
                out.append(Dropped(len(piece), problem))
            else:
                out.append(piece)
        return out

    def _plain(self, pieces: list[bytes], chunk: bytes) -> bool:
        """Whether every piece is a line to send as it is: no ``\\r`` in the chunk, none
        over the limit, none blank (the least piece starts past the space: none is empty
        nor starts with JSON whitespace), and, when UTF-8 is required, the chunk UTF-8 up to
        its last newline."""
        if _CR in chunk or (
            len(chunk) > self.max_line_bytes and max(map(len, pieces)) > self.max_line_bytes
        ):
            return False
        least = min(pieces)
        if not least or least[0] <= _SPACE:
            return False
        if not self.utf8 or chunk.isascii():
            return True
        try:  # the chunk up to its last newline (the rest is a line begun), not copied
            str(memoryview(chunk)[: chunk.rfind(NEWLINE)], "utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def _finish_partial(self, head: bytes) -> Line:
        if self._discarding:
            ends_cr = head.endswith(b"\r") if head else self._discarded_cr
            size = self._discarding + len(head) - ends_cr
            self._discarding = 0
            self.dropped += 1
            return _dropped(size)
        if self.partial:
            self.partial += head
            line = bytes(self.partial)
            self.partial.clear()
        else:
            line = head
        result = self._judge_each([line])
        return result[0] if result else b""

    def _extend_partial(self, tail: bytes) -> None:
        if self._discarding:
            self._discarding += len(tail)
            if tail:
                self._discarded_cr = tail.endswith(b"\r")
        elif len(self.partial) + len(tail) > self.max_line_bytes + 1:  # +1: a trailing \r
            self._discarding = len(self.partial) + len(tail)
            self._discarded_cr = (tail or self.partial).endswith(b"\r")
            self.partial.clear()
        else:
            self.partial += tail


def _dropped(size: int) -> Dropped:
    return Dropped(size, f"line of {size} bytes over the limit")


def utf8_problem(line: bytes) -> str | None:
    """Return why ``line`` is not valid UTF-8, or None when it is."""
    if line.isascii():
        return None
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}: {exc.reason}"
    return None


@dataclass(frozen=True)
class FrameRefused:
    """A client frame that cannot become one line; ``reply`` is the JSON-RPC error to send back."""

    reply: bytes
    reason: str


def frame_to_line(frame: bytes) -> bytes | FrameRefused | None:
    """Turn one client text frame into one stdio line (without the ``\\n``).

    A frame is normally passed through as it is. A frame holding a newline would
    become two lines: if it is JSON the relay can read (:mod:`relay.core.strictjson`: whole,
    unambiguous, at most ``MAX_COMPACT_BYTES``) it is re-serialized compactly (JSON
    whitespace carries no meaning; numbers keep their spelling), otherwise it is refused
    with a -32700 error. A blank frame (empty or JSON whitespace only) carries no
    message: None.
    """
    if is_blank(frame):
        return None
    if _LF not in frame and _CR not in frame:  # by their codes: see _LF
        return frame
    try:
        return strictjson.dumps(strictjson.loads(frame, max_bytes=MAX_COMPACT_BYTES))
    except strictjson.TooDeep:
        detail = "nested too deeply for the relay to remove its newlines"
        return FrameRefused(parse_error(detail), f"frame with a newline is {detail}")
    except strictjson.TooLarge:
        detail = f"a frame holding raw newlines is over {MAX_COMPACT_BYTES} bytes"
        return FrameRefused(parse_error(detail), detail)
    except strictjson.JsonRefused as exc:
        return FrameRefused(parse_error(str(exc)), f"frame with a newline is not JSON: {exc}")


def close_reason(text: str) -> str:
    """``text`` as a WebSocket close reason: cut to the 123 bytes RFC 6455 allows (whole
    characters, ``...`` marking the cut)."""
    data = text.encode()
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return text
    return data[: MAX_CLOSE_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


def end_within(text: str, size: int) -> str:
    """The end of ``text`` within ``size`` bytes of UTF-8 (whole characters), ``...`` marking
    a cut at its start: where a message's reason comes last, as in a program's error line."""
    data = text.encode()
    if len(data) <= size:
        return text
    return "..." + data[len(data) - max(size - 3, 0) :].decode("utf-8", "ignore")


def parse_error(detail: str) -> bytes:
    """A JSON-RPC -32700 error (id null) for a frame that could not be forwarded."""
    return error_reply(
        -32700,
        "Parse error: a message must be one JSON value per WebSocket text frame",
        detail,
        "send compact JSON (no raw newlines outside strings), one message per frame",
    )


def error_reply(code: int, message: str, detail: str, hint: str) -> bytes:
    """A JSON-RPC error response with id null, saying why in ``data.detail``."""
    error = {"code": code, "message": message, "data": {"detail": detail, "hint": hint}}
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
