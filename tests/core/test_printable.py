"""relay.core.printable: text from elsewhere made safe for a terminal."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.printable import escaped


@pytest.mark.parametrize(
    ("text", "keep", "shown"),
    [
        ("plain text, é ✓", "", "plain text, é ✓"),
        ("\x1b]0;owned\x07title", "", "\\x1b]0;owned\\x07title"),
        ("a\tb\nc\r", "", "a\\x09b\\x0ac\\x0d"),
        ("a\tb\nc\r", "\n", "a\\x09b\nc\\x0d"),
        ("a\tb\nc", "\n\t", "a\tb\nc"),
        ("\u009b2J \u202eevil \u2028 \u200b", "", "\\x9b2J \\u202eevil \\u2028 \\u200b"),
        ("\x7f\x00", "", "\\x7f\\x00"),
    ],
)
def test_control_characters_become_escapes(text: str, keep: str, shown: str) -> None:
    """Control, format and separator characters are written as escapes, but those kept."""
    assert escaped(text, keep=keep) == shown


@given(st.text())
def test_nothing_a_terminal_acts_on_is_left(text: str) -> None:
    """Whatever the text, what is left is printable (the escapes are plain characters)."""
    categories = {unicodedata.category(c) for c in escaped(text)}
    assert categories.isdisjoint({"Cc", "Cf", "Zl", "Zp"})
