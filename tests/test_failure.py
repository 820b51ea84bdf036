"""Tests for relay.failure: the errors connect answers with, and which requests await one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.failure import (
    HEAD_CHARS,
    MAX_ID_CHARS,
    Close,
    Failure,
    InFlight,
    cannot_connect,
    connection_closed,
    http_refusal,
    reason_from_body,
    request_id,
    response_id,
)

URL = "ws://127.0.0.1:9/acp"
BIG = "é✓" + "x" * (HEAD_CHARS * 4)


def line(**message: Any) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def ordered(*pairs: tuple[str, Any]) -> bytes:
    """A JSON object line with its keys in exactly this order."""
    return json.dumps(dict(pairs), ensure_ascii=False).encode()


# -- requests and responses -----------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (line(jsonrpc="2.0", id=1, method="initialize", params={}), 1),
        (line(jsonrpc="2.0", id="a-1", method="session/new"), "a-1"),
        (line(jsonrpc="2.0", id=2.5, method="x"), 2.5),
        (line(jsonrpc="2.0", method="session/cancel", params={"sessionId": "s"}), None),
        (line(jsonrpc="2.0", id=3, result={}), None),
        (line(jsonrpc="2.0", id=3, error={"code": 1, "message": "m"}), None),
        (line(jsonrpc="2.0", id=None, method="x"), None),
        (line(jsonrpc="2.0", id=True, method="x"), None),
        (line(jsonrpc="2.0", id=[1], method="x"), None),
        (b'[{"jsonrpc":"2.0","id":1,"method":"x"}]', None),
        (b"not json", None),
        (b'{"\\u0069d":7,"m\\u0065thod":"x"}', 7),
        (ordered(("params", {"id": 99}), ("method", "x"), ("id", 4)), 4),
    ],
    ids=[
        "int",
        "string",
        "float",
        "notification",
        "response",
        "error-response",
        "null-id",
        "bool-id",
        "array-id",
        "batch",
        "not-json",
        "escaped-keys",
        "nested-id-ignored",
    ],
)
def test_request_id(raw: bytes, expected: object) -> None:
    """Requests have method and id (string or number); everything else has no request id."""
    assert request_id(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (line(jsonrpc="2.0", id=1, result={"stopReason": "end_turn"}), 1),
        (line(jsonrpc="2.0", id="x", error={"code": -32603, "message": "m"}), "x"),
        (line(jsonrpc="2.0", method="session/update", params={"id": 1, "result": 2}), None),
        (line(jsonrpc="2.0", id=5, method="fs/read_text_file", params={}), None),
        (line(jsonrpc="2.0", id=5), None),
        (b"{}", None),
    ],
    ids=["result", "error", "notification", "agent-request", "no-outcome", "empty"],
)
def test_response_id(raw: bytes, expected: object) -> None:
    """Responses have id and result or error, and no method; the agent's requests are not."""
    assert response_id(raw) == expected


def test_big_lines_are_read_from_their_head() -> None:
    """Lines over the head size are classified in the usual key orders and in unusual ones."""
    request = line(jsonrpc="2.0", id=7, method="session/prompt", params={"text": BIG})
    response = line(jsonrpc="2.0", id=7, result={"text": BIG})
    update = line(jsonrpc="2.0", method="session/update", params={"text": BIG})
    late_id = ordered(("jsonrpc", "2.0"), ("params", {"text": BIG}), ("method", "x"), ("id", 8))
    assert (request_id(request), response_id(response), response_id(update)) == (7, 7, None)
    assert (request_id(response), request_id(update), request_id(late_id)) == (None, None, 8)


def test_invalid_method_and_result_goes_by_the_first_key() -> None:
    """A big line with both method and result (not JSON-RPC) is classified by its first keys."""
    method_first = ordered(("id", 1), ("method", "m"), ("params", BIG), ("result", 0))
    result_first = ordered(("id", 1), ("result", BIG), ("method", "m"))
    assert (request_id(method_first), response_id(method_first)) == (1, None)
    assert (request_id(result_first), response_id(result_first)) == (None, 1)


def test_number_cut_at_the_head_is_not_trusted() -> None:
    """An id number that the head cuts short is read from the whole line instead."""
    prefix = '{"jsonrpc":"2.0","method":"x","id":'
    digits = "1" * (HEAD_CHARS - len(prefix) + 5)  # runs past the head
    raw = f'{prefix}{digits},"params":{{"text":"{BIG}"}}}}'.encode()
    assert request_id(raw) == int(digits)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
