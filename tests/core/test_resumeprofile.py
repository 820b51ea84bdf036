"""Tests for relay.core.resumeprofile: the resume profile's frames, parsed strictly, and the replay
window."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import CloseCode

from relay.core.resumeprofile import (
    CANNOT_RESUME,
    FENCED,
    FENCED_REASON,
    MAX_GRACE_SECONDS,
    MAX_HEADER_BYTES,
    MAX_WINDOW,
    NO_CONNECTION,
    PROFILE,
    PROFILE_ERROR,
    Ack,
    Message,
    Open,
    ProfileError,
    Record,
    Resume,
    Welcome,
    ack_frame,
    message_frame,
    parse_first_frame,
    parse_frame,
    parse_relay_frame,
    parse_welcome,
    record,
    record_heads,
    records,
)
from relay.core.windows import Outbox, Sent

MSG = b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"t":"\\n caf\xc3\xa9"}}'


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (b'{"type":"open"}', Open()),
        (b' { "type" : "open" } ', Open()),
        (b'{"type":"resume","connection":"c-1","secret":"s3cr3t","ack":41,"sent":7}',
         Resume("c-1", "s3cr3t", 41, 7)),
    ],
)  # fmt: skip
def test_first_frames(frame: bytes, expected: Open | Resume) -> None:
    """A socket opens with open or resume, read from its header alone."""
    assert parse_first_frame(frame) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (b'{"seq":1}\n' + MSG, Message(1, MSG)),
        (b'{"seq":7,"ack":3}\n' + MSG, Message(7, MSG, 3)),
        (b'{"seq":2}\n', Message(2, b"")),
        (b'{"seq":2}\n{"a":1}\n{"b":2}', Message(2, b'{"a":1}\n{"b":2}')),
        (b'{"ack":0}', Ack(0)),
        (b'{"ack":9007199254740991}', Ack(2**53 - 1)),
    ],
)
def test_later_frames(frame: bytes, expected: Message | Ack) -> None:
    """Later frames carry a message (its bytes untouched after the header) or an ack alone."""
    assert parse_frame(frame) == expected


@given(
    seq=st.integers(0, 2**53 + 5),
    ack=st.none() | st.integers(0, 2**53 + 5),
    body=st.binary(max_size=40),
    alone=st.booleans(),
)
def test_compact_headers_read_as_the_json_reader_reads_them(
    seq: int, ack: int | None, body: bytes, alone: bool
) -> None:
    """The pattern for compact headers gives what the JSON reader gives the same header
    spelled with a space (the same message, ack or error)."""
    if alone:
        compact, spaced = b'{"ack":%d}' % seq, b'{ "ack":%d}' % seq
    else:
        compact, spaced = record(seq, body, ack), b"{ " + record(seq, body, ack)[1:]

    def read(frame: bytes) -> object:
        try:
            return parse_frame(frame)
        except ProfileError as exc:
            return str(exc)

    assert read(compact) == read(spaced)


NUMBERISH = st.text("0123456789+-.eE", max_size=18).map(str.encode)


@given(seq=NUMBERISH, ack=st.none() | NUMBERISH, alone=st.booleans())
def test_headers_of_any_numbers_read_as_the_json_reader_reads_them(
    seq: bytes, ack: bytes | None, alone: bool
) -> None:
    """Compact headers whose numbers are anything (leading zeros, signs, fractions, too
    many digits, none) read as the JSON reader reads them spelled with a space."""
    if alone:
        compact = b'{"ack":%b}' % seq
    else:
        compact = b'{"seq":%b%b}\n{}' % (seq, b"" if ack is None else b',"ack":' + ack)
    spaced = b"{ " + compact[1:]

    def read(frame: bytes) -> object:
        try:
            return parse_frame(frame)
        except ProfileError as exc:  # the JSON reader's column differs by the space
            return re.sub(r"column \d+ \(char \d+\)", "column", str(exc))

    assert read(compact) == read(spaced)


@pytest.mark.parametrize(
    ("frame", "first", "why"),
    [
        (b'{"seq":1}\n{}', True, "first frame must be"),
        (b'{"type":"hello"}', True, "first frame must be"),
        (b'{"type":"open","x":1}', True, "unknown field 'x'"),
        (b'{"type":"open"}\n{}', True, "first frame must be"),
        (b'{"type":"resume","connection":"c","secret":"","ack":1,"sent":0}', True,
         "'secret' must be"),
        (b'{"type":"resume","connection":"c","secret":"s","sent":0}', True, "'ack' must be"),
        (b'{"type":"resume","connection":"c","secret":"s","ack":0}', True, "'sent' must be"),
        (b'{"type":"resume","connection":"' + b"c" * 65 + b'","secret":"s","ack":1,"sent":0}',
         True, "'connection' must be"),
        (b'{"type":"resume","connection":"c","secret":"s","ack":1,"ack":2,"sent":0}', True,
         "key twice"),
        (b'{"seq":1,"seq":2}\n{}', False, "key twice"),
        (b'{"seq":-1}\n{}', False, "'seq' must be"),
        (b'{"seq":1.0}\n{}', False, "'seq' must be"),
        (b'{"seq":true}\n{}', False, "'seq' must be"),
        (b'{"seq":"1"}\n{}', False, "'seq' must be"),
        (b'{"seq":9007199254740992}\n{}', False, "'seq' must be"),
        (b'{"seq":1,"ack":NaN}\n{}', False, "holds NaN"),
        (b'{"seq":1,"x":1}\n{}', False, "unknown field 'x'"),
        (b'{"ack":1,"seq":1}', False, "unknown field 'seq'"),
        (b'{"type":"open"}', False, "unknown field 'type'"),
        (b"[1]\n{}", False, "not a JSON object"),
        (b"not json", False, "not JSON"),
        (b"{\"seq\":1" + b" " * MAX_HEADER_BYTES + b"}\n{}", False, "header over"),
        (b"[" * 1000, False, "not a JSON object|not JSON"),
        (b"[" * 100_000, False, "header over"),
    ],
)  # fmt: skip
def test_frames_that_break_the_profile_are_refused(frame: bytes, first: bool, why: str) -> None:
    """Anything but the exact shapes is refused with a reason, never half-read."""
    with pytest.raises(ProfileError, match=why):
        (parse_first_frame if first else parse_frame)(frame)


def test_records_wrap_the_raw_line() -> None:
    """A record is its header, a newline, then the agent's line byte for byte."""
    assert record(5, MSG) == b'{"seq":5}\n' + MSG
    assert record(6, MSG, ack=2) == b'{"seq":6,"ack":2}\n' + MSG
    assert message_frame(3, MSG) == b'{"seq":3}\n' + MSG
    assert parse_frame(message_frame(3, MSG, 1)) == Message(3, MSG, 1)
    assert ack_frame(12) == b'{"ack":12}'


