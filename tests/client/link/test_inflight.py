"""Tests for relay.client.link.inflight: which lines are requests or responses, and which
await one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.client.link.inflight import HEAD_CHARS, MAX_ID_CHARS, InFlight, request_id, response_id

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
