"""The crossings table's field paths: parsed, and walked within a limit."""

from __future__ import annotations

import pytest

from relay.acp.fieldpaths import TooManyPlaces, parse_field, walk


def test_bad_field_spellings_are_refused() -> None:
    """A row's field is checked when the table is read: a typo cannot pass unnoticed."""
    with pytest.raises(ValueError, match="bad field"):
        parse_field("params.locations[ ].path")


def test_a_walk_past_its_limit_is_refused_before_it_is_made() -> None:
    """A walk that would find over ``limit`` places raises; at the limit it finds them all."""
    steps = parse_field("locations[].path")
    message = {"locations": [{"path": str(i)} for i in range(10)]}
    assert len(list(walk(message, steps, limit=10))) == 10
    with pytest.raises(TooManyPlaces):
        walk(message, steps, limit=9)
