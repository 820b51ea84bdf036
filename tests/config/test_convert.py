"""Tests for relay.config.convert: each converter's typed value, and the ValueError it raises."""

from __future__ import annotations

import pytest

from relay.acp.rewrite import Files
from relay.config import convert
from relay.config.convert import parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1),
        (" 1024 ", 1024),
        (4096, 4096),
        ("1KiB", 1024),
        ("16MiB", 16 * 1024**2),
        ("16 mib", 16 * 1024**2),
        ("2GiB", 2 * 1024**3),
        ("67108864", 67108864),
    ],
)
def test_sizes(text: str | int, expected: int) -> None:
    """Sizes are plain byte counts or whole numbers with a KiB/MiB/GiB suffix."""
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "MiB", "1.5MiB", "16MB", "16K", "-1", "0", "0KiB", "ten", True]
)
def test_bad_sizes(text: str | int) -> None:
    """Sizes that are not positive whole KiB/MiB/GiB amounts are refused."""
    with pytest.raises(ValueError, match=r"16MiB|at least 1 byte"):
        parse_size(text)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon", 0, True, [1]])
def test_positive_seconds_refuses_all_but_positive_finite_numbers(value: object) -> None:
    """Zero, negatives, nan, inf, words and non-numbers all get the same expectation."""
    with pytest.raises(ValueError, match=r"^expected seconds greater than 0") as info:
        convert.positive_seconds(value)
    assert "finite number of seconds" in str(info.value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(("value", "expected"), [("0.25", 0.25), (60, 60.0), ("1e3", 1000.0)])
def test_positive_seconds(value: object, expected: float) -> None:
    """Positive finite numbers, as text or TOML numbers, are seconds."""
    assert convert.positive_seconds(value) == expected


@pytest.mark.parametrize(
    ("value", "problem"), [("-1", "0 or more"), ("x", "number of seconds"), ("inf", "finite")]
)
def test_seconds_refuses_negatives_and_non_numbers(value: object, problem: str) -> None:
    """seconds allows 0 but not less, nor anything that is not a finite number."""
    assert convert.seconds("0") == 0.0
    with pytest.raises(ValueError, match=problem):
        convert.seconds(value)


def test_size_at_least() -> None:
    """A bounded size converter takes sizes from its minimum up and names it when refusing."""
    at_least_1k = convert.size_at_least(1024, "1KiB")
    assert at_least_1k("1KiB") == 1024
    with pytest.raises(ValueError, match=r"at least 1024 bytes \(1KiB\)"):
        at_least_1k("1023")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("Yes", True), ("ON", True), (True, True), ("0", False), ("off", False)],
)
def test_boolean(value: object, expected: bool) -> None:
    """1/true/yes/on and 0/false/no/off in any case, or TOML booleans."""
    assert convert.boolean(value) is expected


def test_one_of_lowercases_and_names_the_choices() -> None:
    """A choice matches case-insensitively; a miss lists every choice."""
    header_or_query = convert.one_of("header", "query")
    assert header_or_query("QUERY") == "query"
    with pytest.raises(ValueError, match="expected one of header, query, got 'cookie'"):
        header_or_query("cookie")


@pytest.mark.parametrize(
    ("value", "expected"), [("box", Files.BOX), ("Shared", Files.SHARED), ("PASS", Files.PASS)]
)
def test_member_of_gives_the_member_chosen(value: str, expected: Files) -> None:
    """An enum's choice matches its values case-insensitively and gives the member itself."""
    assert convert.member_of(Files)(value) is expected


def test_member_of_names_every_choice_on_a_miss() -> None:
    """A value that is no member's is refused with the list of values."""
    with pytest.raises(ValueError, match="expected one of box, shared, pass, got 'editor'"):
        convert.member_of(Files)("editor")


@pytest.mark.parametrize(("value", "expected"), [("auto", None), ("JSON", "json")])
def test_log_format_auto_is_none(value: str, expected: str | None) -> None:
    """auto means no format chosen (console on a terminal, else json)."""
    assert convert.log_format(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("my-agent --acp", ("my-agent", "--acp")), (["a b", "c"], ("a b", "c"))],
)
def test_command(value: object, expected: tuple[str, ...]) -> None:
    """A command is split like a shell, or taken as is from a TOML array."""
    assert convert.command(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"), [("A=1", ("A", "1")), ("_X=a=b", ("_X", "a=b")), ("C=", ("C", ""))]
)
def test_env_entry(value: str, expected: tuple[str, str]) -> None:
    """NAME=VALUE splits at the first =; the value may be empty or hold more."""
    assert convert.env_entry(value) == expected


def test_from_text_refuses_other_types() -> None:
    """A string parser wrapped by from_text refuses TOML values that are not strings."""
    upper = convert.from_text(str.upper)
    assert upper("abc") == "ABC"
    with pytest.raises(ValueError, match="expected a string, got 5"):
        upper(5)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), ("0", 0), (3, 3), (" 12 ", 12)])
def test_count(value: object, expected: int) -> None:
    """A count is a whole number, 0 or more, as a TOML integer or a string of digits."""
    assert convert.count(value) == expected


@pytest.mark.parametrize("value", [-1, "-1", 1.5, "1.5", "two", True, None, ""])
def test_count_refuses_all_but_whole_numbers(value: object) -> None:
    """Negative, fractional, boolean and non-numeric counts are refused."""
    with pytest.raises(ValueError, match="whole number"):
        convert.count(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2d", "80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2d"),
        ("80309B37-5C1E-4F0A-9D2B-7E6F5A4B3C2D", "80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2d"),
        (" 80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2d\n", "80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2d"),
    ],
)
def test_connection_id_is_the_whole_id_in_lower_case(value: str, expected: str) -> None:
    """A connection's whole id is taken in any case and given back as the relay spells it."""
    assert convert.connection_id(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "80309b37",  # the 8 characters terminal logs used to show
        "80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2",
        "80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2d0",
        "80309b375c1e4f0a9d2b7e6f5a4b3c2d",
        "{80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2d}",
        "80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2g",
        "c-17",
        "",
        7,
    ],
)
def test_connection_id_refuses_what_cannot_be_one(value: object) -> None:
    """A prefix, a longer or other spelling, another text or a number is refused, saying what
    an id looks like and where the relay shows it."""
    said = (
        "expected a string"
        if not isinstance(value, str)
        else r"is not a connection id: one is 36 characters such as "
        r"6f1c2a7e-0f3b-4f52-9d0e-8f2b3c4d5e6f, .* connection_id"
    )
    with pytest.raises(ValueError, match=said):
        convert.connection_id(value)
