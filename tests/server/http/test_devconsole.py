"""Tests for relay.server.http.devconsole: the console's token, its refusals and its page, as
values.

The console served by a live relay, and in a browser, is tests/server/http/test_console.py's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.datastructures import Headers

from relay.core.admission import Refusal, no_such_connection, watchers_full
from relay.server.http import devconsole
from relay.server.http.devconsole import (
    NO_TOKEN,
    NOT_SAME_ORIGIN,
    Assets,
    Console,
    RelayViews,
    Watched,
    answer,
    console_url,
    host_refusal,
    new_token,
    page_host,
    query_token,
    remote_dev_refusal,
    render_index,
    render_watch,
    token_matches,
    watched,
)

TOKEN = "tok-0123456789abcdef"
HOST = "127.0.0.1:8765"
ASSETS = Assets(
    {
        "/": (
            b"<body data-ticket={{ticket}} data-token={{token}} data-path={{path}} "
            b"data-sharing={{sharing}}>",
            "text/html",
        ),
        "/console.js": (b"js", "text/javascript"),
        "/watch.js": (b"watch js", "text/javascript"),
        "/conversation.js": (b"conversation js", "text/javascript"),
        "/console.css": (b"css", "text/css"),
    },
    b"<body data-token={{token}} data-path={{path}} data-watch={{watch}} data-answer={{answer}}>",
)
CONSOLE = Console(ASSETS, TOKEN, (), "/acp", "/work", "1.0")
CONNECTION = "6f1c2a7e-0f3b-4f52-9d0e-8f2b3c4d5e6f"
FULL = "0aa1b2c3-full"
RECORDS: dict[str, Any] = {
    "records": [{"n": 1, "kind": "withheld", "direction": "to_agent", "method": "initialize"}],
    "dropped": 0,
}


def request(*pairs: tuple[str, str]) -> Headers:
    return Headers([("Host", HOST), *pairs])


def mint(watch: str | None = None, *, may_answer: bool = False) -> str:
    return "TICKET" if watch is None else f"WATCHER:{watch}:{may_answer}"


def can_watch(conn_id: str) -> Refusal | None:
    if conn_id == FULL:
        return watchers_full(conn_id, 4)
    return None if conn_id == CONNECTION else no_such_connection(conn_id)


def boundary(conn_id: str) -> dict[str, Any] | None:
    return RECORDS if conn_id == CONNECTION else None


RELAY = RelayViews(mint, can_watch, boundary, sharing=True)


def minting_nothing(watch: str | None = None, *, may_answer: bool = False) -> str:
    raise AssertionError("no ticket may be minted here")


def test_new_token_is_urlsafe_base64_of_the_randomness() -> None:
    """The token is the given random bytes in unpadded URL-safe base64."""
    assert new_token(b"\xff" * 24) == "_" * 32
    assert new_token(bytes(range(24))) != new_token(bytes(range(1, 25)))


def test_console_url_carries_the_token() -> None:
    """The banner's console address is the relay's base with ?token=."""
    assert console_url("http://127.0.0.1:8765", "abc") == "http://127.0.0.1:8765/?token=abc"
    assert console_url("http://127.0.0.1:8765/", "abc") == "http://127.0.0.1:8765/?token=abc"


@pytest.mark.parametrize(
    ("given", "token", "matches"),
    [
        (TOKEN, TOKEN, True),
        (TOKEN + "x", TOKEN, False),
        (TOKEN[:-1], TOKEN, False),
        (None, TOKEN, False),
        ("", TOKEN, False),
        ("", "", False),  # a relay without a token serves nobody
    ],
)
def test_token_matches_only_the_runs_token(given: str | None, token: str, matches: bool) -> None:
    """Only the exact, non-empty token matches."""
    assert token_matches(given, token) is matches


@pytest.mark.parametrize(
    ("target", "token"),
    [("/?token=abc", "abc"), ("/?x=1&token=a%2Bb", "a+b"), ("/", None), ("/?token=", "")],
)
def test_query_token_reads_the_token_parameter(target: str, token: str | None) -> None:
    """The token comes from the ``token`` query parameter, decoded."""
    assert query_token(target) == token


@pytest.mark.parametrize(
    ("host", "allowed", "refused"),
    [
        ("127.0.0.1", False, False),
        ("localhost", False, False),
        ("::1", False, False),
        ("0.0.0.0", False, True),
        ("::", False, True),
        ("192.0.2.7", False, True),
        ("0.0.0.0", True, False),
    ],
)
def test_dev_listens_on_loopback_unless_forced(host: str, allowed: bool, refused: bool) -> None:
    """--dev on a non-loopback address is refused with the fix, unless --dev-allow-remote."""
    why = remote_dev_refusal(host, allowed)
    assert (why is not None) is refused
    if why is not None:
        assert f"not on {host}" in why
        assert "--listen 127.0.0.1:PORT" in why
        assert "--dev-allow-remote" in why


@pytest.mark.parametrize(
    ("host", "origins", "served"),
    [
        (HOST, (), HOST),
        ("localhost:1", (), "localhost:1"),
        ("evil.example", (), None),
        ("evil.example", ("http://evil.example",), "evil.example"),
        ("127.0.0.1:1 onerror=x", (), None),
        ("127.0.0.1/x", (), None),
        ("", (), None),
        (None, (), None),
    ],
)
def test_page_host_is_one_that_may_connect(
    host: str | None, origins: tuple[str, ...], served: str | None
) -> None:
    """The page is served to a plain Host whose http:// origin the relay would allow."""
    assert page_host(host, origins) == served


