"""Tests for relay.config.dialoptions: the dialing flags' values checked, from tables."""

from __future__ import annotations

import pytest

from relay.config.dialoptions import command_words, header, headers, relay_url
from relay.config.errors import UsageError

SECRET = "s3cret-value"


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("wss://relay.example.com/acp", "wss://relay.example.com/acp"),
        ("ws://127.0.0.1:8080/acp", "ws://127.0.0.1:8080/acp"),
        (f"wss://h/acp?ticket={SECRET}&x=1", "wss://h/acp?x=1"),
    ],
)
def test_a_relays_url_is_taken_without_its_ticket(text: str, url: str) -> None:
    """A ws:// or wss:// URL with a host is the relay's, its ticket taken out."""
    assert relay_url(text) == url


@pytest.mark.parametrize(
    "text",
    [
        f"https://h/acp?ticket={SECRET}",
        "ws:///acp",
        "ws://h:0/acp",
        "ws://h:port/acp",
        "relay.example.com/acp",
    ],
)
def test_anything_else_is_refused_without_echoing_a_ticket(text: str) -> None:
    """Another scheme, no host, port 0 or not a number: refused, saying what a URL is like,
    and a ticket in it never echoed."""
    with pytest.raises(UsageError, match="expected a ws:// or wss:// URL") as refused:
        relay_url(text)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("X-Proxy: abc", ("X-Proxy", "abc")),
        (" X-Proxy :abc ", ("X-Proxy", "abc")),
        ("X-Empty:", ("X-Empty", "")),
        ("X-Colons: a:b", ("X-Colons", "a:b")),
    ],
)
def test_a_header_is_a_name_and_a_value(text: str, pair: tuple[str, str]) -> None:
    """``Name: value``, trimmed; the value may hold colons."""
    assert header(text) == pair


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("X-No-Colon", "expects 'Name: value'"),
        (f"Bearer {SECRET}", "expects 'Name: value'"),
        (SECRET, "expects 'Name: value'"),
        (f": {SECRET}", "expects 'Name: value'"),
        (f"Bad Name: {SECRET}", "expects 'Name: value'"),
        (f"X-Token: {SECRET}\r\nInjected: 1", "X-Token: the value has a line break or NUL"),
        (f"X-Token: {SECRET}\0", "X-Token: the value has a line break or NUL"),
    ],
)
def test_a_bad_header_is_refused_without_echoing_its_value(text: str, why: str) -> None:
    """No colon, no name, a name with characters a header's may not have, a line break or
    NUL in the value: refused, the value (maybe a credential) never echoed."""
    with pytest.raises(UsageError, match=why) as refused:
        header(text)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize(
    ("ticket_in", "refused"),
    [("header", True), ("query", False)],
)
def test_an_authorization_header_goes_only_with_the_ticket_in_the_query(
    ticket_in: str, refused: bool
) -> None:
    """--header Authorization would replace a ticket sent as Authorization: Bearer."""
    texts = ["X-Proxy: a", f"authorization: Basic {SECRET}"]
    if not refused:
        assert headers(texts, ticket_in) == (
            ("X-Proxy", "a"),
            ("authorization", f"Basic {SECRET}"),
        )
        return
    with pytest.raises(UsageError, match="use --ticket-in query") as refusal:
        headers(texts, ticket_in)
    assert SECRET not in str(refusal.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("acp-relay ticket", ("acp-relay", "ticket")),
        ("mint --for 'a b' \"c d\"", ("mint", "--for", "a b", "c d")),
        ("cat ~/ticket; rm -rf x", ("cat", "~/ticket;", "rm", "-rf", "x")),
    ],
)
def test_a_ticket_command_is_split_like_a_shell_but_is_no_shell(
    text: str, words: tuple[str, ...]
) -> None:
    """Quotes group words as a shell's would; nothing else of a shell applies."""
    assert command_words(text) == words


@pytest.mark.parametrize(
    ("text", "why"),
    [("", "--ticket-command is empty"), ("  ", "--ticket-command is empty"),
     ("mint 'unclosed", "cannot split --ticket-command like a shell")],
)  # fmt: skip
def test_an_empty_or_unsplittable_ticket_command_is_refused(text: str, why: str) -> None:
    """Nothing to run, or a quote left open: refused, saying so."""
    with pytest.raises(UsageError, match=why):
        command_words(text)
