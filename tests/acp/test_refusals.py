"""relay.acp.refusals: the relay's own answers where a path cannot cross, bounded and clear."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from relay.acp.paths import parse_rule
from relay.acp.refusals import (
    batch_request,
    id_key,
    too_many_pending,
    unmapped_request,
    unreadable_request,
    withheld_method,
)
from relay.acp.rewrite import SHOWN_CHARS, RewriteReport
from relay.core import strictjson

READ = {"id": 7, "method": "fs/read_text_file", "params": {"path": "/box/a.py"}}


def test_a_withheld_capability_is_answered_method_not_found_with_what_to_do() -> None:
    """--files box: the agent's fs request gets -32601 naming the capability and a hint."""
    answer = withheld_method(READ, RewriteReport("fs/read_text_file"))
    reply = json.loads(answer.reply)
    assert (reply["id"], reply["error"]["code"]) == (7, -32601)
    assert reply["error"]["data"]["withheld"] == "fs"
    assert "--files shared" in reply["error"]["data"]["hint"]
    assert answer.report.refused == "fs/read_text_file"


def test_an_agents_batch_is_answered_whole_with_id_null() -> None:
    """A batch that may hold fs/ or terminal/ gets one -32600, id null, saying to send each
    message on its own line."""
    answer = batch_request()
    reply = json.loads(answer.reply)
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert "batch" in reply["error"]["data"]["detail"]
    assert "its own line" in reply["error"]["data"]["hint"]
    assert answer.report.refused == "(the batch)"


def test_an_unmapped_path_is_answered_invalid_params_and_echoed_bounded() -> None:
    """shared: a box path under no rule gets -32602 with the mappings; a huge path is cut."""
    path = "/elsewhere/" + "x" * 100_000
    report = RewriteReport("fs/read_text_file")
    answer = unmapped_request(READ, "params.path", path, report, (parse_rule("/Users/a=/box"),))
    reply = json.loads(answer.reply)
    assert (reply["id"], reply["error"]["code"]) == (7, -32602)
    data = reply["error"]["data"]
    assert data["mappings"] == ["/Users/a=/box"]
    assert len(data["boxPath"]) < SHOWN_CHARS + 40
    assert len(answer.reply) < 4 * SHOWN_CHARS
    assert report.left == [("params.path", path)]


def test_an_unreadable_request_is_answered_with_id_null() -> None:
    """A line that may be an fs request but cannot be read gets -32600 with id null."""
    answer = unreadable_request(strictjson.JsonRefused("duplicate key"))
    reply = json.loads(answer.reply)
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert "duplicate key" in reply["error"]["data"]["detail"]


def test_too_many_pending_requests_are_refused_with_their_id() -> None:
    """Past the bound of pending session/list requests, the next one is refused by id."""
    refused = too_many_pending(strictjson.Number("1E2"), "session/list", 64)
    assert b'"id":1E2' in refused.reply
    assert "64 session/list requests" in refused.reason


@pytest.mark.parametrize(
    ("value", "key"),
    [("a", ("s", "a")), (strictjson.Number("1E2"), ("n", 100)), (None, None), (True, None)],
)
def test_ids_are_keyed_by_value(value: object, key: object) -> None:
    """String ids as they are, numbers by value; anything else is not tracked."""
    assert id_key(value) == key


@pytest.mark.parametrize(
    ("value", "key"),
    [
        (1, ("n", Decimal(1))),
        ("1", ("s", "1")),
        (strictjson.Number("1E2"), ("n", Decimal(100))),
        (True, None),
        (None, None),
        ([1], None),
    ],
)
def test_id_keys(value: object, key: tuple[str, object] | None) -> None:
    """Numbers and strings are ids of their own kinds, a number by its value; nothing else
    is an id."""
    assert id_key(value) == key