def test_host_refusal_names_allow_origin() -> None:
    """The 403 for a foreign Host says how to allow it, naming the origin when it is plain."""
    assert "--allow-origin http://evil.example:80" in host_refusal("evil.example:80")
    weird = host_refusal("a b<script>")
    assert "--allow-origin" in weird
    assert "<script>" not in weird


def test_render_index_escapes_every_field() -> None:
    """Ticket, token, path, cwd and version are filled in HTML-escaped; sharing on or off."""
    page = render_index(
        b"{{ticket}}|{{token}}|{{path}}|{{cwd}}|{{version}}|{{sharing}}",
        ticket="t&1",
        token="k",
        path="/acp",
        cwd='/a "b"',
        version="<1>",
    )
    assert page == b"t&amp;1|k|/acp|/a &quot;b&quot;|&lt;1&gt;|off"


def test_render_watch_escapes_every_field() -> None:
    """The watch view gets its token, path, connection, answer right and version, escaped."""
    page = render_watch(
        b"{{token}}|{{path}}|{{watch}}|{{answer}}|{{version}}|{{ticket}}",
        token="k&",
        path="/acp",
        watched=Watched("c-1", may_answer=True),
        version="<1>",
    )
    assert page == b"k&amp;|/acp|c-1|1|&lt;1&gt;|{{ticket}}"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/?token=t", None),
        (f"/?token=t&watch={CONNECTION}", Watched(CONNECTION, False)),
        (f"/?watch={CONNECTION}&answer=1", Watched(CONNECTION, True)),
        (f"/?watch={CONNECTION}&answer=0", Watched(CONNECTION, False)),
        ("/?watch=", "watch must be a connection's id (letters, digits and '-', at most 64)"),
        ("/?watch=a/b", "watch must be a connection's id (letters, digits and '-', at most 64)"),
        (
            "/?watch=" + "a" * 65,
            "watch must be a connection's id (letters, digits and '-', at most 64)",
        ),
        (
            "/?watch=%3Cscript%3E",
            "watch must be a connection's id (letters, digits and '-', at most 64)",
        ),
        (f"/?watch={CONNECTION}&answer=yes", "answer must be 0 or 1"),
        ("/?watch=a&watch=b", "the watch parameter is given more than once"),
        ("/?watch=a&answer=1&answer=0", "the answer parameter is given more than once"),
    ],
)
def test_watched_reads_the_connection_and_the_answer_right(
    target: str, expected: Watched | str | None
) -> None:
    """A watch address names one connection by its id, and answer 0 or 1, each at most once."""
    assert watched(target, "watch") == expected


def test_the_watch_view_is_the_page_with_watch_and_mints_nothing() -> None:
    """/?token=...&watch=ID is the watch view of ID (with its answer right), and no ticket is
    minted for it: the view asks for a watcher's ticket itself."""
    views = RelayViews(minting_nothing, can_watch, boundary, sharing=True)
    for query, right in (("", "0"), ("&answer=1", "1")):
        target = f"/?token={TOKEN}&watch={CONNECTION}{query}"
        served = answer(CONSOLE, "/", target, request(), views)
        assert (served.response.status_code, served.refused) == (200, None)
        assert (
            served.response.body
            == (
                f"<body data-token={TOKEN} data-path=/acp data-watch={CONNECTION} "
                f"data-answer={right}>"
            ).encode()
        )
        assert "Content-Security-Policy" in served.response.headers
    refused = answer(CONSOLE, "/", f"/?watch={CONNECTION}", request(), views)
    assert (refused.response.status_code, refused.refused) == (
        403,
        "missing or wrong console token",
    )