@pytest.mark.parametrize("count", [0, 1, 2, 5])
def test_records_number_lines_in_order_with_the_ack_on_the_first(count: int) -> None:
    """records() is record() for each line in turn, numbered on, the ack on the first only."""
    lines = [b'{"n":%d}' % i for i in range(count)]
    expected = [record(7 + i, line, 3 if i == 0 else None) for i, line in enumerate(lines)]
    assert records(7, lines, 3) == expected
    heads = record_heads(7, count, 3)
    assert [head + line for head, line in zip(heads, lines, strict=True)] == expected
    assert record_heads(7, count) == [b'{"seq":%d}\n' % (7 + i) for i in range(count)]


def test_welcome_is_one_json_control_frame() -> None:
    """The welcome has no newline and names the connection, its secret, the limits and the
    last record the relay holds."""
    welcome = Welcome(
        "c-1", "s", resumed=True, received=4, next=9, grace=60.0, window=1024, last=12
    )
    frame = welcome.frame()
    assert b"\n" not in frame
    assert json.loads(frame) == {
        "type": "welcome",
        "connection": "c-1",
        "secret": "s",
        "resumed": True,
        "received": 4,
        "next": 9,
        "grace": 60.0,
        "window": 1024,
        "last": 12,
    }


def test_outbox_numbers_keeps_and_forgets_records() -> None:
    """Records are numbered from 1; an ack forgets them; since() gives what is left."""
    box = Outbox(limit=100)
    assert [box.add(line) for line in (b"a", b"bb", b"ccc")] == [1, 2, 3]
    assert (box.size, box.first_seq, box.next_seq, box.acked) == (6, 1, 4, 0)
    assert box.since(2) == [b"bb", b"ccc"]
    assert box.since(1, limit=2) == [b"a", b"bb"]
    box.acknowledge(2)
    assert (box.size, box.first_seq, len(box), box.since(1)) == (3, 3, 1, [b"ccc"])
    box.acknowledge(1)  # an older ack changes nothing
    assert box.first_seq == 3
    box.acknowledge(3)
    assert (box.size, len(box), box.since(4)) == (0, 0, [])
    assert box.add(b"d") == 4


