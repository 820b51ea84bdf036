"""relay.core.watchprofile: watchers' frames and the bounded history; from tables."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.watchprofile import (
    FROM_AGENT,
    FROM_CLIENT,
    FROM_WATCHER,
    Garbled,
    Opening,
    Origin,
    Said,
    Told,
    closed_record,
    conversation_frame,
    conversation_frames,
    conversation_heads,
    raw_record,
    read_frame,
    relay_frame,
    watching_frame,
)


def test_frames_carry_the_line_untouched_after_their_header() -> None:
    """A conversation frame is a header, a newline and the exact line; the relay's own too."""
    line = b'{"jsonrpc":"2.0","method":"x","params":{"t":"a\\nb \xc3\xa9"}}'
    assert conversation_frame(7, FROM_AGENT, line) == b'{"seq":7,"from":"agent"}\n' + line
    assert conversation_frame(1, FROM_CLIENT, b"{}") == b'{"seq":1,"from":"client"}\n{}'
    assert relay_frame(b"{}") == b'{"from":"relay"}\n{}'
    assert conversation_frames(3, FROM_AGENT, [b"a", b"b"]) == [
        b'{"seq":3,"from":"agent"}\na',
        b'{"seq":4,"from":"agent"}\nb',
    ]
    assert conversation_heads(3, FROM_WATCHER, 2) == [
        b'{"seq":3,"from":"watcher"}\n',
        b'{"seq":4,"from":"watcher"}\n',
    ]


def test_the_watching_frame_says_what_follows() -> None:
    """The first frame names the connection, the right to answer and the history's extent."""
    frame = watching_frame("c1", may_answer=True, first=5, messages=3, dropped=4)
    assert b"\n" not in frame
    assert json.loads(frame) == {
        "type": "watching",
        "connection": "c1",
        "mayAnswer": True,
        "history": {"first": 5, "messages": 3, "dropped": 4},
    }


LINE = '{"jsonrpc":"2.0","method":"x","params":{"t":"a\\nb é \u202e"}}'.encode()


@pytest.mark.parametrize(
    ("frame", "read"),
    [
        (watching_frame("c1", may_answer=True, first=5, messages=3, dropped=4),
         Opening("c1", True, 5, 3, 4)),
        (conversation_frame(41, FROM_CLIENT, LINE), Said(41, "client", LINE)),
        (conversation_frame(2, Origin.WATCHER, b"{}"), Said(2, "watcher", b"{}")),
        (conversation_frame(3, FROM_AGENT, b"not json\n"), Said(3, "agent", b"not json\n")),
        (relay_frame(b'{"jsonrpc":"2.0"}'), Told(b'{"jsonrpc":"2.0"}')),
    ],
)  # fmt: skip
def test_a_watcher_reads_back_each_frame_the_relay_writes(frame: bytes, read: object) -> None:
    """Every frame the relay writes reads back as what it carries, the line byte for byte."""
    assert read_frame(frame) == read


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (b"", "its header is not readable JSON"),
        (b"hello\n{}", "its header is not readable JSON"),
        (b"[1]\n{}", "its header is not a JSON object"),
        (b'{"type":"welcome"}', "a control frame of no known type"),
        (b'{"type":"watching","connection":"c","mayAnswer":1,"history":{}}',
         "a control frame of no known type"),
        (b'{"type":"watching","connection":"c","mayAnswer":true,'
         b'"history":{"first":-1,"messages":0,"dropped":0}}', "a control frame of no known type"),
        (b'{"from":"agent"}\n{}', "its header has no seq and from"),
        (b'{"seq":"1","from":"agent"}\n{}', "its header has no seq and from"),
        (b'{"seq":1.5,"from":"agent"}\n{}', "its header has no seq and from"),
        (b"[" * 5000 + b"\n{}", "its header is not readable JSON"),
    ],
)  # fmt: skip
def test_frames_that_are_none_of_the_profiles_are_garbled(frame: bytes, why: str) -> None:
    """A frame whose header is not one of the profile's is read as garbled, saying why."""
    read = read_frame(frame)
    assert isinstance(read, Garbled)
    assert read.why.startswith(why)


@given(st.binary(max_size=200))
def test_any_frame_reads_as_something(frame: bytes) -> None:
    """Reading a frame never raises, whatever its bytes."""
    assert isinstance(read_frame(frame), Opening | Said | Told | Garbled)


def test_raw_records_carry_each_line_exactly_as_a_json_string() -> None:
    """--raw's records: a conversation line as a JSON string that decodes to the line's
    exact bytes, the relay's message as JSON, the first frame as it came; ASCII only."""
    opening = watching_frame("c1", may_answer=False, first=1, messages=0, dropped=0)
    records = [
        raw_record(read_frame(frame))
        for frame in (
            opening,
            conversation_frame(7, FROM_AGENT, LINE),
            relay_frame(b'{"jsonrpc":"2.0","method":"_acp-relay/resumed","params":{}}'),
            b"\x1b]0;x\x07",
        )
    ]
    assert all(record.isascii() and b"\n" not in record for record in records)
    assert records[0] == opening
    said = json.loads(records[1])
    assert said == {"seq": 7, "from": "agent", "line": LINE.decode()}
    assert said["line"].encode() == LINE
    assert json.loads(records[2]) == {
        "from": "relay",
        "message": {"jsonrpc": "2.0", "method": "_acp-relay/resumed", "params": {}},
    }
    assert json.loads(records[3])["type"] == "garbled"
    assert json.loads(closed_record(1000, "the connection ended")) == {
        "type": "closed",
        "code": 1000,
        "reason": "the connection ended",
    }


def test_each_origin_keeps_its_public_names() -> None:
    """A frame's from (client, agent, watcher, relay) and an answer's by (controller,
    watcher) are public: the origins map to them and they do not change."""
    assert [(origin.value, origin.answerer) for origin in Origin] == [
        ("client", "controller"),
        ("agent", "agent"),
        ("watcher", "watcher"),
        ("relay", "relay"),
    ]
    assert relay_frame(b"{}") == b'{"from":"relay"}\n{}'