@pytest.mark.parametrize(
    "query", ["&watch=a/b", "&watch=a&watch=b", f"&watch={CONNECTION}&answer=2"]
)
def test_a_bad_watch_address_is_400(query: str) -> None:
    """A watch address whose connection or answer right cannot be read gets 400 saying why."""
    served = answer(CONSOLE, "/", f"/?token={TOKEN}{query}", request(), RELAY)
    assert served.response.status_code == 400
    assert served.response.body.startswith(b"bad request: ")
    assert served.refused == "bad watch address"


def test_the_page_says_whether_sharing_is_on() -> None:
    """The controller's page carries data-sharing: off when the relay has --max-watchers 0."""
    off = RelayViews(mint, can_watch, boundary, sharing=False)
    served = answer(CONSOLE, "/", f"/?token={TOKEN}", request(), off)
    assert served.response.body.endswith(b"data-sharing=off>")


TOKEN_OK = (devconsole.TOKEN_HEADER, TOKEN)


@pytest.mark.parametrize(
    ("query", "status", "body"),
    [
        (f"connection={CONNECTION}", 200, f"WATCHER:{CONNECTION}:False"),
        (f"connection={CONNECTION}&answer=0", 200, f"WATCHER:{CONNECTION}:False"),
        (f"connection={CONNECTION}&answer=1", 200, f"WATCHER:{CONNECTION}:True"),
        ("connection=gone-1", 404, "no connection gone-1 on this relay: it ended, or never was\n"),
        (f"connection={FULL}", 503, f"connection {FULL} has its 4 watchers (--max-watchers)"),
        ("", 400, "bad request: name the connection: /console-watch-ticket?connection=ID\n"),
        ("connection=a/b", 400, "bad request: connection must be a connection's id"),
        (f"connection={CONNECTION}&answer=yes", 400, "bad request: answer must be 0 or 1\n"),
    ],
)
def test_watch_ticket_for_a_connection(query: str, status: int, body: str) -> None:
    """/console-watch-ticket mints a watcher's ticket (with the answer right asked for) for a
    connection that can take one; else the admission's refusal, or 400 saying what is wrong."""
    path = devconsole.WATCH_TICKET_PATH
    served = answer(CONSOLE, path, f"{path}?{query}", request(TOKEN_OK), RELAY)
    assert served.response.status_code == status
    assert served.response.body.decode().startswith(body)
    if status == 503:
        assert "Retry-After" in served.response.headers


def test_no_watch_ticket_while_sharing_is_off() -> None:
    """With --max-watchers 0 a watcher's ticket is refused 404 saying sharing is off."""
    path = devconsole.WATCH_TICKET_PATH
    off = RelayViews(minting_nothing, can_watch, boundary, sharing=False)
    served = answer(CONSOLE, path, f"{path}?connection={CONNECTION}", request(TOKEN_OK), off)
    assert (served.response.status_code, served.response.body) == (
        404,
        b"sharing is off on this relay (--max-watchers 0)\n",
    )


def test_boundary_records_of_a_connection() -> None:
    """/console-boundary answers the connection's records as JSON; 404 for one the relay does
    not have; 400 without a connection."""
    path = devconsole.BOUNDARY_PATH
    served = answer(CONSOLE, path, f"{path}?connection={CONNECTION}", request(TOKEN_OK), RELAY)
    assert served.response.status_code == 200
    assert served.response.headers["Content-Type"] == "application/json"
    assert served.response.headers["Cache-Control"] == "no-store"
    assert json.loads(served.response.body) == {"connection": CONNECTION, **RECORDS}
    gone = answer(CONSOLE, path, f"{path}?connection=gone-1", request(TOKEN_OK), RELAY)
    assert gone.response.status_code == 404
    unnamed = answer(CONSOLE, path, path, request(TOKEN_OK), RELAY)
    assert unnamed.response.status_code == 400


@pytest.mark.parametrize("path", [devconsole.WATCH_TICKET_PATH, devconsole.BOUNDARY_PATH])
@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ([], NO_TOKEN),
        ([(devconsole.TOKEN_HEADER, "wrong")], NO_TOKEN),
        ([TOKEN_OK, ("Origin", "http://evil.example")], NOT_SAME_ORIGIN),
        ([TOKEN_OK, ("Sec-Fetch-Site", "cross-site")], NOT_SAME_ORIGIN),
    ],
)
def test_the_new_endpoints_are_guarded_like_the_ticket(
    path: str, headers: list[tuple[str, str]], body: str
) -> None:
    """A watcher's ticket and the boundary's records need the token header from the page's own
    origin, exactly as /console-ticket does: 403 and nothing minted or read otherwise."""
    views = RelayViews(minting_nothing, can_watch, boundary, sharing=True)
    target = f"{path}?connection={CONNECTION}&answer=1"
    served = answer(CONSOLE, path, target, request(*headers), views)
    assert (served.response.status_code, served.response.body) == (403, body.encode())
    assert "Access-Control-Allow-Origin" not in served.response.headers


