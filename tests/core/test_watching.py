"""relay.core.watching: watchers' frames, the bounded history, first answer wins; from tables."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.outcome import Binary
from relay.core.watching import (
    ANSWERED,
    FROM_AGENT,
    FROM_CLIENT,
    WATCHER_FRAME_BYTES,
    Answers,
    Garbled,
    History,
    Late,
    Opening,
    Refused,
    Said,
    Taken,
    Told,
    closed_record,
    conversation_frame,
    conversation_frames,
    raw_record,
    read_frame,
    relay_frame,
    watching_frame,
)

ASK = b'{"jsonrpc":"2.0","id":%b,"method":"session/request_permission","params":{"sessionId":"s"}}'
ALLOW = b'{"jsonrpc":"2.0","id":%b,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}'


def asked(*ids: bytes) -> Answers:
    """An answer book that saw the agent ask permission with each of ``ids``."""
    answers = Answers()
    answers.agent_lines([ASK % i for i in ids])
    return answers


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
        (conversation_frame(2, b"watcher", b"{}"), Said(2, "watcher", b"{}")),
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


@pytest.mark.parametrize(
    ("limit", "lines", "kept", "dropped"),
    [
        (100, [b"a" * 10] * 5, 5, 0),
        (25, [b"a" * 10] * 5, 2, 3),  # oldest whole lines go first
        (5, [b"a" * 10], 1, 0),  # one line over the limit is kept alone
        (5, [b"a" * 10, b"b" * 10], 1, 1),
    ],
)
def test_history_is_bounded_by_bytes_dropping_the_oldest(
    limit: int, lines: list[bytes], kept: int, dropped: int
) -> None:
    """The history keeps the newest whole lines within its limit, plus one line at most."""
    history = History(limit)
    for line in lines:
        history.add(FROM_AGENT, [line])
    assert (len(history), history.dropped, history.last) == (kept, dropped, len(lines))
    assert history.first == len(lines) - kept + 1


def test_history_frames_are_numbered_across_both_directions() -> None:
    """Lines of both directions share one numbering, in the order they were recorded."""
    history = History(1000)
    assert history.add(FROM_CLIENT, [b"q"]) == 1
    assert history.add(FROM_AGENT, [b"a1", b"a2"]) == 2
    assert history.frames() == [
        b'{"seq":1,"from":"client"}\nq',
        b'{"seq":2,"from":"agent"}\na1',
        b'{"seq":3,"from":"agent"}\na2',
    ]


@given(st.integers(min_value=1, max_value=200), st.lists(st.binary(max_size=50), max_size=60))
def test_history_never_holds_more_than_its_limit_and_one_line(
    limit: int, lines: list[bytes]
) -> None:
    """Whatever comes, the kept lines are the newest and fit the limit, or are one line."""
    history = History(limit)
    for line in lines:
        history.add(FROM_AGENT, [line])
    kept = lines[len(lines) - len(history) :]
    size = sum(map(len, kept))
    assert history.size == size
    assert size <= limit or len(kept) == 1
    assert history.dropped + len(history) == len(lines)


@given(
    st.integers(min_value=1, max_value=200),
    st.lists(
        st.tuples(
            st.sampled_from([FROM_CLIENT, FROM_AGENT, b"watcher"]),
            st.lists(st.binary(max_size=40), min_size=1, max_size=5),
        ),
        max_size=30,
    ),
)
def test_history_frames_keep_each_lines_origin_through_drops(
    limit: int, batches: list[tuple[bytes, list[bytes]]]
) -> None:
    """Batches from several origins: the frames are the newest lines kept, each with the
    origin and number it was recorded with."""
    history = History(limit)
    every = []
    for origin, lines in batches:
        first = history.add(origin, lines)
        every += [(first + i, origin, line) for i, line in enumerate(lines)]
    kept = every[len(every) - len(history) :]
    assert history.frames() == [conversation_frame(n, o, line) for n, o, line in kept]


def test_spellings_of_one_number_are_one_id() -> None:
    """An answer with id 1E2 answers the request with id 100, as agents read them."""
    answers = asked(b"100")
    taken = answers.watcher_frame(ALLOW % b"1E2", may_answer=True, by="lead")
    assert isinstance(taken, Taken)


def test_the_first_answer_wins_and_later_ones_are_late() -> None:
    """The watcher answers first: its line goes on; the controller's answer is dropped."""
    answers = asked(b"7")
    taken = answers.watcher_frame(ALLOW % b"7", may_answer=True, by="lead")
    assert isinstance(taken, Taken)
    assert taken.line == ALLOW % b"7"
    notice = json.loads(taken.notice)
    assert notice["method"] == ANSWERED
    assert notice["params"] == {
        "id": 7,
        "by": "watcher",
        "subject": "lead",
        "result": {"outcome": {"outcome": "selected", "optionId": "allow"}},
    }
    assert answers.controller_line(ALLOW % b"7", by="alice") == Late(taken.key)
    late = answers.watcher_frame(ALLOW % b"7", may_answer=True, by="bob")
    assert isinstance(late, Late)
    assert answers.pending == 0


