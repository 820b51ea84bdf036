"""Tests for relay.core.redaction: query values, bearer tokens and a process's secrets removed
from text; its tickets bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.redaction import MAX_TICKETS, REDACTED, Redactor

TICKET = "eyJzdWIiOiJhbGljZSJ9.ZXhhbXBsZQ.c2lnbmF0dXJl"
SECRET = "hunter2-relay-secret"


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
    assert Redactor().redact_text(text) == (text if expected is None else expected)


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
    redactor = Redactor()
    redactor.add_secret(SECRET)
    assert redactor.redact_text(text) == (text if expected is None else expected)


def test_short_values_are_not_registered() -> None:
    """A value under 4 characters is not registered, so common words are never blanked."""
    redactor = Redactor()
    redactor.add_secret("abc")
    redactor.add_ticket("abc")
    assert redactor.redact_text("abc abcd") == "abc abcd"


def test_nested_values_are_redacted_and_others_kept() -> None:
    """Strings inside dicts, lists and tuples are redacted; numbers and None stay as they are."""
    value = {"a": [f"/acp?ticket={TICKET}", 3, None], "b": (f"Bearer {TICKET}",)}
    expected = {"a": [f"/acp?ticket={REDACTED}", 3, None], "b": [f"Bearer {REDACTED}"]}
    assert Redactor().redact_value(value) == expected


# -- the bound on tickets --------------------------------------------------------------


def tickets(count: int) -> list[str]:
    return [f"ticket-{number:04d}-{TICKET}" for number in range(count)]


def test_the_most_recent_tickets_are_kept_the_older_ones_forgotten() -> None:
    """Past MAX_TICKETS, the oldest ticket goes first; the last MAX_TICKETS stay redacted."""
    redactor = Redactor()
    read = tickets(MAX_TICKETS + 3)
    for ticket in read:
        redactor.add_ticket(ticket)
    assert len(redactor) == MAX_TICKETS
    assert [redactor.redact_text(t) == REDACTED for t in read] == [False] * 3 + [True] * MAX_TICKETS


def test_the_processs_own_secrets_stay_whatever_number_of_tickets_comes() -> None:
    """A secret of the process's own is never pushed out by tickets, nor counted among them."""
    redactor = Redactor()
    redactor.add_secret(SECRET)
    for ticket in tickets(10 * MAX_TICKETS):
        redactor.add_ticket(ticket)
    redactor.add_ticket(SECRET)
    assert len(redactor) == 1 + MAX_TICKETS
    assert redactor.redact_text(f"secret {SECRET}") == f"secret {REDACTED}"


def test_a_ticket_read_again_is_recent_again() -> None:
    """A ticket read again (a --ticket-file that did not change) moves to the recent end, once."""
    redactor = Redactor(max_tickets=2)
    first, second, third = tickets(3)
    for ticket in (first, second, first, third):
        redactor.add_ticket(ticket)
    assert len(redactor) == 2
    assert redactor.redact_text(f"{first} {second} {third}") == f"{REDACTED} {second} {REDACTED}"


def test_each_redactor_holds_its_own_secrets() -> None:
    """Two redactors (two relays, two connects) share nothing."""
    one, other = Redactor(), Redactor()
    one.add_secret(SECRET)
    one.add_ticket(TICKET)
    assert other.redact_text(f"{SECRET} {TICKET}") == f"{SECRET} {TICKET}"


@given(
    st.lists(st.integers(min_value=0, max_value=30).map(lambda n: f"ticket-{n:02d}"), max_size=40),
    st.integers(min_value=1, max_value=5),
)
def test_a_redactor_scans_for_at_most_its_bound_of_tickets(read: list[str], bound: int) -> None:
    """However many tickets come, a line is scanned for at most ``max_tickets`` of them, the
    last one read always among them."""
    redactor = Redactor(max_tickets=bound)
    for ticket in read:
        redactor.add_ticket(ticket)
    assert len(redactor) == min(bound, len(set(read)))
    if read:
        assert redactor.redact_text(read[-1]) == REDACTED
