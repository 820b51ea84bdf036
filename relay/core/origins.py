"""Hosts, listen addresses and browser origins: ``--listen``, ``--allow-origin``, ``Origin``.

Pure: parses listen addresses and origin patterns, and decides whether a page's
``Origin`` may connect. Used by the configuration (to check the values), by admission
(the 403 for a foreign page) and by the dev console (which only serves a page that
could connect).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

ORIGIN_EXAMPLES = "https://app.example.com, http://localhost:3000, https://*.example.com or *"

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _is_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and label.isascii()
        and label.replace("-", "a").isalnum()
        and not label.startswith("-")
        and not label.endswith("-")
    )


def _is_hostname(host: str) -> bool:
    labels = host.split(".")
    if len(host) > 253 or not all(_is_label(label) for label in labels):
        return False
    if all(label.isdigit() for label in labels):
        return _is_ipv4(host)
    return True


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _ipv6(text: str) -> str:
    try:
        return ipaddress.IPv6Address(text).compressed
    except ValueError:
        raise ValueError(f"{text!r} is not an IPv6 address") from None


def _port(text: str, lowest: int) -> int:
    if not (text.isascii() and text.isdigit()) or not lowest <= int(text) <= 65535:
        raise ValueError(f"port must be a number from {lowest} to 65535, got {text!r}")
    return int(text)


def is_loopback(host: str) -> bool:
    """``localhost``, an address in 127.0.0.0/8, or ``::1`` (bracketed or not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bracketed(host: str) -> str:
    """``host`` as written before ``:PORT``: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


# --- listen addresses


def parse_listen(text: str) -> tuple[str, int]:
    """``(host, port)`` from ``HOST:PORT``; IPv6 hosts in brackets, returned without them."""
    host, sep, port = text.rpartition(":")
    try:
        if not sep or text.endswith("]"):
            raise ValueError("no port")
        return _listen_host(host), _port(port, lowest=0)
    except ValueError as exc:
        raise ValueError(
            f"bad address {text!r}: {exc}; expected HOST:PORT such as 127.0.0.1:8765, "
            "0.0.0.0:8765 or [::1]:8765"
        ) from None


def _listen_host(host: str) -> str:
    if host.startswith("[") and host.endswith("]"):
        return _ipv6(host[1:-1])
    if ":" in host:
        raise ValueError("IPv6 addresses need brackets")
    if not host:
        raise ValueError("no host (for all interfaces use 0.0.0.0 or [::])")
    if not _is_hostname(host):
        raise ValueError(f"{host!r} is not a host name or IP address")
    return host


# --- origins


@dataclass(frozen=True)
class _Origin:
    scheme: str
    host: str
    port: int | None


def _parse_origin(text: str, *, wildcard: bool = False) -> _Origin:
    scheme, sep, rest = text.lower().partition("://")
    if not sep or not _is_scheme(scheme):
        raise ValueError("expected scheme://host[:port]")
    if any(c in rest for c in "/?#@\\"):
        raise ValueError("an origin has no path, query, user or trailing slash")
    host, port = _split_host_port(rest)
    _check_host(host, wildcard=wildcard)
    return _Origin(scheme, host, _DEFAULT_PORTS.get(scheme) if port is None else port)


def _is_scheme(scheme: str) -> bool:
    return (
        scheme[:1].isalpha()
        and scheme.isascii()
        and scheme.replace("+", "a").replace("-", "a").replace(".", "a").isalnum()
    )


def _split_host_port(rest: str) -> tuple[str, int | None]:
    if rest.startswith("["):
        inner, bracket, after = rest[1:].partition("]")
        if not bracket:
            raise ValueError("unclosed [ in IPv6 host")
        host = f"[{_ipv6(inner)}]"
    else:
        host, colon, port = rest.partition(":")
        after = colon + port
    if not after:
        return host, None
    if not after.startswith(":"):
        raise ValueError("unexpected text after the host")
    return host, _port(after[1:], lowest=1)


def _check_host(host: str, *, wildcard: bool) -> None:
    if host.startswith("["):
        return
    starred = wildcard and host.startswith("*.")
    name = host[2:] if starred else host
    if starred and "." not in name:
        raise ValueError("'*.' must be followed by at least two labels, e.g. *.example.com")
    if "*" in name:
        raise ValueError("'*' may only be the whole first label, e.g. https://*.example.com")
    if not _is_hostname(name):
        raise ValueError(f"{host!r} is not a valid host")


def check_origin_pattern(text: str) -> str:
    """Return an ``--allow-origin`` value unchanged if well-formed; ValueError otherwise."""
    if text == "*":
        return text
    try:
        _parse_origin(text, wildcard=True)
    except ValueError as exc:
        raise ValueError(
            f"invalid origin {text!r}: {exc}; write it like {ORIGIN_EXAMPLES}"
        ) from None
    return text


def origin_allowed(origin: str, patterns: Sequence[str]) -> bool:
    """Whether a browser ``Origin`` header value may connect.

    ``"*"`` among the patterns admits anything. Otherwise scheme and host compare
    case-insensitively, ports exactly (80/443 implied for http/https), and
    ``*.example.com`` matches one or more labels before ``example.com`` but not
    ``example.com`` itself. With no patterns only loopback pages (localhost,
    127.0.0.0/8, [::1]) are admitted. Requests without an Origin header are
    the caller's business (non-browser clients: always allowed).
    """
    if "*" in patterns:
        return True
    try:
        got = _parse_origin(origin)
    except ValueError:
        return False
    if not patterns:
        return is_loopback(got.host)
    return any(_origin_matches(got, pattern) for pattern in patterns)


def _origin_matches(got: _Origin, pattern: str) -> bool:
    try:
        want = _parse_origin(pattern, wildcard=True)
    except ValueError:
        return False
    if (want.scheme, want.port) != (got.scheme, got.port):
        return False
    if want.host.startswith("*."):
        return got.host.endswith(want.host[1:])
    return got.host == want.host
