"""The dev console served at ``/`` under ``serve --dev``: one HTML page, its script and style.

The files live in ``relay/console/`` (package data, no build step, no external assets).
:func:`load` reads them once at start-up; the rest is pure. Each load of the page embeds
a fresh single-use ticket (minted by the caller with the relay's first secret), so the
page can open exactly one socket. The page is only served to a ``Host`` whose origin
the relay's origin policy would let connect: a page it would refuse gets no ticket,
which also keeps DNS-rebinding pages from reading one.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from relay.origins import origin_allowed

INDEX = "/"
FILES = {
    INDEX: ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
PATHS = frozenset(FILES)


@dataclass(frozen=True)
class Assets:
    """The console's files, by URL path: (bytes, content type)."""

    files: dict[str, tuple[bytes, str]]


def load() -> Assets:
    """Read the console's files from the installed package."""
    folder = resources.files("relay") / "console"
    return Assets(
        {path: ((folder / name).read_bytes(), kind) for path, (name, kind) in FILES.items()}
    )


def page_host(host_header: str | None, allow_origins: Sequence[str]) -> str | None:
    """The ``Host`` the page was asked for, if a page of that origin may connect; else None.

    The page's origin is ``http://`` + Host, and that is what its WebSocket will send
    as ``Origin``. Only a plain ``host[:port]`` is accepted (it goes into a header).
    """
    if not host_header or any(c.isspace() or c in "/\\?#@;,'\"" for c in host_header):
        return None
    return host_header if origin_allowed(f"http://{host_header}", allow_origins) else None


def content_security_policy(host: str) -> str:
    """Only the page's own script and style, and sockets to the relay itself."""
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src ws://{host} wss://{host}; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


def headers(host: str) -> tuple[tuple[str, str], ...]:
    """Headers for every console response (besides type, length and ``no-store``)."""
    return (
        ("Content-Security-Policy", content_security_policy(host)),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
    )


def render_index(template: bytes, *, ticket: str, path: str, cwd: str, version: str) -> bytes:
    """The page with its ticket, the endpoint path, a default cwd and the version filled in."""
    text = template.decode()
    for name, value in (("ticket", ticket), ("path", path), ("cwd", cwd), ("version", version)):
        text = text.replace("{{" + name + "}}", html.escape(value, quote=True))
    return text.encode()