def test_the_controller_answering_first_is_noted_too() -> None:
    """The controller's answer is taken (passed on) and told; a watcher's then is late."""
    answers = asked(b'"p1"')
    taken = answers.controller_line(ALLOW % b'"p1"', by="alice")
    assert isinstance(taken, Taken)
    assert json.loads(taken.notice)["params"]["by"] == "controller"
    assert isinstance(answers.watcher_frame(ALLOW % b'"p1"', may_answer=True, by="w"), Late)


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","method":"session/update","params":{}}',
        b'{"jsonrpc":"2.0","id":3,"result":{}}',  # no request pending
        b"not json",
    ],
)
def test_the_controllers_other_lines_pass(line: bytes) -> None:
    """Without a pending request, or for anything but a response to one, nothing changes."""
    assert asked().controller_line(line, by="alice") is None
    assert asked(b"9").controller_line(line, by="alice") is None


@pytest.mark.parametrize(
    ("frame", "may_answer", "detail"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}}', True, "no requests"),
        (b'{"jsonrpc":"2.0","method":"session/cancel","params":{}}', True, "no requests"),
        (ALLOW % b"1", False, "watch only"),
        (ALLOW % b"2", True, "no permission request 2"),
        (b'{"jsonrpc":"2.0","id":1}', True, "not a JSON-RPC response"),
        (b'{"jsonrpc":"2.0","id":1,"result":{},"error":{}}', True, "not a JSON-RPC response"),
        (b"[]", True, "no requests"),
        (b"{", True, "not one readable JSON object"),
        (b"", True, "blank frame"),
    ],
)
def test_watcher_frames_other_than_an_allowed_answer_are_refused(
    frame: bytes, may_answer: bool, detail: str
) -> None:
    """A watcher's request, notification, unrequested or unallowed answer gets a -32600."""
    answers = asked(b"1")
    refused = answers.watcher_frame(frame, may_answer=may_answer, by="w")
    assert isinstance(refused, Refused)
    assert detail in refused.reason
    error = json.loads(refused.reply)
    assert (error["id"], error["error"]["code"]) == (None, -32600)
    assert answers.pending == 1  # the request still awaits its answer


def test_only_permission_requests_are_answerable() -> None:
    """An agent's fs or terminal request is the controller's to answer, never a watcher's."""
    answers = Answers()
    answers.agent_lines([b'{"jsonrpc":"2.0","id":4,"method":"fs/read_text_file","params":{}}'])
    assert answers.pending == 0
    refused = answers.watcher_frame(ALLOW % b"4", may_answer=True, by="w")
    assert isinstance(refused, Refused)


def test_pending_requests_are_bounded() -> None:
    """The oldest pending requests are forgotten past the bound."""
    answers = asked(*[b"%d" % i for i in range(300)])
    assert answers.pending == 256
    assert isinstance(answers.watcher_frame(ALLOW % b"0", may_answer=True, by="w"), Refused)
    assert isinstance(answers.watcher_frame(ALLOW % b"299", may_answer=True, by="w"), Taken)


@pytest.mark.parametrize(
    "frame",
    [
        ALLOW % b"1",
        b"{",
        b"[" + b"{}," * 1000 + b"{}]",
        b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}}',
        b"",
        b"\xff\xfe",
    ],
    ids=["an answer", "unreadable", "a batch", "a request", "blank", "not UTF-8"],
)
def test_a_read_only_watchers_frames_are_refused_unread(frame: bytes) -> None:
    """Whatever a watcher without the right to answer sends is refused for that alone: the
    relay reads none of it."""
    answers = asked(b"1")
    refused = answers.watcher_frame(frame, may_answer=False, by="w")
    assert isinstance(refused, Refused)
    assert "watch only" in refused.reason
    assert json.loads(refused.reply)["error"]["code"] == -32600
    assert answers.pending == 1


def test_an_answer_over_the_watchers_frame_bound_is_refused_unread() -> None:
    """A frame of a watcher allowed to answer is read only within WATCHER_FRAME_BYTES: a
    longer one is refused, however good an answer it would make."""
    padded = ALLOW.replace(b'"allow"}}', b'"allow"},"_meta":{"pad":"%b"}}')
    fits = padded % (b"1", b"x" * (WATCHER_FRAME_BYTES - len(padded % (b"1", b""))))
    assert len(fits) == WATCHER_FRAME_BYTES
    answers = asked(b"1", b"2")
    assert isinstance(answers.watcher_frame(fits, may_answer=True, by="w"), Taken)
    over = padded % (b"2", b"x" * (WATCHER_FRAME_BYTES + 1 - len(padded % (b"2", b""))))
    refused = answers.watcher_frame(over, may_answer=True, by="w")
    assert isinstance(refused, Refused)
    assert f"over {WATCHER_FRAME_BYTES} bytes" in refused.reason
    assert answers.pending == 1


@pytest.mark.parametrize(("may_answer", "detail"), [(True, "binary"), (False, "watch only")])
def test_a_watchers_binary_frame_is_refused(may_answer: bool, detail: str) -> None:
    """Answers are text frames: a binary frame, whatever it holds, is refused unread."""
    answers = asked(b"1")
    refused = answers.watcher_frame(Binary(len(ALLOW % b"1")), may_answer=may_answer, by="w")
    assert isinstance(refused, Refused)
    assert detail in refused.reason
    assert answers.pending == 1
