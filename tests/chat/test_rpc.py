"""The chat client's JSON-RPC lines, and an agent's errors in words."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.chat.rpc import error_line, error_text, line_of
from relay.core import strictjson


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ({"code": -32603, "message": "Internal error", "data": {"details": "untrusted folder"}},
         "Internal error (-32603): untrusted folder"),
        ({"code": -32000, "message": "Auth", "data": "log in first"},
         "Auth (-32000): log in first"),
        ({"code": -1, "message": "x", "data": {"message": "why"}}, "x (-1): why"),
        ({"code": 7, "message": 3, "data": [1]}, "error (7)"),
        ("not an object", "an error"),
        ({"code": -1, "message": "a\nb", "data": {"details": "c\u202ed"}},
         "a\\x0ab (-1): c\\u202ed"),
    ],
)  # fmt: skip
def test_an_agents_error_in_words_says_its_reason(error: Any, words: str) -> None:
    """Its message and code, then the reason its data gives, each made one safe line."""
    assert error_text(error) == words


def test_an_error_line_answers_the_request_by_its_id_as_sent() -> None:
    """A number keeps the agent's spelling; one line, no raw newline."""
    request_id = strictjson.loads(b"1E2")
    line = error_line(request_id, -32601, "the chat does not serve fs/read_text_file")
    assert line.startswith(b'{"jsonrpc":"2.0","id":1E2,')
    assert b"\n" not in line
    assert json.loads(line_of({"a": "b\nc"})) == {"a": "b\nc"}
