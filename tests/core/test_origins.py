"""Tests for relay.core.origins: listen addresses, origin patterns, the Origin check, hosts."""

from __future__ import annotations

import pytest

from relay.core.origins import (
    bracketed,
    check_origin_pattern,
    is_loopback,
    origin_allowed,
    parse_listen,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("localhost:0", ("localhost", 0)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
        ("relay.internal.example:443", ("relay.internal.example", 443)),
        ("[::1]:8765", ("::1", 8765)),
        ("[::]:80", ("::", 80)),
        ("[0:0:0:0:0:0:0:1]:1", ("::1", 1)),
    ],
)
def test_listen_forms(text: str, expected: tuple[str, int]) -> None:
    """HOST:PORT parses, IPv6 in brackets comes back without them, port 0 allowed."""
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("8765", "no port"),
        ("[::1]", "no port"),
        ("::1:8765", "IPv6 addresses need brackets"),
        (":8765", "no host"),
        ("host:", "port must be a number"),
        ("host:65536", "port must be a number"),
        ("host:-1", "port must be a number"),
        ("host:http", "port must be a number"),
        ("[nope]:1", "not an IPv6 address"),
        ("ho st:1", "not a host name"),
        ("999.1.1.1:80", "not a host name"),
        ("-bad-:80", "not a host name"),
    ],
)
def test_listen_errors(text: str, problem: str) -> None:
    """Malformed listen addresses are refused with the reason and the expected form."""
    with pytest.raises(ValueError, match="expected HOST:PORT") as info:
        parse_listen(text)
    assert problem in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    "pattern",
    [
        "*",
        "https://app.example.com",
        "http://localhost:3000",
        "https://*.example.com",
        "HTTPS://App.Example.COM:8443",
        "http://127.0.0.1:8080",
        "http://[::1]:3000",
        "chrome-extension://abcdef",
    ],
)
def test_valid_origin_patterns(pattern: str) -> None:
    """Well-formed origins and wildcard patterns are accepted unchanged."""
    assert check_origin_pattern(pattern) == pattern


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("https://app.example.com/", "no path"),
        ("https://app.example.com/x", "no path"),
        ("app.example.com", "scheme://host"),
        ("null", "scheme://host"),
        ("https://", "not a valid host"),
        ("https://a*.example.com", "whole first label"),
        ("https://a.*.example.com", "whole first label"),
        ("https://*", "whole first label"),
        ("https://*.com", "at least two labels"),
        ("https://example.com:0", "port must be"),
        ("https://example.com:99999", "port must be"),
        ("https://user@example.com", "no path, query, user"),
        ("https://[::1", "unclosed ["),
        ("https://exa mple.com", "not a valid host"),
        ("1http://example.com", "scheme://host"),
    ],
)
def test_invalid_origin_patterns(pattern: str, problem: str) -> None:
    """Malformed allow-origin values are refused with the reason and examples."""
    with pytest.raises(ValueError, match=r"write it like https://app\.example\.com") as info:
        check_origin_pattern(pattern)
    assert problem in str(info.value)


WILD = ["https://*.example.com"]


@pytest.mark.parametrize(
    ("origin", "patterns", "allowed"),
    [
        ("https://app.example.com", ["https://app.example.com"], True),
        ("HTTPS://APP.Example.com", ["https://app.example.com"], True),
        ("https://app.example.com", ["HTTPS://APP.EXAMPLE.COM"], True),
        ("http://app.example.com", ["https://app.example.com"], False),
        ("https://other.example.com", ["https://app.example.com"], False),
        ("https://app.example.com:443", ["https://app.example.com"], True),
        ("https://app.example.com", ["https://app.example.com:443"], True),
        ("http://app.example.com:80", ["http://app.example.com"], True),
        ("https://app.example.com:8443", ["https://app.example.com"], False),
        ("https://app.example.com", ["https://app.example.com:8443"], False),
        ("http://localhost:3000", ["http://localhost:3000"], True),
        ("http://localhost:3001", ["http://localhost:3000"], False),
        ("https://a.example.com", WILD, True),
        ("https://a.b.example.com", WILD, True),
        ("https://example.com", WILD, False),
        ("https://evil-example.com", WILD, False),
        ("https://a.example.com.evil.net", WILD, False),
        ("https://aexample.com", WILD, False),
        ("http://a.example.com", WILD, False),
        ("https://a.example.com:444", WILD, False),
        ("https://*.example.com", WILD, False),
        ("https://app.example.com", ["*"], True),
        ("null", ["*"], True),
        ("null", ["https://app.example.com"], False),
        ("https://app.example.com/", ["https://app.example.com"], False),
        ("", ["https://app.example.com"], False),
        ("https://b.example.org", ["https://a.example.org", "https://b.example.org"], True),
        ("http://localhost:3000", [], True),
        ("http://LOCALHOST", [], True),
        ("https://127.0.0.1:8443", [], True),
        ("http://127.9.9.9", [], True),
        ("http://[::1]:5173", [], True),
        ("http://localhost.evil.net", [], False),
        ("http://10.0.0.1", [], False),
        ("https://app.example.com", [], False),
        ("null", [], False),
        ("http://localhost:3000", ["https://app.example.com"], False),
    ],
)
def test_origin_allowed(origin: str, patterns: list[str], allowed: bool) -> None:
    """Origins match exactly or by a leading '*' label; with no patterns only loopback."""
    assert origin_allowed(origin, patterns) is allowed


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("[::1]", True),
        ("10.0.0.1", False),
        ("localhost.evil.net", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, expected: bool) -> None:
    """localhost, 127.0.0.0/8 and ::1 (bracketed or not) are loopback; nothing else is."""
    assert is_loopback(host) is expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [("127.0.0.1", "127.0.0.1"), ("relay.example", "relay.example"), ("::1", "[::1]")],
)
def test_bracketed(host: str, expected: str) -> None:
    """An IPv6 host is written in brackets before :PORT; other hosts as they are."""
    assert bracketed(host) == expected
