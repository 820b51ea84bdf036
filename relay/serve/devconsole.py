"""The dev console served at ``/`` under ``serve --dev``: one HTML page, its script and style.

The files live in ``relay/serve/console/`` (package data, no build step, no external assets).
:func:`load` reads them once at start-up; the rest is pure. Each load of the page embeds
a fresh single-use ticket (minted by the caller with the relay's first secret) for its
first socket; the page resumes through ``/acp-relay-resume.js`` and gets a fresh ticket
for each later socket from ``GET /console-ticket`` (same origin only: no CORS headers).

Two checks guard the page and its tickets. The ``Host`` must be one whose origin the
relay's origin policy would let connect: a page it would refuse gets no ticket, which
also keeps DNS-rebinding pages from reading one. And the request must carry the run's
console token (``?token=`` on the page's address, as ``serve --dev`` prints it; the
``Acp-Console-Token`` header on ``/console-ticket``), compared in constant time, so that
another user or program on the machine cannot fetch tickets from the console.
"""

from __future__ import annotations

import base64
import hmac
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from urllib.parse import parse_qsl, urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Response

from relay.config.origins import is_loopback, origin_allowed
from relay.core.upgrade import duplicated
from relay.serve.httpedge import response, text_response

INDEX = "/"
TICKET_PATH = "/console-ticket"  # a fresh ticket for each socket after the page's first
TOKEN_PARAM = "token"  # the page's address: http://HOST:PORT/?token=...
TOKEN_HEADER = "Acp-Console-Token"  # the page's fetches of /console-ticket
TOKEN_BYTES = 24
NOT_SAME_ORIGIN = "a console ticket is only for the console's own page\n"
NO_TOKEN = (
    "the dev console's address carries a token: open the URL `acp-relay serve --dev` "
    "printed on its standard output (http://HOST:PORT/?token=...)\n"
)
FILES = {
    INDEX: ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
PATHS = frozenset({*FILES, TICKET_PATH})
# Headers the console reads that must come once (besides the upgrade's own, checked first).
CONSOLE_SINGLE_HEADERS = ("Host", "Origin", TOKEN_HEADER, "Sec-Fetch-Site")
_NOT_IN_HOST = "/\\?#@;,'\"<>"


@dataclass(frozen=True)
class Assets:
    """The console's files, by URL path: (bytes, content type)."""

    files: dict[str, tuple[bytes, str]]


@dataclass(frozen=True)
class Console:
    """What the console needs of the relay: its files, the run's token, where it connects."""

    assets: Assets
    token: str
    allow_origins: Sequence[str]
    endpoint: str  # the ACP endpoint's path, e.g. /acp
    workspace: str  # the page's default cwd
    version: str


@dataclass(frozen=True)
class Answer:
    """The console's answer to one request, and why it was refused (for the log), if it was."""

    response: Response
    refused: str | None = None


def load() -> Assets:
    """Read the console's files from the installed package."""
    folder = resources.files("relay.serve") / "console"
    return Assets(
        {path: ((folder / name).read_bytes(), kind) for path, (name, kind) in FILES.items()}
    )


def new_token(random_bytes: bytes) -> str:
    """The run's console token from caller-provided randomness (``os.urandom(24)``)."""
    return base64.urlsafe_b64encode(random_bytes).rstrip(b"=").decode("ascii")


def console_url(base: str, token: str) -> str:
    """The console's address as the banner prints it: ``http://HOST:PORT/?token=...``."""
    return f"{base.rstrip('/')}/?{TOKEN_PARAM}={token}"


def token_matches(given: str | None, token: str) -> bool:
    """Whether ``given`` is the run's token (constant time; an empty token matches nothing)."""
    if not given or not token:
        return False
    return hmac.compare_digest(given.encode(), token.encode())


def query_token(target: str) -> str | None:
    """The ``token`` query parameter of a request target, if there is one."""
    for key, value in parse_qsl(urlsplit(target).query, keep_blank_values=True):
        if key == TOKEN_PARAM:
            return value
    return None


def remote_dev_refusal(host: str, allow_remote: bool) -> str | None:
    """Why ``serve --dev`` may not listen on ``host`` (a usage error), or None."""
    if allow_remote or is_loopback(host):
        return None
    shown = host or "all addresses"
    return (
        f"--dev listens on loopback only, not on {shown}: its console hands out tickets "
        "signed with a throwaway secret; use --listen 127.0.0.1:PORT (and an SSH tunnel "
        "to reach it from elsewhere), or add --dev-allow-remote to serve it there anyway"
    )


def page_host(host_header: str | None, allow_origins: Sequence[str]) -> str | None:
    """The ``Host`` the page was asked for, if a page of that origin may connect; else None.

    The page's origin is ``http://`` + Host, and that is what its WebSocket will send
    as ``Origin``. Only a plain ``host[:port]`` is accepted (it goes into a header).
    """
    if not _plain_host(host_header):
        return None
    assert host_header is not None
    return host_header if origin_allowed(f"http://{host_header}", allow_origins) else None


def _plain_host(host_header: str | None) -> bool:
    return bool(host_header) and not any(
        c.isspace() or c in _NOT_IN_HOST for c in host_header or ""
    )


def host_refusal(host_header: str | None) -> str:
    """The 403's text for a ``Host`` the console is not served to: what to do about it."""
    if _plain_host(host_header):
        return (
            f"the dev console is only served to an origin allowed to connect, and "
            f"http://{host_header} is not: open it at the address the relay printed, or "
            f"start the relay with --allow-origin http://{host_header}\n"
        )
    return (
        "the dev console is only served to an origin allowed to connect: open it at the "
        "address the relay printed, or allow this page's origin with --allow-origin\n"
    )


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


def render_index(
    template: bytes, *, ticket: str, token: str, path: str, cwd: str, version: str
) -> bytes:
    """The page with its ticket and token, the endpoint path, a default cwd and the version."""
    text = template.decode()
    fields = {"ticket": ticket, "token": token, "path": path, "cwd": cwd, "version": version}
    for name, value in fields.items():
        text = text.replace("{{" + name + "}}", html.escape(value, quote=True))
    return text.encode()


def same_origin_refusal(request: Headers, host: str) -> str | None:
    """A browser's ``Sec-Fetch-Site`` and ``Origin``, when sent, must name the page's origin."""
    site = request.get("Sec-Fetch-Site")
    origin = request.get("Origin")
    if site not in (None, "same-origin") or origin not in (None, f"http://{host}"):
        return NOT_SAME_ORIGIN
    return None


def answer(
    console: Console, path: str, target: str, request: Headers, mint: Callable[[], str]
) -> Answer:
    """The console's answer to ``GET path`` (``target`` with its query string)."""
    twice = duplicated(list(request.raw_items()), CONSOLE_SINGLE_HEADERS)
    if twice is not None:
        return Answer(text_response(twice.status, twice.reason + "\n"), "header given twice")
    host = page_host(request.get("Host"), console.allow_origins)
    if host is None:
        return Answer(text_response(403, host_refusal(request.get("Host"))), "origin not allowed")
    if path == TICKET_PATH:
        refusal = same_origin_refusal(request, host)
        if refusal is not None:
            return Answer(text_response(403, refusal), "not the console's own page")
        if not token_matches(request.get(TOKEN_HEADER), console.token):
            return Answer(text_response(403, NO_TOKEN), "missing or wrong console token")
        return Answer(text_response(200, mint(), headers(host)))
    body, content_type = console.assets.files[path]
    if path == INDEX:
        if not token_matches(query_token(target), console.token):
            return Answer(text_response(403, NO_TOKEN), "missing or wrong console token")
        body = render_index(
            body,
            ticket=mint(),
            token=console.token,
            path=console.endpoint,
            cwd=console.workspace,
            version=console.version,
        )
    return Answer(response(200, body, content_type, headers(host)))
