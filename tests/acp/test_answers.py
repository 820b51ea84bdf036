"""relay.acp.answers: first answer wins, and what a watcher may send; from tables."""

from __future__ import annotations

import json

import pytest

from relay.acp.answers import (
    ANSWER_MAX_BYTES,
    WATCHER_FRAME_BYTES,
    Answers,
    Late,
    Refused,
    Taken,
    might_answer,
)
from relay.acp.crossings import READ_MAX_VALUES
from relay.acp.outcome import Binary
from relay.core.watchprofile import ANSWERED

ASK = b'{"jsonrpc":"2.0","id":%b,"method":"session/request_permission","params":{"sessionId":"s"}}'
ALLOW = b'{"jsonrpc":"2.0","id":%b,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}'


def asked(*ids: bytes) -> Answers:
    """An answer book that saw the agent ask permission with each of ``ids``."""
    answers = Answers()
    answers.agent_lines([ASK % i for i in ids])
    return answers


CHUNK = b'{"jsonrpc":"2.0","method":"session/update","params":{"update":{"text":"%b"}}}'


@pytest.mark.parametrize(
    ("read", "pending"),
    [
        ([CHUNK % b"a", ASK % b"1", CHUNK % b"b", ASK % b"2", CHUNK % b"c"], 2),
        ([CHUNK % b"a", CHUNK % b"session/request"], 0),
        ([CHUNK % b"session/request_permission"], 0),  # named in text: read, not a request
        ([ASK % b"3"], 1),
        ([], 0),
    ],
)
def test_the_requests_among_the_lines_of_one_read_are_noted(
    read: list[bytes], pending: int
) -> None:
    """Every permission request among the agent's lines of one read is noted, and only
    those."""
    answers = Answers()
    answers.agent_lines(read)
    assert answers.pending == pending


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


@pytest.mark.parametrize(("values", "noted"), [(READ_MAX_VALUES - 10, 1), (READ_MAX_VALUES, 0)])
def test_a_request_holding_too_many_values_is_left_to_the_controller(
    values: int, noted: int
) -> None:
    """A permission request that may hold more than READ_MAX_VALUES values is not read (a
    watcher cannot answer it; the controller can); one within the bound is."""
    filler = b",".join([b"0"] * values)
    request = ASK.replace(b'"s"}', b'"s","_meta":[%b]}' % filler) % b"4"
    answers = Answers()
    answers.agent_lines([request])
    assert answers.pending == noted
    taken = answers.controller_line(ALLOW % b"4", by="alice")
    assert isinstance(taken, Taken) is bool(noted)


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


ANSWERS_HOWEVER_SPELLED = {
    "_meta.method": ALLOW.replace(b"}}}", b'},"_meta":{"method":"x"}}}'),
    "escaped id": ALLOW.replace(b'"id"', b'"\\u0069d"'),
    "escaped result": ALLOW.replace(b'"result"', b'"r\\u0065sult"'),
    "spaced": ALLOW.replace(b",", b" , ").replace(b":", b" : "),
    "method in the answer's text": ALLOW.replace(b'"allow"', b'"\\"method\\":1"'),
}


@pytest.mark.parametrize("case", list(ANSWERS_HOWEVER_SPELLED))
def test_the_controllers_answer_is_taken_however_it_is_spelled(case: str) -> None:
    """An answer is read as the agent reads it: "method" below its top level, an escaped key
    or spaces make it no less the answer; a watcher's next is late."""
    answers = asked(b"7")
    taken = answers.controller_line(ANSWERS_HOWEVER_SPELLED[case] % b"7", by="alice")
    assert isinstance(taken, Taken)
    assert json.loads(taken.notice)["params"]["by"] == "controller"
    assert isinstance(answers.watcher_frame(ALLOW % b"7", may_answer=True, by="w"), Late)


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"result":1,"error":2}}',
        b'{"jsonrpc":"2.0","\\u0069d":7,"m\\u0065thod":"x","result":{}}',
        b'{"jsonrpc":"2.0","method":"x","params":{"id":7,"result":{}}}',
        b'{"jsonrpc":"2.0","id":8,"result":{}}',
        b'{"jsonrpc":"2.0","id":7}',
        b"[" + ALLOW % b"7" + b"]",
    ],
    ids=["request", "escaped request", "notification", "another id", "no result", "array"],
)
def test_the_controllers_requests_and_other_responses_pass(line: bytes) -> None:
    """A top-level method makes a request or a notification, whatever it holds; a response
    to another request passes too: the permission request still awaits its answer."""
    answers = asked(b"7")
    assert answers.controller_line(line, by="alice") is None
    assert answers.pending == 1


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":"x","id":7,"result":{}}',
        b'{"jsonrpc":"2.0","id":7,"result":{"a":"\\ud800"}}',
        b'{"jsonrpc":"2.0","id":7,"result":NaN}',
        b'{"jsonrpc":"2.0","id":7,"result":',
    ],
    ids=["id twice", "lone surrogate", "NaN", "cut short"],
)
def test_a_controller_line_that_may_answer_but_cannot_be_read_is_refused(line: bytes) -> None:
    """While an answer is awaited, a line that may be one but is not readable unambiguously
    (the agent might read an answer in it) is refused with a -32600 and goes nowhere."""
    answers = asked(b"7")
    refused = answers.controller_line(line, by="alice")
    assert isinstance(refused, Refused)
    assert json.loads(refused.reply)["error"]["code"] == -32600
    assert answers.pending == 1
    assert Answers().controller_line(line, by="alice") is None  # nothing awaited: not read


def test_a_controller_line_over_the_bound_is_passed_on_unread() -> None:
    """A line longer than ANSWER_MAX_BYTES is not read (no answer is that long): it passes,
    and the permission request still awaits its answer."""
    padded = ALLOW.replace(b"}}}", b'},"_meta":{"pad":"%b"}}}')
    line = padded % (b"7", b"x" * ANSWER_MAX_BYTES)
    answers = asked(b"7")
    assert answers.controller_line(line, by="alice") is None
    assert answers.pending == 1


def test_the_controllers_late_answer_is_dropped_then_its_lines_are_no_longer_read() -> None:
    """A watcher answered first: the controller's answer is late, once; with nothing else
    awaited, its lines are passed on unread again."""
    answers = asked(b"7")
    assert isinstance(answers.watcher_frame(ALLOW % b"7", may_answer=True, by="w"), Taken)
    unreadable = b'{"jsonrpc":"2.0","id":7,"result":'
    assert isinstance(answers.controller_line(unreadable, by="alice"), Refused)
    assert isinstance(answers.controller_line(ALLOW % b"7", by="alice"), Late)
    assert answers.controller_line(unreadable, by="alice") is None


@pytest.mark.parametrize(
    ("line", "may"),
    [
        (ALLOW % b"1", True),
        (ANSWERS_HOWEVER_SPELLED["escaped id"], True),
        (b'{"jsonrpc":"2.0","id":1,"error":{}}', True),
        (b'{"jsonrpc":"2.0","r\\u0065sult":{},"id":1}', True),
        (b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}}', False),
        (b'{"jsonrpc":"2.0","method":"x","params":{"text":"\\n\\u00e9\\u001b"}}', False),
        (b'{"jsonrpc":"2.0","method":"x","params":{"text":"\\"result\\" \\"id\\""}}', False),
    ],
)
def test_might_answer_tells_apart_what_cannot_be_a_response(line: bytes, may: bool) -> None:
    """Only a line with an id key and a result or error key, or with a letter escaped, may
    be a response: a prompt, or text holding those words, is not read."""
    assert might_answer(line) == may
