import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.chat.text import (
    cut,
    fit_bytes,
    prefix_within,
    safe,
    safe_line,
    split_bytes,
    text_size,
    to_html,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain words", "plain words"),
        ("two\nlines\tand a tab", "two\nlines\tand a tab"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("right\u202eleft", "right\\u202eleft"),
        ("crlf\r\nline", "crlf\nline"),
        ("bell\x07", "bell\\x07"),
    ],
)
def test_safe_escapes_control_characters_but_newlines_and_tabs(text: str, expected: str) -> None:
    """Control and format characters become escapes; newlines and tabs stay."""
    assert safe(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<b>bold</b> & co", "&lt;b&gt;bold&lt;/b&gt; &amp; co"),
        ("a\nb", "a<br>b"),
        ('<img src=x onerror="alert(1)">', '&lt;img src=x onerror="alert(1)"&gt;'),
    ],
)
def test_html_is_escaped_text(text: str, expected: str) -> None:
    """Text put into HTML is escaped: the agent's markup shows as text."""
    assert to_html(text) == expected


def test_a_line_is_one_line_and_cut_with_a_note() -> None:
    """A title keeps to one line and says how much was cut."""
    assert safe_line("a\nb") == "a\\x0ab"
    assert cut("x" * 10, 4) == "xxxx… [cut: 6 more characters]"


@given(st.text(max_size=300), st.integers(min_value=60, max_value=400))
def test_fit_bytes_keeps_within_the_budget_and_a_prefix(text: str, budget: int) -> None:
    """Whatever the text, the result fits the budget in JSON and starts with the text's start."""
    fitted = fit_bytes(text, budget)
    assert text_size(fitted) <= budget
    if fitted != text:
        assert text.startswith(fitted.split("… [cut:")[0])


@given(st.text(max_size=500), st.integers(min_value=12, max_value=200))
def test_split_bytes_loses_nothing_and_keeps_each_piece_within_budget(
    text: str, budget: int
) -> None:
    """The pieces, joined, are the text; each fits the budget."""
    pieces = split_bytes(text, budget)
    assert "".join(pieces) == text
    assert all(text_size(piece) <= budget for piece in pieces)


def test_text_size_counts_json_escapes() -> None:
    """Non-ASCII and quotes are measured as the JSON the library sends (ASCII escapes)."""
    assert text_size('é"') == len(json.dumps('é"')) - 2 == 8


@given(st.text(max_size=300), st.integers(min_value=0, max_value=400))
def test_the_longest_prefix_within_a_budget_is_found(text: str, budget: int) -> None:
    """prefix_within gives a prefix within the budget that one more character would break."""
    found = prefix_within(text, budget)
    assert text.startswith(found)
    assert text_size(found) <= budget
    if len(found) < len(text):
        assert text_size(text[: len(found) + 1]) > budget
