"""Tests for relay.acp.outcome: each client frame yields exactly one outcome."""

from __future__ import annotations

import json

import pytest

from relay.acp.boundary import Boundary
from relay.acp.mcp import McpPolicy
from relay.acp.outcome import (
    Binary,
    Forward,
    Outcome,
    Received,
    Refuse,
    Skip,
    judge_client_frame,
    judge_client_text,
    judge_frame,
)
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.rewrite import RewritePolicy, RewriteReport, Rewritten
from relay.core.framing import FrameRefused

REPORT = RewriteReport("session/new", cwd_from="/a", cwd_to="/b")
REFUSAL = FrameRefused(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602}}', "cwd not mapped")


def rewrite(line: bytes) -> bytes | FrameRefused | Rewritten:
    """A stand-in for the session rewrite: refuses 'bad', rewrites 'new', passes the rest."""
    if b"bad" in line:
        return REFUSAL
    if b"new" in line:
        return Rewritten(line.replace(b"new", b"NEW"), REPORT)
    return line


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ('{"id":1}', Forward(b'{"id":1}', b'{"id":1}')),
        ("", Skip("blank", 0)),
        (" \t ", Skip("blank", 3)),
        (Binary(2), Skip("binary", 2)),
        ('{\n"id": 1}', Forward(b'{"id":1}', b'{\n"id": 1}')),
        ('{"m":"new"}', Forward(b'{"m":"NEW"}', b'{"m":"new"}', REPORT)),
        ('{"m":"bad"}', Refuse(REFUSAL.reply, REFUSAL.reason, b'{"m":"bad"}', session=True)),
    ],
)
def test_each_frame_has_one_outcome(frame: str | Received, expected: Outcome) -> None:
    """Text frames are forwarded, compacted, rewritten or refused; blank and binary ones skipped."""
    assert judge_frame(frame, rewrite) == expected


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ('{"id":1}', Forward(b'{"id":1}', b'{"id":1}')),
        ('{"m":"new"}', Forward(b'{"m":"NEW"}', b'{"m":"new"}', REPORT)),
        ('{"m":"bad"}', Refuse(REFUSAL.reply, REFUSAL.reason, b'{"m":"bad"}', session=True)),
        ('{\n"id": 1}', Forward(b'{"id":1}', b'{\n"id": 1}')),
        ('{"id":1}\r', Forward(b'{"id":1}', b'{"id":1}\r')),
        (" {}", Forward(b" {}", b" {}")),
        ("", Skip("blank", 0)),
        (Binary(2), Skip("binary", 2)),
    ],
)
def test_a_client_frame_is_judged_as_any_frame(frame: str | Received, expected: Outcome) -> None:
    """serve's judge (one-line objects judged at once) agrees with judge_frame on non-batches."""
    assert judge_client_frame(frame, rewrite) == expected == judge_frame(frame, rewrite)


@pytest.mark.parametrize(
    "frame",
    [
        '{"id":1}',
        '{\n"id": 1}',
        '{"m":"new"}',
        '{"m":"bad"}',
        "[{}]",
        " \t",
        "not json\nat all",
        '{"t":"h\u00e9llo \u2713"}',
        '"\ufeff{}"',
    ],
)
def test_a_text_frame_as_bytes_is_judged_as_the_same_text(frame: str) -> None:
    """A text frame handed over as its UTF-8 bytes (as the pump receives it) has the outcome
    of the same text as a str, with either judge."""
    data = frame.encode()
    assert judge_frame(data, rewrite) == judge_frame(frame, rewrite)
    assert judge_client_frame(data, rewrite) == judge_client_frame(frame, rewrite)


def test_a_text_frame_as_bytes_is_forwarded_as_the_very_object() -> None:
    """The bytes received are the line the agent gets: not copied, with either judge."""
    data = b'{"jsonrpc":"2.0","id":1,"method":"x"}'
    for judge in (judge_frame, judge_client_frame):
        outcome = judge(data)
        assert isinstance(outcome, Forward)
        assert outcome.line is data
        assert outcome.frame is data


def test_frame_that_is_not_one_line_is_refused_by_the_framing() -> None:
    """A frame with a raw newline that is not JSON gets the framing's -32700, not the rewrite's."""
    outcome = judge_frame("not json\nat all", rewrite)
    assert isinstance(outcome, Refuse)
    assert not outcome.session
    assert json.loads(outcome.reply)["error"]["code"] == -32700
    assert outcome.frame == b"not json\nat all"


