"""relay.acp.showing: ACP values as a person reads them, escaped and bounded; from tables."""

from __future__ import annotations

from typing import Any

import pytest

from relay.acp.showing import (
    MAX_ITEMS,
    blocks_text,
    cut,
    error_text,
    id_text,
    outcome_text,
)
from relay.core import strictjson


@pytest.mark.parametrize(
    ("blocks", "shown"),
    [
        ([{"type": "text", "text": "see "}, {"type": "resource_link", "uri": "file:///a"}],
         "see [resource_link file:///a]"),
        ([{"type": "resource", "resource": {"uri": "file:///b"}}], "[resource file:///b]"),
        ([{"type": "image"}], "[image]"),
        (["not a block"], "[?]"),
        ("not a list", ""),
    ],
)  # fmt: skip
def test_blocks_are_their_text_and_other_blocks_are_named(blocks: Any, shown: str) -> None:
    """Text blocks as they are; links, resources and others by their kind and URI."""
    assert blocks_text(blocks) == shown


def test_long_lists_of_blocks_say_how_many_more() -> None:
    """Past MAX_ITEMS blocks, the rest is counted, not shown."""
    shown = blocks_text([{"type": "text", "text": "x"}] * (MAX_ITEMS + 3))
    assert shown.endswith("[... and 3 more blocks]")


@pytest.mark.parametrize(
    ("result", "shown"),
    [
        ({"outcome": {"outcome": "selected", "optionId": "allow"}}, 'selected "Allow" (allow)'),
        ({"outcome": {"outcome": "selected", "optionId": "other"}}, "selected other"),
        ({"outcome": {"outcome": "cancelled"}}, "cancelled"),
        ({}, "outcome (none)"),
    ],
)
def test_permission_outcomes(result: dict[str, Any], shown: str) -> None:
    """An answer reads as the option selected, by its name when the request gave one."""
    assert outcome_text(result, {"allow": "Allow"}) == shown


def test_errors_read_message_detail_and_code() -> None:
    """A JSON-RPC error: message, data.detail, code."""
    error = {"code": -32601, "message": "Method not found", "data": {"detail": "fs withheld"}}
    assert error_text(error) == "Method not found: fs withheld (-32601)"
    assert error_text("nope") == "(no error object)"


def test_ids_as_spelled() -> None:
    """Ids are shown as the line spelled them."""
    assert id_text(strictjson.Number("1E2")) == "1E2"
    assert id_text("perm-1") == "perm-1"
    assert id_text(None) == "null"


def test_texts_are_escaped_and_cut_saying_how_much_more() -> None:
    """Control characters cannot reach the terminal; a long text says what it left out."""
    assert cut("\x1b]0;pwned\x07hi") == "\\x1b]0;pwned\\x07hi"
    assert cut("a" * 12, 10) == "a" * 10 + "... (2 more characters)"