ids = st.one_of(st.integers(), st.text(max_size=8), st.none(), st.booleans())


@given(
    members=st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "_meta"]),
        json_values,
    ),
    request=ids,
    padding=st.integers(min_value=0, max_value=2 * HEAD_CHARS),
    order=st.randoms(use_true_random=False),
)
def test_head_reading_agrees_with_a_full_parse(
    members: dict[str, Any], request: object, padding: int, order: Any
) -> None:
    """Whatever the key order and size, request_id/response_id match a full json.loads."""
    if "method" in members:  # valid JSON-RPC: a request/notification or a response
        members = {k: v for k, v in members.items() if k not in ("result", "error")}
    members = {**members, "id": request} if "id" in members else members
    members["params" if "params" in members else "_pad"] = "p" * padding
    keys = list(members)
    order.shuffle(keys)
    raw = json.dumps({key: members[key] for key in keys}).encode()
    parsed = json.loads(raw)
    valid = parsed.get("id") if not isinstance(parsed.get("id"), bool) else None
    is_request = "method" in parsed and not ({"result", "error"} & parsed.keys())
    is_response = "method" not in parsed and bool({"result", "error"} & parsed.keys())
    assert request_id(raw) == (valid if is_request else None)
    assert response_id(raw) == (valid if is_response else None)


# -- in flight --------------------------------------------------------------------------


def test_in_flight_settles_on_responses_only() -> None:
    """Requests are settled by their response; agent requests and notifications settle nothing."""
    flight = InFlight()
    for request in (1, "two", 3):
        assert flight.request_sent(line(jsonrpc="2.0", id=request, method="m"))
    assert flight.request_sent(line(jsonrpc="2.0", method="session/cancel"))
    assert flight.request_sent(line(jsonrpc="2.0", id=9, result={}))  # the editor answering
    flight.response_received(line(jsonrpc="2.0", id=1, method="fs/read_text_file"))
    flight.response_received(line(jsonrpc="2.0", method="session/update", params={}))
    flight.response_received(line(jsonrpc="2.0", id="1", result={}))  # "1" is not 1
    flight.response_received(line(jsonrpc="2.0", id=3, error={"code": 1, "message": ""}))
    assert len(flight) == 2
    assert flight.settle_all() == [1, "two"]
    assert flight.settle_all() == []


def test_in_flight_is_bounded() -> None:
    """Past the limit, and for absurdly long string ids, requests are left untracked."""
    flight = InFlight(limit=2)
    assert flight.request_sent(line(id=1, method="m"))
    assert flight.request_sent(line(id=2, method="m"))
    assert not flight.request_sent(line(id=3, method="m"))
    flight.response_received(line(id=1, result=None))
    assert not flight.request_sent(line(id="x" * (MAX_ID_CHARS + 1), method="m"))
    assert flight.settle_all() == [2]


# -- failures ---------------------------------------------------------------------------


def test_error_response_is_one_json_rpc_line() -> None:
    """The error response echoes the id, uses -32603 and carries message and data."""
    failure = cannot_connect(URL, "refused", "Connection refused")
    raw = failure.error_response("req-1")
    assert b"\n" not in raw
    assert json.loads(raw) == {
        "jsonrpc": "2.0",
        "id": "req-1",
        "error": {
            "code": -32603,
            "message": "cannot reach relay at ws://127.0.0.1:9/acp: connection refused",
            "data": {"url": URL, "cause": "refused", "detail": "Connection refused"},
        },
    }


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, b"ticket expired (issued 75 s ago, max age 60 s)\n", "relay refused the ticket "
         "(401): ticket expired (issued 75 s ago, max age 60 s)"),
        (403, b"origin https://e.example is not allowed: add it\n", "relay refused the "
         "connection (403): origin https://e.example is not allowed: add it"),
        (404, b"not found: the ACP endpoint is /acp\n", "relay has no ACP endpoint at "
         "ws://127.0.0.1:9/acp (404): not found: the ACP endpoint is /acp"),
        (503, b"relay is at its limit of 2 connections; retry in 5 s\n", "relay is busy (503): "
         "relay is at its limit of 2 connections; retry in 5 s"),
        (502, b"<html><body>Bad gateway</body></html>", "relay refused the connection (502): "
         "Bad Gateway"),
        (299, b"", "relay refused the connection (299): HTTP 299"),
    ],
)  # fmt: skip
def test_http_refusals_quote_the_relays_reason(status: int, body: bytes, message: str) -> None:
    """Each refusal names what was refused, with the status and the body's first line."""
    failure = http_refusal(URL, status, body, "5" if status == 503 else None)
    assert failure.message == message
    assert failure.data["status"] == status
    assert failure.data["url"] == URL
    assert ("retryAfter" in failure.data) == (status == 503)
    assert failure.exit_status == 1


