"""Tests for relay.serve.devconsole: the console's token, its refusals and its page, as values.

The console served by a live relay, and in a browser, is tests/serve/test_console.py's.
"""

from __future__ import annotations

import pytest
from websockets.datastructures import Headers

from relay.serve import devconsole
from relay.serve.devconsole import (
    NO_TOKEN,
    NOT_SAME_ORIGIN,
    Assets,
    Console,
    answer,
    console_url,
    host_refusal,
    new_token,
    page_host,
    query_token,
    remote_dev_refusal,
    render_index,
    token_matches,
)

TOKEN = "tok-0123456789abcdef"
HOST = "127.0.0.1:8765"
ASSETS = Assets(
    {
        "/": (
            b"<body data-ticket={{ticket}} data-token={{token}} data-path={{path}}>",
            "text/html",
        ),
        "/console.js": (b"js", "text/javascript"),
        "/console.css": (b"css", "text/css"),
    }
)
CONSOLE = Console(ASSETS, TOKEN, (), "/acp", "/work", "1.0")


def request(*pairs: tuple[str, str]) -> Headers:
    return Headers([("Host", HOST), *pairs])


def mint() -> str:
    return "TICKET"


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
    """Ticket, token, path, cwd and version are filled in HTML-escaped."""
    page = render_index(
        b"{{ticket}}|{{token}}|{{path}}|{{cwd}}|{{version}}",
        ticket="t&1",
        token="k",
        path="/acp",
        cwd='/a "b"',
        version="<1>",
    )
    assert page == b"t&amp;1|k|/acp|/a &quot;b&quot;|&lt;1&gt;"


def test_page_needs_the_token_in_its_address() -> None:
    """GET / with the token gets the page with a fresh ticket; without it, 403 and no ticket."""
    served = answer(CONSOLE, "/", f"/?token={TOKEN}", request(), mint)
    assert served.refused is None
    assert served.response.status_code == 200
    assert (
        served.response.body
        == f"<body data-ticket=TICKET data-token={TOKEN} data-path=/acp>".encode()
    )
    csp = served.response.headers["Content-Security-Policy"]
    assert f"connect-src 'self' ws://{HOST} wss://{HOST};" in csp
    for target in ("/", "/?token=nope"):
        refused = answer(CONSOLE, "/", target, request(), mint)
        assert refused.response.status_code == 403
        assert refused.response.body == NO_TOKEN.encode()
        assert refused.refused == "missing or wrong console token"


def test_static_files_need_no_token() -> None:
    """The script and the style hold no secret: served to an allowed Host without the token."""
    for path in ("/console.js", "/console.css"):
        served = answer(CONSOLE, path, path, request(), mint)
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
    served = answer(CONSOLE, "/console-ticket", "/console-ticket", request(*headers), mint)
    assert (served.response.status_code, served.response.body) == (status, body)
    assert "Access-Control-Allow-Origin" not in served.response.headers


@pytest.mark.parametrize("name", [devconsole.TOKEN_HEADER, "Sec-Fetch-Site", "Origin"])
@pytest.mark.parametrize("path", ["/", "/console-ticket", "/console.js"])
def test_a_header_the_console_reads_given_twice_is_400(name: str, path: str) -> None:
    """A console header given twice is answered 400 naming it, never minting a ticket."""
    value = {"Origin": f"http://{HOST}", "Sec-Fetch-Site": "same-origin"}.get(name, TOKEN)
    served = answer(
        CONSOLE, path, f"{path}?token={TOKEN}", request((name, value), (name, value)), mint
    )
    assert served.response.status_code == 400
    assert (
        served.response.body == f"bad request: the {name} header is given more than once\n".encode()
    )
    assert served.refused == "header given twice"


def test_foreign_host_gets_no_ticket_even_with_the_token() -> None:
    """A Host the relay would not let connect is refused before the token is looked at."""
    headers = Headers([("Host", "evil.example"), (devconsole.TOKEN_HEADER, TOKEN)])
    for path in ("/", "/console-ticket", "/console.js"):
        served = answer(CONSOLE, path, f"{path}?token={TOKEN}", headers, mint)
        assert served.response.status_code == 403
        assert served.refused == "origin not allowed"
        assert b"TICKET" not in served.response.body
