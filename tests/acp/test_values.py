"""An agent's JSON values read leniently: texts, numbers as spelled, lists."""

from __future__ import annotations

from typing import Any

import pytest

from relay.acp.values import list_of, text_of
from relay.core import strictjson


@pytest.mark.parametrize(
    ("value", "text"),
    [("a", "a"), ("", ""), (None, ""), (3, ""), (["a"], ""), ({"a": 1}, ""), (True, "")],
)
def test_text_of_takes_strings_only(value: Any, text: str) -> None:
    """A string is itself; anything else that is not a JSON number is empty."""
    assert text_of(value) == text


def test_text_of_keeps_a_numbers_spelling() -> None:
    """A number read by strictjson keeps the agent's digits (1.50, not 1.5)."""
    number = strictjson.loads(b'{"n": 1.50}')["n"]
    assert text_of(number) == "1.50"


@pytest.mark.parametrize(
    ("value", "items"), [([1, "a"], [1, "a"]), ("ab", []), (None, []), ({}, [])]
)
def test_list_of_takes_lists_only(value: Any, items: list[Any]) -> None:
    """A list is itself; a string, an object or null is an empty list."""
    assert list_of(value) == items
