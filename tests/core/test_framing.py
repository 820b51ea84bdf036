"""Tests for relay.core.framing: splitting a byte stream into lines, and frames into lines."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.framing import (
    MAX_CLOSE_REASON_BYTES,
    Dropped,
    FrameRefused,
    Line,
    LineSplitter,
    close_reason,
    end_within,
    frame_to_line,
    is_blank,
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
        ([b"x" * 11 + b"\nok\n"], [Dropped(11, "line of 11 bytes over the limit"), b"ok"]),
        (
            [b"x" * 6, b"x" * 6, b"\nok\n"],
            [Dropped(12, "line of 12 bytes over the limit"), b"ok"],
        ),
        (
            [b"x" * 30, b"x" * 30, b"x\nok\n"],
            [Dropped(61, "line of 61 bytes over the limit"), b"ok"],
        ),
        ([b"x" * 10 + b"\r\n"], [b"x" * 10]),
        ([b"x" * 30], [Dropped(30, "line of 30 bytes over the limit")]),
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
        assert len(splitter.partial) <= 1001
    assert splitter.feed(b"\n") == [Dropped(99_900, "line of 99900 bytes over the limit")]


@given(st.lists(st.binary(max_size=50), max_size=20), st.integers(min_value=1, max_value=40))
def test_any_chunking_yields_same_lines(parts: list[bytes], cut: int) -> None:
    """Re-chunking a stream never changes the lines it yields."""
    stream = b"".join(parts)
    whole = split_all([stream], limit=10_000)
    pieces = [stream[i : i + cut] for i in range(0, len(stream), cut)]
    assert split_all(pieces, limit=10_000) == whole
    expected = [p.removesuffix(b"\r") for p in stream.split(b"\n")]
    assert whole == [p for p in expected if not is_blank(p)]


def reference_lines(stream: bytes, limit: int) -> list[Line]:
    """What LineSplitter must yield, written the obvious way (the whole stream in memory)."""
    out: list[Line] = []
    for piece in stream.split(b"\n"):
        piece = piece.removesuffix(b"\r")
        if len(piece) > limit:
            out.append(Dropped(len(piece), f"line of {len(piece)} bytes over the limit"))
        elif not is_blank(piece):
            out.append(piece)
    return out


# Streams rich in what matters: terminators, a CR before or away from them, blanks, runs.
STREAM_PARTS = st.sampled_from(
    [b"\n", b"\r", b"\r\n", b" ", b"\t", b"x", b"yyyyy", b"\xff", b'{"a":1}', b"z" * 30]
)
STREAMS = st.lists(STREAM_PARTS, max_size=40).map(b"".join) | st.binary(max_size=120)


@pytest.mark.slow
@settings(max_examples=400)
@given(STREAMS, st.integers(min_value=1, max_value=25), st.lists(st.integers(0, 200), max_size=8))
def test_any_chunking_and_any_limit_match_the_reference(
    stream: bytes, limit: int, cuts: list[int]
) -> None:
    """Any cuts, any limit: the reference's lines and dropped sizes, holding <= limit + 1 bytes."""
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    splitter = LineSplitter(limit)
    out: list[Line] = []
    for start, end in itertools.pairwise(bounds):
        out.extend(splitter.feed(stream[start:end]))
        assert len(splitter.partial) <= limit + 1
    last = splitter.finish()
    if last is not None:
        out.append(last)
    assert out == reference_lines(stream, limit)


def reference_utf8_lines(stream: bytes, limit: int) -> list[Line]:
    """:func:`reference_lines` of a splitter that requires UTF-8."""
    out: list[Line] = []
    for line in reference_lines(stream, limit):
        problem = None if isinstance(line, Dropped) else utf8_problem(line)
        out.append(Dropped(len(line), problem) if isinstance(line, bytes) and problem else line)
    return out