def test_long_bodies_are_cut() -> None:
    """Only the first line of a body is quoted, at most 300 characters."""
    assert reason_from_body(400, b"first\nsecond") == "first"
    assert len(reason_from_body(400, b"y" * 1000)) == 300


@pytest.mark.parametrize(
    ("received", "sent", "relay_first", "message", "cause", "status"),
    [
        (Close(1011, "agent exited with status 3"), None, True, "agent exited with status 3",
         "closed", 1),
        (Close(1000, "agent exited"), Close(1000, "agent exited"), True, "agent exited",
         "closed", 0),
        (Close(1001), None, True, "relay closed the connection (1001 going away)", "closed", 1),
        (Close(1011, "keepalive ping timeout"), Close(1011, "keepalive ping timeout"), False,
         f"lost the relay at {URL}: no answer to a heartbeat ping within 0.5 s", "heartbeat", 1),
        (None, Close(1011, "keepalive ping timeout"), False,
         f"lost the relay at {URL}: no answer to a heartbeat ping within 0.5 s", "heartbeat", 1),
        (None, Close(1009, "frame with 9 bytes exceeds limit of 8 bytes"), False,
         "relay sent a message over --max-message-bytes (frame with 9 bytes exceeds limit of 8 "
         "bytes)", "closed", 1),
        (None, None, False, f"lost the connection to the relay at {URL} (no close frame)", "lost",
         1),
    ],
    ids=["agent-3", "agent-0", "going-away", "heartbeat-echoed", "heartbeat", "too-big", "lost"],
)  # fmt: skip
def test_closes_say_who_closed_and_why(
    received: Close | None,
    sent: Close | None,
    relay_first: bool,
    message: str,
    cause: str,
    status: int,
) -> None:
    """The relay's agent reasons pass through; heartbeat, size and lost sockets are named."""
    failure = connection_closed(
        URL, received=received, sent=sent, relay_first=relay_first, ping_timeout=0.5
    )
    assert (failure.message, failure.data["cause"], failure.exit_status) == (
        message,
        cause,
        status,
    )
    assert failure.data["url"] == URL


@pytest.mark.parametrize(
    ("cause", "detail", "message"),
    [
        ("dns", "Name or service not known", "cannot reach relay at ws://127.0.0.1:9/acp: "
         "cannot resolve 127.0.0.1 (Name or service not known)"),
        ("tls", "certificate verify failed: self-signed certificate", "TLS handshake with relay "
         "at ws://127.0.0.1:9/acp failed: certificate verify failed: self-signed certificate"),
        ("ticket", "--ticket-command exited with status 1", "cannot get a ticket for relay at "
         "ws://127.0.0.1:9/acp: --ticket-command exited with status 1"),
        ("timeout", "no answer within 10 s (--open-timeout)", "cannot reach relay at "
         "ws://127.0.0.1:9/acp: no answer within 10 s (--open-timeout)"),
    ],
)  # fmt: skip
def test_cannot_connect_messages(cause: Any, detail: str, message: str) -> None:
    """Each cause has its sentence; data carries the cause and the raw detail."""
    failure = cannot_connect(URL, cause, detail)
    assert failure.message == message
    assert failure.data == {"url": URL, "cause": cause, "detail": detail}


def test_redacted_removes_the_ticket_everywhere() -> None:
    """A ticket quoted by a proxy's reason disappears from the message and the data."""
    failure = http_refusal(URL, 400, b"bad request for /acp?ticket=SECRET-TICKET")
    clean = failure.redacted("SECRET-TICKET")
    assert "SECRET-TICKET" not in clean.message + json.dumps(dict(clean.data))
    assert "[redacted]" in clean.message
    assert failure.redacted(None) is failure
    assert isinstance(clean, Failure)