def test_outbox_refuses_an_ack_for_what_was_never_sent() -> None:
    """Acknowledging a record past the last one is a client bug, said so."""
    box = Outbox(limit=100)
    box.add(b"a")
    with pytest.raises(ProfileError, match="never sent"):
        box.acknowledge(2)


def test_outbox_room_is_bounded_but_one_big_record_fits() -> None:
    """Past the limit there is no room until acks free some; one oversized record still fits."""
    box = Outbox(limit=10)
    assert box.has_room()
    box.add(b"x" * 50)
    assert not box.has_room()
    box.acknowledge(1)
    assert box.has_room()
    for _ in range(3):
        box.add(b"xxxx")
    assert not box.has_room()
    box.acknowledge(2)
    assert box.has_room()


@pytest.mark.parametrize(
    ("limit", "kept_before", "lines", "start", "taken", "size_after"),
    [
        (100, [], [b"a", b"bb", b"ccc"], 0, 3, 6),  # room for all
        (100, [], [b"a", b"bb", b"ccc"], 1, 2, 5),  # from start on
        (4, [], [b"aa", b"bb", b"cc"], 0, 2, 4),  # full after the second
        (4, [], [b"aaa", b"bb", b"cc"], 0, 2, 5),  # the one that fills it goes in: limit + one
        (10, [], [b"x" * 50, b"y"], 0, 1, 50),  # one big record fits an empty window
        (10, [b"x" * 10], [b"y"], 0, 0, 10),  # full: nothing taken
        (10, [], [], 0, 0, 0),  # nothing to take
    ],
)
def test_outbox_takes_lines_while_there_is_room(
    limit: int,
    kept_before: list[bytes],
    lines: list[bytes],
    start: int,
    taken: int,
    size_after: int,
) -> None:
    """take() keeps lines as add() one by one with has_room() before each would."""
    box, one_by_one = Outbox(limit), Outbox(limit)
    for line in kept_before:
        box.add(line)
        one_by_one.add(line)
    assert box.take(lines, start) == taken
    for line in lines[start:]:
        if not one_by_one.has_room():
            break
        one_by_one.add(line)
    assert (box.size, box.next_seq, box.since(1)) == (
        one_by_one.size,
        one_by_one.next_seq,
        one_by_one.since(1),
    )
    assert box.size == size_after


@given(
    st.integers(1, 60),
    st.lists(st.binary(max_size=20), max_size=5),
    st.lists(st.binary(max_size=20), max_size=12),
    st.integers(0, 12),
)
def test_outbox_takes_any_lines_as_adding_them_one_by_one_would(
    limit: int, kept_before: list[bytes], lines: list[bytes], start: int
) -> None:
    """Whatever the window holds and the lines come, take() keeps what add() one by one,
    with has_room() before each, would."""
    start = min(start, len(lines))
    box, one_by_one = Outbox(limit), Outbox(limit)
    for line in kept_before:
        box.add(line)
        one_by_one.add(line)
    taken = box.take(lines, start)
    for line in lines[start:]:
        if not one_by_one.has_room():
            break
        one_by_one.add(line)
    assert (taken, box.size, box.since(1)) == (
        len(one_by_one) - len(kept_before),
        one_by_one.size,
        one_by_one.since(1),
    )


def test_outbox_memory_stays_bounded_over_many_acks() -> None:
    """Its list is compacted, so a long stream with steady acks holds only what is unacked."""
    box = Outbox(limit=1 << 20)
    for i in range(10_000):
        box.add(b"%d" % i)
        if i % 10 == 9:
            box.acknowledge(box.next_seq - 3)
    assert len(box) == 2
    assert len(box._lines) <= 2 * len(box) + 20
    assert box.since(box.first_seq) == [b"9998", b"9999"]


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (b'{"seq":4}\n' + MSG, Record(4, MSG)),
        (b'{"seq":5,"ack":2}\n' + MSG, Record(5, MSG, 2)),
        (b'{"ack":9}', Ack(9)),
    ],
)
def test_relay_frames(frame: bytes, expected: Record | Ack) -> None:
    """The client reads records (the line untouched) and acknowledgements."""
    assert parse_relay_frame(frame) == expected


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (b'{"seq":4,"type":"x"}\n{}', "unknown field"),
        (b'{"type":"welcome"}', "unknown field"),
        (b'{"seq":"4"}\n{}', "'seq' must be"),
    ],
)
def test_bad_relay_frames_are_refused(frame: bytes, why: str) -> None:
    """A client refuses relay frames that break the profile, with the reason."""
    with pytest.raises(ProfileError, match=why):
        parse_relay_frame(frame)