def test_a_frame_passed_through_is_the_same_bytes_object() -> None:
    """A frame the relay does not change is forwarded as the very bytes received (no copy)."""
    outcome = judge_frame('{"id":1,"method":"x"}')
    assert isinstance(outcome, Forward)
    assert outcome.line is outcome.frame
    assert not outcome.changed


@pytest.mark.parametrize(
    ("frame", "changed"),
    [('{"id":1}', False), ('{ "id":\n1 }', True), ('{"m":"new"}', True)],
)
def test_changed_says_whether_the_agent_gets_other_bytes(frame: str, changed: bool) -> None:
    """Forward.changed is True exactly when the line differs from the frame."""
    outcome = judge_frame(frame, rewrite)
    assert isinstance(outcome, Forward)
    assert outcome.changed is changed


def test_without_a_rewrite_session_requests_pass() -> None:
    """With no rewrite configured, a session request is forwarded as it came."""
    frame = '{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/x"}}'
    assert judge_frame(frame) == Forward(frame.encode(), frame.encode())


@pytest.mark.parametrize(
    "frame",
    ['[{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/etc"}}]', " \n [ ]", "[]"],
)
def test_a_batch_from_a_client_is_refused_whole(frame: str) -> None:
    """A JSON array is not ACP v1: one -32600 saying batches are unsupported, nothing forwarded."""
    outcome = judge_client_frame(frame, rewrite)
    assert isinstance(outcome, Refuse)
    reply = json.loads(outcome.reply)
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert "batch" in reply["error"]["data"]["detail"]


def test_arrays_inside_a_message_are_no_batch() -> None:
    """Only a frame that is an array is a batch; an object holding arrays passes."""
    frame = '{"jsonrpc":"2.0","id":1,"method":"x","params":[1,[2]]}'
    assert judge_client_frame(frame) == Forward(frame.encode(), frame.encode())
    assert isinstance(judge_frame("[1]"), Forward)  # connect passes what the relay sends


# -- issue 22.3: messages that are not UTF-8 JSON text ------------------------------------

OPEN_ETC = '{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/etc","mcpServers":[]}}'
REJECTING = RewritePolicy(
    CwdPolicy((parse_rule("/Users/a=/w"),), "reject", "/w", False), McpPolicy()
)


@pytest.mark.parametrize(
    "encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-8-sig"]
)
def test_a_session_request_in_another_encoding_never_reaches_the_agent(encoding: str) -> None:
    """A UTF-16/32 (or BOM-led) session/new is a valid text frame that Python's json.loads(bytes)
    decodes; the relay refuses it with -32700 instead of forwarding it unjudged."""
    frame = OPEN_ETC.encode(encoding).decode("utf-8")  # what such a client sends as text
    assert json.loads(frame.encode())["params"]["cwd"] == "/etc"  # what the agent would read
    boundary = Boundary(REJECTING)
    for outcome in (
        judge_client_frame(frame, boundary.client_line),
        judge_client_text(frame.encode(), boundary.client_line),  # a resume envelope's message
    ):
        assert isinstance(outcome, Refuse)
        assert not outcome.session
        reply = json.loads(outcome.reply)
        assert (reply["id"], reply["error"]["code"]) == (None, -32700)
        assert "UTF-8" in reply["error"]["data"]["hint"]
    assert judge_client_frame(OPEN_ETC, boundary.client_line).__class__ is Refuse  # -32602


@pytest.mark.parametrize(
    "frame",
    ['{"id":1,"text":"a\\u0000b"}', '{"id":1,"text":"\ufeff inside"}', ' {"id":1}'],
)
def test_escaped_nul_and_an_inner_bom_are_text(frame: str) -> None:
    """A NUL written \\u0000 and U+FEFF inside a string are ordinary JSON text: forwarded."""
    assert isinstance(judge_client_frame(frame), Forward)


@pytest.mark.parametrize("frame", ["\ufeff{}", " \ufeff{}", '{"id":1}\x00', "\x00"])
def test_a_leading_bom_or_a_raw_nul_is_refused(frame: str) -> None:
    """A byte-order mark before the JSON, or a raw NUL anywhere, is refused with -32700."""
    outcome = judge_client_frame(frame)
    assert isinstance(outcome, Refuse)
    assert json.loads(outcome.reply)["error"]["code"] == -32700