# As STREAM_PARTS, with characters of two, three and four bytes, invalid bytes and a control
# byte starting a line, so that chunks end inside a character and some lines are not UTF-8.
UTF8_PARTS = st.sampled_from(
    [b"\n", b"\r", b"\r\n", b" ", b"\t", b"\x01", b"x", b'{"a":1}', "é".encode(),
     "✓".encode(), "🙂".encode(), b"\xff", b"\xc3", b"\xa9", b"z" * 30]
)  # fmt: skip
UTF8_STREAMS = st.lists(UTF8_PARTS, max_size=60).map(b"".join)


@settings(max_examples=300)
@given(UTF8_STREAMS, st.integers(min_value=1, max_value=400), st.lists(st.integers(0, 300)))
def test_any_chunking_of_utf8_lines_matches_the_reference(
    stream: bytes, limit: int, cuts: list[int]
) -> None:
    """With utf8, any cuts (inside a character too) and any limit give the reference's
    verdicts: the lines as they are, the blank ones skipped, the others Dropped and why."""
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    splitter = LineSplitter(limit, utf8=True)
    out: list[Line] = []
    for start, end in itertools.pairwise(bounds):
        out.extend(splitter.feed(stream[start:end]))
    last = splitter.finish()
    if last is not None:
        out.append(last)
    assert out == reference_utf8_lines(stream, limit)
    assert splitter.dropped == sum(isinstance(line, Dropped) for line in out)


@pytest.mark.parametrize(
    ("chunks", "size"),
    [
        ([b"x" * 11 + b"\r\n"], 11),
        ([b"x" * 11 + b"\r", b"\n"], 11),
        ([b"x" * 11, b"\r", b"\n"], 11),
        ([b"x" * 6, b"x" * 6 + b"\r", b"\nok\n"], 12),
        ([b"x" * 12 + b"\r"], 12),
    ],
)
def test_dropped_size_never_counts_the_terminator(chunks: list[bytes], size: int) -> None:
    """A dropped line's size is its bytes without \\r\\n, wherever the chunks were cut."""
    assert split_all(chunks, limit=10)[0] == Dropped(size, f"line of {size} bytes over the limit")


@pytest.mark.parametrize("blank", [b" ", b"\t\t", b" \r", b"  \t  "])
def test_whitespace_only_lines_are_blank_and_skipped(blank: bytes) -> None:
    """A line of JSON whitespace only carries no message, like an empty one."""
    assert split_all([b"a\n" + blank + b"\nb\n" + blank]) == [b"a", b"b"]


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
        (b"   ", None),
        (b"\t\r", None),
        (b"\x0c", b"\x0c"),  # not JSON whitespace: the agent says what it is
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


FRAMES = (
    st.text(max_size=60).map(str.encode)
    | st.lists(
        st.sampled_from(['{"a":', "[1,", "]", "}", "\n", "\r", " ", '"s\\n"', "null", "x"]),
        max_size=15,
    ).map(lambda parts: "".join(parts).encode())
    | st.binary(max_size=60)
)


@pytest.mark.slow
@settings(max_examples=500)
@given(FRAMES)
def test_frame_to_line_never_raises_and_never_splits(frame: bytes) -> None:
    """Any frame becomes nothing (blank), a refusal, or exactly one line with the same meaning."""
    result = frame_to_line(frame)
    if result is None:
        assert is_blank(frame)
    elif isinstance(result, FrameRefused):
        assert b"\n" in frame or b"\r" in frame
        reply = json.loads(result.reply)
        assert (reply["id"], reply["error"]["code"]) == (None, -32700)
    else:
        assert b"\n" not in result
        assert b"\r" not in result
        if b"\n" in frame or b"\r" in frame:
            assert (
                json.loads(result) == json.loads(frame)
                or result
                == json.dumps(json.loads(frame), separators=(",", ":"), ensure_ascii=False).encode()
            )
        else:
            assert result == frame


