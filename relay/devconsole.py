"""The dev console served at ``/`` under ``serve --dev``: one HTML page, its script and style.

The files live in ``relay/console/`` (package data, no build step, no external assets).
:func:`load` reads them once at start-up; the rest is pure. Each load of the page embeds
a fresh single-use ticket (minted by the caller with the relay's first secret) for its
first socket; the page resumes through ``/acp-relay-resume.js`` and gets a fresh ticket
for each later socket from ``GET /console-ticket`` (same origin only: no CORS headers).
The page and its tickets are only served to a ``Host`` whose origin the relay's origin
policy would let connect: a page it would refuse gets no ticket, which also keeps
DNS-rebinding pages from reading one.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

from websockets.datastructures import Headers
from websockets.http11 import Response

from relay.httpedge import text_response
from relay.origins import origin_allowed

INDEX = "/"
TICKET_PATH = "/console-ticket"  # a fresh ticket for each socket after the page's first
NOT_SERVED = "the dev console is only served to an origin allowed to connect\n"
NOT_SAME_ORIGIN = "a console ticket is only for the console's own page\n"
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
    """Only the page's own script and style, and sockets (and fetches) to the relay itself."""
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src 'self' ws://{host} wss://{host}; base-uri 'none'; form-action 'none'; "
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


def ticket_refusal(request: Headers, allow_origins: Sequence[str]) -> str | None:
    """Why ``GET /console-ticket`` is refused (a 403's text), or None for the page's own fetch.

    The Host must be one the console is served to; a browser's ``Sec-Fetch-Site`` and
    ``Origin``, when sent, must say the request comes from the console's own origin.
    """
    host = page_host(request.get("Host"), allow_origins)
    if host is None:
        return NOT_SERVED
    site = request.get("Sec-Fetch-Site")
    origin = request.get("Origin")
    if site not in (None, "same-origin") or origin not in (None, f"http://{host}"):
        return NOT_SAME_ORIGIN
    return None


def ticket_response(
    request: Headers, allow_origins: Sequence[str], mint: Callable[[], str]
) -> Response:
    """A fresh ticket for the console's next socket (``no-store``, no CORS), or a 403."""
    refusal = ticket_refusal(request, allow_origins)
    if refusal is not None:
        return text_response(403, refusal)
    return text_response(200, mint(), headers(request["Host"]))
