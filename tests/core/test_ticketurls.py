"""Tests for relay.core.ticketurls: tickets added to, found in and removed from URLs."""

from __future__ import annotations

import pytest

from relay.core.ticketurls import ticket_in, with_ticket, without_ticket


@pytest.mark.parametrize(
    ("url", "clean"),
    [
        ("wss://h/acp?ticket=T1&x=1", "wss://h/acp?x=1"),
        ("wss://h/acp?ticket=T1", "wss://h/acp"),
        ("ws://h:1/acp", "ws://h:1/acp"),
    ],
)
def test_urls_lose_their_ticket(url: str, clean: str) -> None:
    """The URL shown and logged never carries the ticket; other parameters stay."""
    assert without_ticket(url) == clean


@pytest.mark.parametrize(
    ("url", "ticket"),
    [
        ("wss://h/acp?x=1&ticket=T1", "T1"),
        ("wss://h/acp?ticket=", None),
        ("wss://h/acp", None),
        ("/acp?ticket=&ticket=T2", "T2"),
        ("/acp?ticket=T1&ticket=T2", "T1"),
        ("/acp?&&==&ticket", None),
    ],
)
def test_ticket_is_found_in_the_query(url: str, ticket: str | None) -> None:
    """The first non-empty ticket parameter's value is found, in a URL or a request's path;
    an empty or missing one is None."""
    assert ticket_in(url) == ticket


@pytest.mark.parametrize(
    ("url", "ticket", "expected"),
    [
        ("ws://h/acp", "a.b-c_d", "ws://h/acp?ticket=a.b-c_d"),
        ("ws://h/acp?x=1", "T", "ws://h/acp?x=1&ticket=T"),
        ("ws://h/acp", "a+b/c=&d", "ws://h/acp?ticket=a%2Bb%2Fc%3D%26d"),
    ],
)
def test_ticket_is_added_quoted(url: str, ticket: str, expected: str) -> None:
    """A ticket joins the query string percent-quoted, so any ticket comes back intact."""
    assert with_ticket(url, ticket) == expected
    assert ticket_in(with_ticket(url, ticket)) == ticket
