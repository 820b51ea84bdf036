"""Tests for relay.core.redaction: query values, bearer tokens and registered secrets removed
from text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relay.core import redaction as redact
from relay.core.redaction import REDACTED, redact_text, redact_value, register_secret

TICKET = "eyJzdWIiOiJhbGljZSJ9.ZXhhbXBsZQ.c2lnbmF0dXJl"
SECRET = "hunter2-relay-secret"


@pytest.fixture(autouse=True)
def restore_secrets() -> Iterator[None]:
    """Put back the registered secrets after each test."""
    secrets = set(redact._secrets)
    yield
    redact._secrets.clear()
    redact._secrets.update(secrets)


# -- redact_text -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"GET /acp?ticket={TICKET} HTTP/1.1", f"GET /acp?ticket={REDACTED} HTTP/1.1"),
        (f"/acp?x=1&ticket={TICKET}", f"/acp?x={REDACTED}&ticket={REDACTED}"),
        ("ws://h:1/acp?anything=value&b=", f"ws://h:1/acp?anything={REDACTED}&b={REDACTED}"),
        (f"/acp?ticket={TICKET}#frag", f"/acp?ticket={REDACTED}#frag"),
        (f'{{"url": "/acp?ticket={TICKET}"}}', f'{{"url": "/acp?ticket={REDACTED}"}}'),
        (f"Authorization: Bearer {TICKET}", f"Authorization: Bearer {REDACTED}"),
        (f"authorization: bearer   {TICKET}", f"authorization: bearer   {REDACTED}"),
        ("token=x Bearer a+b/c=", f"token=x Bearer {REDACTED}"),
        ("no secrets here: a=b, 1 + 1 = 2, what? nothing", None),
        ("path /acp without a query", None),
        ("", None),
    ],
)
def test_redact_text(text: str, expected: str | None) -> None:
    """Query values and bearer tokens are replaced; text without them is unchanged."""
    assert redact_text(text) == (text if expected is None else expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SECRET, REDACTED),
        (f"the secret is {SECRET}!", f"the secret is {REDACTED}!"),
        (f"x{SECRET}x{SECRET}", f"x{REDACTED}x{REDACTED}"),
        ("hunter2 alone is not the secret", None),
    ],
)
def test_registered_secret_removed_anywhere(text: str, expected: str | None) -> None:
    """A registered secret is removed wherever it appears, even inside a word."""
    register_secret(SECRET)
    assert redact_text(text) == (text if expected is None else expected)


def test_short_values_are_not_registered() -> None:
    """A value under 4 characters is not registered, so common words are never blanked."""
    register_secret("abc")
    assert redact_text("abc abcd") == "abc abcd"


def test_nested_values_are_redacted_and_others_kept() -> None:
    """Strings inside dicts, lists and tuples are redacted; numbers and None stay as they are."""
    value = {"a": [f"/acp?ticket={TICKET}", 3, None], "b": (f"Bearer {TICKET}",)}
    expected = {"a": [f"/acp?ticket={REDACTED}", 3, None], "b": [f"Bearer {REDACTED}"]}
    assert redact_value(value) == expected
