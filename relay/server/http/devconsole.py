"""The dev console served at ``/`` under ``serve --dev``: one HTML page, its script and style.

The files live in ``relay/server/http/console/`` (package data, no build step, no external assets).
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

Sharing: the page's address with ``&watch=ID`` (and ``&answer=1``) is the watch view of
connection ID, which opens no connection of its own: it asks ``GET
/console-watch-ticket?connection=ID[&answer=1]`` for a watcher's ticket (guarded like
``/console-ticket``) and watches with ``acp-relay.watch.v1``. ``GET
/console-boundary?connection=ID`` (guarded alike) tells the page what the filesystem
boundary did on its connection (:mod:`relay.observe.boundaryrecords`), out of band, so
that the conversation itself stays as the two sides sent it.
"""

from __future__ import annotations

import base64
import hmac
import html
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Response

from relay.core.admission import Refusal, no_such_connection
from relay.core.handshake import duplicated
from relay.core.origins import is_loopback, origin_allowed
from relay.server.http.edge import response, text_response

INDEX = "/"
TICKET_PATH = "/console-ticket"  # a fresh ticket for each socket after the page's first
WATCH_TICKET_PATH = "/console-watch-ticket"  # a watcher's: ?connection=ID[&answer=1]
BOUNDARY_PATH = "/console-boundary"  # what the boundary did on a connection: ?connection=ID
TOKEN_PARAM = "token"  # the page's address: http://HOST:PORT/?token=...
WATCH_PARAM = "watch"  # the watch view's: http://HOST:PORT/?token=...&watch=ID[&answer=1]
ANSWER_PARAM = "answer"
CONNECTION_PARAM = "connection"
CONNECTION_ID = re.compile(r"[0-9A-Za-z-]{1,64}")  # the relay's ids are UUIDs
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
    "/watch.js": ("watch.js", "text/javascript; charset=utf-8"),
    "/conversation.js": ("conversation.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}
WATCH_PAGE = "watch.html"  # served at INDEX for an address with WATCH_PARAM
GUARDED = (TICKET_PATH, WATCH_TICKET_PATH, BOUNDARY_PATH)  # the token header, same origin
PATHS = frozenset({*FILES, *GUARDED})
# Headers the console reads that must come once (besides the upgrade's own, checked first).
CONSOLE_SINGLE_HEADERS = ("Host", "Origin", TOKEN_HEADER, "Sec-Fetch-Site")
_NOT_IN_HOST = "/\\?#@;,'\"<>"


SHARING_OFF = Refusal(404, "sharing is off on this relay (--max-watchers 0)", kind="watch")


@dataclass(frozen=True)
class Assets:
    """The console's files, by URL path: (bytes, content type); and the watch view's page."""

    files: dict[str, tuple[bytes, str]]
    watch_page: bytes = b""


@dataclass(frozen=True)
class Console:
    """What the console needs of the relay: its files, the run's token, where it connects."""

    assets: Assets
    token: str
    allow_origins: Sequence[str]
    endpoint: str  # the ACP endpoint's path, e.g. /acp
    workspace: str  # the page's default cwd
    version: str


class Mint(Protocol):
    """Mints a fresh ticket: the page's, or with ``watch`` a watcher's of that connection."""

    def __call__(self, watch: str | None = None, *, may_answer: bool = False) -> str: ...


@dataclass(frozen=True)
class RelayViews:
    """What the console's answers read of the running relay."""

    mint: Mint
    can_watch: Callable[[str], Refusal | None]  # why a connection takes no watcher now
    boundary: Callable[[str], dict[str, Any] | None]  # its records; None: no such connection
    sharing: bool  # --max-watchers above 0


@dataclass(frozen=True)
class Answer:
    """The console's answer to one request, and why it was refused (for the log), if it was."""

    response: Response
    refused: str | None = None


def load() -> Assets:
    """Read the console's files from the installed package."""
    folder = resources.files("relay.server.http") / "console"
    return Assets(
        {path: ((folder / name).read_bytes(), kind) for path, (name, kind) in FILES.items()},
        (folder / WATCH_PAGE).read_bytes(),
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
    return query_value(target, TOKEN_PARAM)


def query_value(target: str, name: str) -> str | None:
    """The first ``name`` query parameter of a request target, if there is one."""
    for key, value in parse_qsl(urlsplit(target).query, keep_blank_values=True):
        if key == name:
            return value
    return None


@dataclass(frozen=True)
class Watched:
    """A connection named in a request's query, and whether its watcher may answer."""

    connection: str
    may_answer: bool


def watched(target: str, name: str) -> Watched | str | None:
    """The connection ``name`` names in ``target``'s query (None: not named), or what is
    wrong with it (each parameter at most once; an id; ``answer`` 0 or 1)."""
    pairs = parse_qsl(urlsplit(target).query, keep_blank_values=True)
    for key in (name, ANSWER_PARAM):
        if sum(1 for k, _ in pairs if k == key) > 1:
            return f"the {key} parameter is given more than once"
    connection = query_value(target, name)
    if connection is None:
        return None
    if not CONNECTION_ID.fullmatch(connection):
        return f"{name} must be a connection's id (letters, digits and '-', at most 64)"
    answer = query_value(target, ANSWER_PARAM)
    if answer not in (None, "0", "1"):
        return f"{ANSWER_PARAM} must be 0 or 1"
    return Watched(connection, answer == "1")


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
    template: bytes,
    *,
    ticket: str,
    token: str,
    path: str,
    cwd: str,
    version: str,
    sharing: bool = False,
) -> bytes:
    """The page with its ticket and token, the endpoint path, a default cwd, the version and
    whether sharing is on."""
    fields = {"ticket": ticket, "token": token, "path": path, "cwd": cwd, "version": version}
    return _render(template, fields | {"sharing": "on" if sharing else "off"})


def render_watch(
    template: bytes, *, token: str, path: str, watched: Watched, version: str
) -> bytes:
    """The watch view of ``watched``: its token, the endpoint path, the connection, whether
    it may answer and the version (no ticket: the view asks for a watcher's)."""
    fields = {
        "token": token,
        "path": path,
        "watch": watched.connection,
        "answer": "1" if watched.may_answer else "0",
        "version": version,
    }
    return _render(template, fields)


def _render(template: bytes, fields: dict[str, str]) -> bytes:
    text = template.decode()
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


def answer(console: Console, path: str, target: str, request: Headers, relay: RelayViews) -> Answer:
    """The console's answer to ``GET path`` (``target`` with its query string)."""
    twice = duplicated(list(request.raw_items()), CONSOLE_SINGLE_HEADERS)
    if twice is not None:
        return Answer(text_response(twice.status, twice.reason + "\n"), "header given twice")
    host = page_host(request.get("Host"), console.allow_origins)
    if host is None:
        return Answer(text_response(403, host_refusal(request.get("Host"))), "origin not allowed")
    if path in GUARDED:
        refusal = same_origin_refusal(request, host)
        if refusal is not None:
            return Answer(text_response(403, refusal), "not the console's own page")
        if not token_matches(request.get(TOKEN_HEADER), console.token):
            return Answer(text_response(403, NO_TOKEN), "missing or wrong console token")
        if path == TICKET_PATH:
            return Answer(text_response(200, relay.mint(), headers(host)))
        return _about_a_connection(path, target, host, relay)
    body, content_type = console.assets.files[path]
    if path == INDEX:
        if not token_matches(query_token(target), console.token):
            return Answer(text_response(403, NO_TOKEN), "missing or wrong console token")
        view = watched(target, WATCH_PARAM)
        if isinstance(view, str):
            return Answer(text_response(400, f"bad request: {view}\n"), "bad watch address")
        if view is not None:
            return Answer(response(200, _watch_page(console, view), content_type, headers(host)))
        body = render_index(
            body,
            ticket=relay.mint(),
            token=console.token,
            path=console.endpoint,
            cwd=console.workspace,
            version=console.version,
            sharing=relay.sharing,
        )
    return Answer(response(200, body, content_type, headers(host)))


def _watch_page(console: Console, view: Watched) -> bytes:
    return render_watch(
        console.assets.watch_page,
        token=console.token,
        path=console.endpoint,
        watched=view,
        version=console.version,
    )


def _about_a_connection(path: str, target: str, host: str, relay: RelayViews) -> Answer:
    """A watcher's ticket for a connection, or what the boundary did on it."""
    asked = watched(target, CONNECTION_PARAM)
    if not isinstance(asked, Watched):
        why = asked or f"name the connection: {path}?{CONNECTION_PARAM}=ID"
        return Answer(text_response(400, f"bad request: {why}\n"), "bad connection parameter")
    if path == WATCH_TICKET_PATH:
        refusal = relay.can_watch(asked.connection) if relay.sharing else SHARING_OFF
        if refusal is not None:
            extra = (*refusal.headers, *headers(host))
            return Answer(text_response(refusal.status, refusal.reason + "\n", extra))
        ticket = relay.mint(watch=asked.connection, may_answer=asked.may_answer)
        return Answer(text_response(200, ticket, headers(host)))
    records = relay.boundary(asked.connection)
    if records is None:
        gone = no_such_connection(asked.connection)
        return Answer(text_response(gone.status, gone.reason + "\n", headers(host)))
    payload = {"connection": asked.connection} | records
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Answer(response(200, body, "application/json", headers(host)))
