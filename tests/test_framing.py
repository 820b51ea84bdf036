"""Tests for relay.framing: splitting a byte stream into lines, and frames into lines."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.framing import (
    DroppedLine,
    FrameRefused,
    Line,
    LineSplitter,
    frame_to_line,
    parse_error,
    utf8_problem,
)


def split_all(chunks: list[bytes], limit: int = 100) -> list[Line]:
    splitter = LineSplitter(limit)
    out: list[Line] = []
    for chunk in chunks:
        out.extend(splitter.feed(chunk))
    last = splitter.finish()
    if last is not None:
        out.append(last)
    return out


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"a\n"], [b"a"]),
        ([b"a\nb\n"], [b"a", b"b"]),
        ([b"a", b"b\n"], [b"ab"]),
        ([b"a\nb", b"c\nd\n"], [b"a", b"bc", b"d"]),
        ([b"a\r\n", b"b\r", b"\n"], [b"a", b"b"]),
        ([b"\n\n", b"a\n", b"\n"], [b"a"]),
        ([b"x" * 10, b"y" * 10, b"\n"], [b"x" * 10 + b"y" * 10]),
        ([b"tail without newline"], [b"tail without newline"]),
        ([b"a\n", b""], [b"a"]),
    ],
)
def test_lines_split_across_chunks(chunks: list[bytes], expected: list[bytes]) -> None:
    """Lines come out whole and in order, whatever the chunk boundaries."""
    assert split_all(chunks) == expected


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"x" * 11 + b"\nok\n"], [DroppedLine(11, "line of 11 bytes over the limit"), b"ok"]),
        (
            [b"x" * 6, b"x" * 6, b"\nok\n"],
            [DroppedLine(12, "line of 12 bytes over the limit"), b"ok"],
        ),
        (
            [b"x" * 30, b"x" * 30, b"x\nok\n"],
            [DroppedLine(61, "line of 61 bytes over the limit"), b"ok"],
        ),
        ([b"x" * 10 + b"\r\n"], [b"x" * 10]),
        ([b"x" * 30], [DroppedLine(30, "line of 30 bytes over the limit")]),
    ],
)
def test_oversized_lines_are_dropped_and_stream_goes_on(
    chunks: list[bytes], expected: list[Line]
) -> None:
    """A line over the limit is reported by size and the next line still arrives."""
    assert split_all(chunks, limit=10) == expected


def test_oversized_line_is_not_buffered() -> None:
    """Memory held for an oversized line stays under the limit however long it grows."""
    splitter = LineSplitter(1000)
    for _ in range(100):
        assert splitter.feed(b"x" * 999) == []
        assert len(splitter._partial) <= 1001
    assert splitter.feed(b"\n") == [DroppedLine(99_900, "line of 99900 bytes over the limit")]


@given(st.lists(st.binary(max_size=50), max_size=20), st.integers(min_value=1, max_value=40))
def test_any_chunking_yields_same_lines(parts: list[bytes], cut: int) -> None:
    """Re-chunking a stream never changes the lines it yields."""
    stream = b"".join(parts)
    whole = split_all([stream], limit=10_000)
    pieces = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    assert split_all(pieces, limit=10_000) == whole
    expected = [p.removesuffix(b"\r") for p in stream.split(b"\n")]
    assert whole == [p for p in expected if p]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b'{"a":1}', None),
        ('{"text":"héllo ✓"}'.encode(), None),
        (b"\xff\xfe", "invalid UTF-8 at byte 0: invalid start byte"),
        (b'{"a":"\xc3"}', "invalid UTF-8 at byte 6: invalid continuation byte"),
    ],
)
def test_utf8_problem(line: bytes, problem: str | None) -> None:
    """Invalid UTF-8 is reported with its position; valid text is not."""
    assert utf8_problem(line) == problem


@pytest.mark.parametrize(
    ("frame", "line"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"x"}', b'{"jsonrpc":"2.0","id":1,"method":"x"}'),
        (b'{ "a" : 1 }', b'{ "a" : 1 }'),
        (b'{\n  "a": 1,\n  "b": "\\n"\n}', b'{"a":1,"b":"\\n"}'),
        (b'{"t":"caf\xc3\xa9"}\r\n', '{"t":"café"}'.encode()),
        (b"", None),
        (b" \n ", None),
    ],
)
def test_frame_to_line(frame: bytes, line: bytes | None) -> None:
    """Frames pass unchanged; a JSON frame with newlines is made compact; blank frames vanish."""
    assert frame_to_line(frame) == line


def test_frame_with_newline_that_is_not_json_is_refused() -> None:
    """A non-JSON frame holding a newline gets a -32700 reply with id null."""
    refused = frame_to_line(b'{"a":1}\n{"b":2}')
    assert isinstance(refused, FrameRefused)
    reply = json.loads(refused.reply)
    assert reply["id"] is None
    assert reply["error"]["code"] == -32700
    assert "one JSON value per WebSocket text frame" in reply["error"]["message"]
    assert "Extra data" in reply["error"]["data"]["detail"]


def test_parse_error_is_jsonrpc() -> None:
    """The parse error is a well-formed JSON-RPC 2.0 error response."""
    reply = json.loads(parse_error("boom"))
    assert reply["jsonrpc"] == "2.0"
    assert set(reply) == {"jsonrpc", "id", "error"}
    assert reply["error"]["data"]["detail"] == "boom"