def test_frame_nested_too_deeply_to_compact_is_refused() -> None:
    """A multi-line frame too deep to parse is refused with -32700, not an exception."""
    refused = frame_to_line(b"[" * 100_000 + b"\n" + b"]" * 100_000)
    assert isinstance(refused, FrameRefused)
    assert json.loads(refused.reply)["error"]["data"]["detail"] == (
        "nested too deeply for the relay to remove its newlines"
    )


@pytest.mark.parametrize(
    ("chunks", "verdicts"),
    [
        (
            [b'{"a":1}\n\xff\xfe\n'],
            [b'{"a":1}', Dropped(2, "invalid UTF-8 at byte 0: invalid start byte")],
        ),
        (["é✓\n".encode()], ["é✓".encode()]),
        ([b"\xc3", b"\xa9\n"], ["é".encode()]),
        ([b"\xc3\n"], [Dropped(1, "invalid UTF-8 at byte 0: unexpected end of data")]),
    ],
)
def test_utf8_splitter_judges_each_line(chunks: list[bytes], verdicts: list[Line]) -> None:
    """With utf8, a line that is not valid UTF-8 comes out Dropped; a split character does not."""
    splitter = LineSplitter(100, utf8=True)
    out: list[Line] = []
    for chunk in chunks:
        out.extend(splitter.feed(chunk))
    assert out == verdicts


@pytest.mark.parametrize(
    ("chunks", "dropped"),
    [
        ([b"a\nb\n"], 0),
        ([b"a\n" + b"x" * 20 + b"\n"], 1),
        ([b"x" * 30, b"x" * 30 + b"\nok\n"], 1),
        ([b"\xff\n\xfe\nok\n"], 2),
        ([b"x" * 30], 1),
    ],
)
def test_dropped_counts_every_dropped_verdict(chunks: list[bytes], dropped: int) -> None:
    """The splitter's ``dropped`` count goes up by one for each Dropped verdict, finish included."""
    splitter = LineSplitter(10, utf8=True)
    out: list[Line] = []
    for chunk in chunks:
        out.extend(splitter.feed(chunk))
    last = splitter.finish()
    out.extend([] if last is None else [last])
    assert splitter.dropped == dropped == sum(isinstance(line, Dropped) for line in out)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("agent exited", "agent exited"),
        ("x" * 123, "x" * 123),
        ("x" * 124, "x" * 120 + "..."),
        ("é" * 62, "é" * 60 + "..."),  # 124 bytes: cut between characters, never inside one
        ("", ""),
    ],
)
def test_a_close_reason_is_cut_to_what_rfc_6455_allows(text: str, expected: str) -> None:
    """A close reason over 123 bytes is cut to whole characters and marked with '...'."""
    assert close_reason(text) == expected


@given(st.text(max_size=200))
def test_a_cut_close_reason_always_fits(text: str) -> None:
    """Whatever the text, its close reason fits in 123 bytes and starts as the text does."""
    reason = close_reason(text)
    assert len(reason.encode()) <= MAX_CLOSE_REASON_BYTES
    assert text.startswith(reason.removesuffix("...")) or reason == text


@pytest.mark.parametrize(
    ("text", "size", "expected"),
    [
        ("No module named 'relay'", 100, "No module named 'relay'"),
        ("x" * 10 + "the reason", 13, "...the reason"),
        ("é" * 10, 8, "...éé"),  # 5 bytes of room: one 'é' would be cut inside, so dropped
        ("", 10, ""),
    ],
)
def test_the_end_of_a_text_within_a_size(text: str, size: int, expected: str) -> None:
    """A text over the size keeps its end, cut between characters and marked '...' at the start."""
    assert end_within(text, size) == expected


@given(st.text(max_size=300), st.integers(min_value=3, max_value=200))
def test_the_end_kept_always_fits_and_ends_as_the_text(text: str, size: int) -> None:
    """Whatever the text, what is kept fits in the size and ends as the text does."""
    kept = end_within(text, size)
    assert len(kept.encode()) <= size
    assert text.endswith(kept.removeprefix("...")) or kept == text