def test_page_needs_the_token_in_its_address() -> None:
    """GET / with the token gets the page with a fresh ticket; without it, 403 and no ticket."""
    served = answer(CONSOLE, "/", f"/?token={TOKEN}", request(), RELAY)
    assert served.refused is None
    assert served.response.status_code == 200
    assert (
        served.response.body
        == f"<body data-ticket=TICKET data-token={TOKEN} data-path=/acp data-sharing=on>".encode()
    )
    csp = served.response.headers["Content-Security-Policy"]
    assert f"connect-src 'self' ws://{HOST} wss://{HOST};" in csp
    for target in ("/", "/?token=nope"):
        refused = answer(CONSOLE, "/", target, request(), RELAY)
        assert refused.response.status_code == 403
        assert refused.response.body == NO_TOKEN.encode()
        assert refused.refused == "missing or wrong console token"


def test_static_files_need_no_token() -> None:
    """The script and the style hold no secret: served to an allowed Host without the token."""
    for path in ("/console.js", "/watch.js", "/conversation.js", "/console.css"):
        served = answer(CONSOLE, path, path, request(), RELAY)
        assert (served.response.status_code, served.refused) == (200, None)


@pytest.mark.parametrize(
    ("headers", "status", "body"),
    [
        ([(devconsole.TOKEN_HEADER, TOKEN)], 200, b"TICKET"),
        ([(devconsole.TOKEN_HEADER, TOKEN), ("Sec-Fetch-Site", "same-origin")], 200, b"TICKET"),
        ([(devconsole.TOKEN_HEADER, TOKEN), ("Origin", f"http://{HOST}")], 200, b"TICKET"),
        ([], 403, NO_TOKEN.encode()),
        ([(devconsole.TOKEN_HEADER, "wrong")], 403, NO_TOKEN.encode()),
        (
            [(devconsole.TOKEN_HEADER, TOKEN), ("Origin", "http://evil.example")],
            403,
            NOT_SAME_ORIGIN.encode(),
        ),
        (
            [(devconsole.TOKEN_HEADER, TOKEN), ("Sec-Fetch-Site", "cross-site")],
            403,
            NOT_SAME_ORIGIN.encode(),
        ),
    ],
)
def test_console_ticket_needs_the_token_header_and_the_same_origin(
    headers: list[tuple[str, str]], status: int, body: bytes
) -> None:
    """/console-ticket mints only for the token's header from the page's own origin."""
    served = answer(CONSOLE, "/console-ticket", "/console-ticket", request(*headers), RELAY)
    assert (served.response.status_code, served.response.body) == (status, body)
    assert "Access-Control-Allow-Origin" not in served.response.headers


@pytest.mark.parametrize("name", [devconsole.TOKEN_HEADER, "Sec-Fetch-Site", "Origin"])
@pytest.mark.parametrize(
    "path", ["/", "/console-ticket", "/console-watch-ticket", "/console-boundary", "/console.js"]
)
def test_a_header_the_console_reads_given_twice_is_400(name: str, path: str) -> None:
    """A console header given twice is answered 400 naming it, never minting a ticket."""
    value = {"Origin": f"http://{HOST}", "Sec-Fetch-Site": "same-origin"}.get(name, TOKEN)
    served = answer(
        CONSOLE, path, f"{path}?token={TOKEN}", request((name, value), (name, value)), RELAY
    )
    assert served.response.status_code == 400
    assert (
        served.response.body == f"bad request: the {name} header is given more than once\n".encode()
    )
    assert served.refused == "header given twice"


def test_foreign_host_gets_no_ticket_even_with_the_token() -> None:
    """A Host the relay would not let connect is refused before the token is looked at."""
    headers = Headers([("Host", "evil.example"), (devconsole.TOKEN_HEADER, TOKEN)])
    for path in ("/", *devconsole.GUARDED, "/console.js"):
        served = answer(CONSOLE, path, f"{path}?token={TOKEN}", headers, RELAY)
        assert served.response.status_code == 403
        assert served.refused == "origin not allowed"
        assert b"TICKET" not in served.response.body