def test_welcome_reads_back() -> None:
    """The welcome the relay writes is the welcome the client reads."""
    welcome = Welcome("c-1", "s" * 43, False, received=0, next=1, grace=60, window=10, last=3)
    assert parse_welcome(welcome.frame()) == welcome
    with pytest.raises(ProfileError, match="welcome"):
        parse_welcome(b'{"type":"open"}')


def test_welcome_without_last_means_no_backlog() -> None:
    """A welcome without ``last`` (an older relay) reads as holding nothing past ``next``."""
    frame = b'{"type":"welcome","connection":"c","secret":"s","received":0,"next":5,'
    frame += b'"grace":1,"window":9}'
    assert parse_welcome(frame).last == 4


WELCOME = b'{"type":"welcome","connection":"c","secret":"s","received":0,"next":1,'
GRACE_WHY = f"'grace' must be a number of seconds from 0 to {MAX_GRACE_SECONDS}"
WINDOW_WHY = "'window' must be a number of bytes from 0 to 2^40"


@pytest.mark.parametrize(
    ("limits", "why"),
    [
        (b'"grace":1e999,"window":9', GRACE_WHY),
        (b'"grace":-1e999,"window":9', GRACE_WHY),
        (b'"grace":-0.5,"window":9', GRACE_WHY),
        (b'"grace":604800.5,"window":9', GRACE_WHY),
        (b'"grace":"60","window":9', GRACE_WHY),
        (b'"grace":true,"window":9', GRACE_WHY),
        (b'"grace":NaN,"window":9', "holds NaN"),
        (b'"grace":Infinity,"window":9', "holds Infinity"),
        (b'"window":9', GRACE_WHY),
        (b'"grace":60,"window":1099511627777', WINDOW_WHY),
        (b'"grace":60,"window":9007199254740991', WINDOW_WHY),
        (b'"grace":60,"window":-1', WINDOW_WHY),
        (b'"grace":60,"window":1.5', WINDOW_WHY),
        (b'"grace":60', WINDOW_WHY),
    ],
)
def test_a_welcome_with_absurd_limits_is_refused(limits: bytes, why: str) -> None:
    """An infinite, negative, NaN or oversized grace, an oversized window: the welcome breaks
    the profile (connect would otherwise resume forever or trust a window no box has)."""
    with pytest.raises(ProfileError, match=re.escape(why)):
        parse_welcome(WELCOME + limits + b"}")


@given(
    grace=st.one_of(st.integers(0, MAX_GRACE_SECONDS), st.floats(0, MAX_GRACE_SECONDS)),
    window=st.integers(0, MAX_WINDOW),
)
def test_a_welcome_within_the_limits_is_read_as_sent(grace: float, window: int) -> None:
    """Every finite grace from 0 to a week and window from 0 to 1 TiB is taken as sent."""
    frame = WELCOME + b'"grace":%b,"window":%d}' % (json.dumps(grace).encode(), window)
    welcome = parse_welcome(frame)
    assert (welcome.grace, welcome.window) == (grace, window)


def test_sent_keeps_what_the_relay_lacks() -> None:
    """Numbered messages are kept until acknowledged; after() gives what to re-send."""
    sent = Sent(max_messages=3, max_bytes=100)
    assert [sent.number(m) for m in (b"a", b"bb", b"ccc")] == [1, 2, 3]
    assert not sent.has_room()
    sent.acknowledge(1)
    assert (len(sent), sent.size, sent.has_room()) == (2, 5, True)
    assert sent.after(2) == [(3, b"ccc")]
    sent.acknowledge(3)
    assert (len(sent), sent.size) == (0, 0)
    assert sent.number(b"d" * 500) == 4  # one oversized message still fits alone
    assert not sent.has_room()


def test_the_profiles_close_codes_are_the_ones_documented_for_client_authors() -> None:
    """Broken profile 1002, nothing to resume 4404, fenced 4001: as docs/resume.md says."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "resume.md").read_text()
    assert f"close **{PROFILE_ERROR}** `breaks {PROFILE}: ...`" in text
    assert f"close **{CANNOT_RESUME}** `{NO_CONNECTION}`" in text
    assert f"closed with **{FENCED}** `{FENCED_REASON}`" in text


def test_the_profile_error_is_rfc_6455s_protocol_error() -> None:
    """The pure module's 1002 is the standard code websockets names PROTOCOL_ERROR."""
    assert PROFILE_ERROR == CloseCode.PROTOCOL_ERROR
