"""The dev console at ``/`` under ``serve --dev``: its HTTP answers, and a real browser using it.

The browser tests drive Debian's ``chromium`` (installed by ``tests/system``) through
Playwright, against relays started as a user would (``acp-relay serve``, a subprocess).
Screenshots go to ``tests/artifacts/``; ``docs/console.png`` and ``docs/console-watch.png``
(docs/dev-console.md's) are written when missing or when ``ACP_RELAY_UPDATE_SCREENSHOTS=1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Locator, Page, ViewportSize, expect
from structlog.testing import capture_logs
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from relay.acp.conversation import Conversation
from relay.core.tickets import verify
from tests.support.agents import AGENTS, DEMO_AGENT
from tests.support.browser import (
    ROOT,
    browser,
    page_server,
    require_chromium,
    save_artifact,
)
from tests.support.cli import RelayRun, dev_workspace, serve
from tests.support.env import clean_env, secret_env
from tests.support.http import http_get
from tests.support.live import SECRET, LiveRelay, live_relay, make_ticket
from tests.support.netcut import NetCut
from tests.support.recordings import GEMINI_SESSION, recorded
from tests.support.waiting import until

DOCS = ROOT / "docs"
DOC_SHOTS = ("console.png", "console-watch.png")  # docs/dev-console.md's
ASKS = (sys.executable, str(AGENTS / "asks.py"))

CONSOLE_MODULE = Path(__file__).resolve().parents[3] / "relay/server/http/console/conversation.js"


# -- plain HTTP ------------------------------------------------------------------------


TOKEN = "console-token-0123456789"


def page_ticket(body: str) -> str:
    match = re.search(r'data-ticket="([^"]*)"', body)
    assert match, body
    return html.unescape(match[1])


def console_relay() -> contextlib.AbstractAsyncContextManager[LiveRelay]:
    """A relay in this loop serving the dev console, its token TOKEN, and the echo agent."""
    return live_relay(("cat",), console=True, console_token=TOKEN)


async def test_console_only_under_dev() -> None:
    """Without --dev (console off) / and the console files are 404, like any other path."""
    async with live_relay(("cat",)) as live:
        for path in ("/", "/console.js", "/console.css"):
            status, _, body = await http_get(live.relay.port, path)
            assert (status, body) == (404, "not found: the ACP endpoint is /acp\n")


async def test_console_page_headers_and_a_fresh_ticket_per_load() -> None:
    """The page is HTML with no-store and a strict CSP; each load embeds a new working ticket."""
    async with console_relay() as live:
        port = live.relay.port
        loads = [await http_get(port, f"/?token={TOKEN}") for _ in range(2)]
        tickets = [page_ticket(body) for _, _, body in loads]
        for status, headers, body in loads:
            assert status == 200
            assert headers["content-type"] == "text/html; charset=utf-8"
            assert headers["cache-control"] == "no-store"
            assert headers["x-content-type-options"] == "nosniff"
            csp = headers["content-security-policy"]
            assert "default-src 'none'" in csp
            assert "script-src 'self';" in csp
            assert f"connect-src 'self' ws://127.0.0.1:{port} wss://127.0.0.1:{port};" in csp
            assert "unsafe" not in csp
            assert 'data-path="/acp"' in body
            assert f'data-token="{TOKEN}"' in body
            assert '<script src="/console.js" type="module"></script>' in body
            assert "<script>" not in body  # nothing inline: the CSP would block it anyway
        assert tickets[0] != tickets[1]
        claims = verify(tickets[0], [SECRET], now=time.time(), max_age=60)
        assert claims.sub == "dev-console"
        async with connect(live.url(tickets[0])) as ws:
            await ws.send('{"id":1}')
            async with asyncio.timeout(5):
                assert await ws.recv() == '{"id":1}'
        with pytest.raises(InvalidStatus, match="401"):  # single use
            async with connect(live.url(tickets[0])):
                pass
        for path, kind in (("/console.js", "text/javascript"), ("/console.css", "text/css")):
            status, headers, body = await http_get(port, path)
            assert (status, headers["content-type"]) == (200, f"{kind}; charset=utf-8")
            assert "content-security-policy" in headers
            assert headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    "host", ["evil.example:8765", "evil.example", "127.0.0.1:1 onerror=x", ""], ids=str
)
async def test_console_refused_to_a_host_that_could_not_connect(host: str) -> None:
    """A Host whose origin the relay would refuse (e.g. DNS rebinding) gets 403 and no ticket,
    even with the token; the answer names --allow-origin."""
    async with console_relay() as live:
        for path in (f"/?token={TOKEN}", "/console-ticket"):
            headers = [f"Acp-Console-Token: {TOKEN}"]
            status, _, body = await http_get(live.relay.port, path, host or " ", headers)
            assert status == 403
            assert "ticket" not in body
            assert "--allow-origin" in body


@pytest.mark.parametrize("query", ["", "?token=", "?token=wrong", f"?x={TOKEN}"], ids=repr)
async def test_console_page_needs_the_token(query: str) -> None:
    """Without the run's token in its address the page is 403, saying where the address is."""
    async with console_relay() as live:
        status, _, body = await http_get(live.relay.port, f"/{query}")
    assert status == 403
    assert "data-ticket" not in body
    assert "printed on its standard output (http://HOST:PORT/?token=...)" in body


async def test_console_ticket_needs_the_token_and_the_same_origin() -> None:
    """/console-ticket gives a working dev-console ticket for the token's header from the
    page's own origin; no token, a wrong one or another origin gets 403."""
    async with console_relay() as live:
        port = live.relay.port
        ok = f"Acp-Console-Token: {TOKEN}"
        refused = [
            [],
            ["Acp-Console-Token: wrong"],
            [ok, "Origin: http://evil.example"],
            [ok, "Sec-Fetch-Site: cross-site"],
        ]
        for headers in refused:
            assert (await http_get(port, "/console-ticket", headers=headers)).status == 403
        status, answer_headers, ticket = await http_get(
            port, "/console-ticket", headers=[ok, f"Origin: http://127.0.0.1:{port}"]
        )
        assert status == 200
        assert "access-control-allow-origin" not in answer_headers
        assert verify(ticket, [SECRET], now=time.time(), max_age=60).sub == "dev-console"
        async with connect(live.url(ticket)) as ws:
            await ws.send('{"id":1}')
            async with asyncio.timeout(5):
                assert await ws.recv() == '{"id":1}'


@pytest.mark.parametrize("name", ["Acp-Console-Token", "Sec-Fetch-Site"])
async def test_a_console_header_given_twice_is_400_not_a_relay_error(name: str) -> None:
    """Acp-Console-Token or Sec-Fetch-Site twice gets 400 naming the header, logged as a
    refusal, without an error or a traceback."""
    value = TOKEN if name == "Acp-Console-Token" else "same-origin"
    async with console_relay() as live:
        with capture_logs() as events:
            for path in ("/console-ticket", f"/?token={TOKEN}"):
                headers = [f"Acp-Console-Token: {TOKEN}", f"{name}: {value}"]
                headers += [] if name == "Acp-Console-Token" else [f"{name}: {value}"]
                answer = await http_get(live.relay.port, path, headers=headers)
                assert answer.status == 400
                assert answer.body == f"bad request: the {name} header is given more than once\n"
    assert [e["reason"] for e in events] == ["header given twice"] * 2
    assert all(e["log_level"] == "warning" for e in events)


async def test_console_token_never_logged() -> None:
    """A refused console request logs why, never the token that came with it."""
    async with console_relay() as live:
        with capture_logs() as events:
            await http_get(live.relay.port, f"/?token={TOKEN}x")
            await http_get(live.relay.port, f"/?token={TOKEN}", host="evil.example")
    assert [e["reason"] for e in events] == [
        "missing or wrong console token",
        "origin not allowed",
    ]
    assert TOKEN not in repr(events)


async def test_websocket_upgrade_at_root_is_still_not_the_endpoint() -> None:
    """Under --dev, a WebSocket upgrade to / is not admitted: the endpoint stays --path."""
    async with console_relay() as live:
        with pytest.raises(InvalidStatus, match="404"):
            async with connect(f"{live.base}/?ticket={make_ticket()}"):
                pass


# -- in a real browser ------------------------------------------------------------------


@pytest.fixture
def chromium() -> str:
    """Debian's chromium, installed by the project's test setup if missing."""
    return require_chromium()


def rows(page: Page, direction: str, summary: str | None = None) -> Locator:
    """The page's log rows in ``direction`` (``to_agent``, ``to_client``), by summary text."""
    locator = page.locator(f'#log li[data-dir="{direction}"]')
    if summary is not None:
        locator = locator.filter(has=page.locator(".summary", has_text=summary))
    return locator


def save_screenshot(png: bytes, name: str) -> None:
    save_artifact(png, name)
    shot = DOCS / name
    if name in DOC_SHOTS and (
        not shot.exists() or os.environ.get("ACP_RELAY_UPDATE_SCREENSHOTS") == "1"
    ):
        shot.write_bytes(png)


async def console_url(relay: RelayRun) -> str:
    """The console address the --dev banner prints on stdout, with the run's token."""

    def parse() -> str | None:
        found = re.search(r"Dev console \(.*\):\n +(\S+)\n", "\n".join(relay.stdout) + "\n")
        return found[1] if found else None

    url = await until(parse, lambda: f"the console address on stdout: {relay.stdout}")
    assert re.fullmatch(rf"http://127\.0\.0\.1:{relay.port}/\?token=[\w-]{{32}}", url), url
    return url


def console_token(url: str) -> str:
    return url.partition("?token=")[2]


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_console_drives_the_demo_agent_in_a_browser(chromium: str, tmp_path: Path) -> None:
    """The page connects, runs initialize, session/new and a streamed prompt, shows the close."""
    prompt = "streamed word by word through the relay"
    async with (
        serve("--dev", env=clean_env()) as relay,
        browser(chromium, tmp_path / "profile") as context,
    ):
        page = await context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        sockets: list[str] = []
        page.on("websocket", lambda ws: sockets.append(ws.url))

        url = await console_url(relay)
        served = await page.goto(url)
        assert served is not None
        ticket = page_ticket(await served.text())
        status = page.locator("#status")
        await expect(status).to_have_text("open: /acp")
        [opened_now] = await relay.wait_event("connection opened")
        await expect(events(page).first).to_have_text(  # the id `ticket --watch` takes
            f"open: connection {opened_now['connection_id']}"
        )
        assert await event_colour(page, "open: connection") != BAD  # a normal event
        workspace = await dev_workspace(relay)  # a fresh one, not this checkout
        await expect(page.locator("#cwd")).to_have_value(workspace)
        assert await page.locator("body").get_attribute("data-ticket") is None
        assert await page.locator("body").get_attribute("data-token") is None

        await page.click("#send-initialize")
        await expect(rows(page, "to_agent", "initialize #1")).to_have_count(1)
        await expect(rows(page, "to_client", "result #1 (initialize)")).to_have_count(1)

        await page.click("#send-new")
        await expect(rows(page, "to_client", "result #2 (session/new)")).to_have_count(1)
        await expect(page.locator("#session-id")).to_have_value(re.compile(r"^[0-9a-f]{32}$"))
        await expect(page.locator("#agent-text .agent").first).to_have_text(
            f"session started in {workspace} with MCP servers: (none)"
        )

        await page.fill("#prompt", prompt)
        await page.click("#send-prompt")
        await expect(rows(page, "to_client", "result #3 (session/prompt)")).to_have_count(1)
        await expect(page.locator("#agent-text .you")).to_have_text(prompt)
        await expect(page.locator("#agent-text .agent").last).to_have_text(prompt)
        chunks = rows(page, "to_client", "agent_message_chunk")
        assert await chunks.count() == len(prompt.split()) + 1

        await page.fill("#raw", '{"jsonrpc":"2.0","id":"raw-1","method":"no/such"}')
        await page.click("#send-raw")
        await expect(rows(page, "to_client", "error #raw-1")).to_have_count(1)

        times = await page.locator("#log li time").all_inner_texts()
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", t) for t in times)
        labels = set(await page.locator("#log li .dir").all_inner_texts())
        assert {"client → agent", "agent → client"} <= labels

        first_reply = rows(page, "to_client", "result #1").first
        await first_reply.locator(".summary").click()
        await expect(first_reply.locator("pre")).to_contain_text('"agentInfo": {')
        await first_reply.locator(".summary").click()
        await expect(first_reply.locator("pre")).to_have_count(0)
        await rows(page, "to_agent", "session/new").locator(".summary").click()  # a short one
        await expect(page.locator("#log pre")).to_contain_text('"mcpServers": []')
        await expect(chunks.first).to_contain_text('agent_message_chunk "session started in')

        live = list(problems)  # the rest come while the relay goes away
        assert await relay.stop() == 0
        await expect(status).to_have_text("closed: 1001 (going away: the relay is shutting down)")
        await expect(page.locator("#reload")).to_be_visible()
        await expect(page.locator("#send-prompt")).to_be_disabled()
        save_screenshot(await page.screenshot(), "console.png")

    assert live == []
    assert not_refused_as_it_stopped(problems[len(live) :]) == []
    assert sockets == [f"ws://127.0.0.1:{relay.port}/acp"]  # the ticket went as a subprotocol
    assert len(ticket) > 40
    opened = relay.events("connection opened")
    assert [r["subject"] for r in opened] == ["dev-console"]
    stderr = "\n".join(relay.stderr)
    assert ticket not in stderr
    assert ticket.rsplit(".", 1)[-1] not in stderr
    assert console_token(url) not in stderr
    assert relay.events("connection closed")[0]["messages_in"] == 4


OTHER_PAGE = """<!doctype html>
<meta charset="utf-8"><title>another origin</title>
<p id="result">connecting</p>
<script>
const result = document.getElementById("result");
const ws = new WebSocket({url});
ws.onopen = () => {{ result.textContent = "open"; }};
ws.onclose = (e) => {{ result.textContent = "closed " + e.code; }};
</script>
"""


def other_origin(ws_url: str) -> contextlib.AbstractContextManager[str]:
    """A second loopback HTTP server whose only page tries a WebSocket to ``ws_url``."""
    body = OTHER_PAGE.format(url=repr(ws_url)).encode()
    return page_server(lambda _path: (200, "text/html; charset=utf-8", body))


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_page_from_another_origin_is_refused(chromium: str, tmp_path: Path) -> None:
    """A page from an origin not allowed sees its socket close with 1006; the relay logged 403."""
    args = ("--agent", "cat", "--allow-origin", "https://example.test")
    async with serve(*args, env=secret_env()) as relay:
        with other_origin(relay.ticket_url()) as origin:
            async with browser(chromium, tmp_path / "profile") as context:
                page = await context.new_page()
                await page.goto(f"{origin}/")
                await expect(page.locator("#result")).to_have_text("closed 1006")
                save_screenshot(await page.screenshot(), "other-origin.png")
        refusals = await relay.wait_event("connection refused")
    assert len(refusals) == 1
    assert refusals[0]["status"] == 403
    assert refusals[0]["reason"].startswith(f"origin {origin} is not allowed")
    assert relay.events("connection opened") == []


# -- resuming, permission requests, a narrow window -------------------------------------

LONG = 300  # words in a long answer
RESUMED = re.compile(r"^resumed after \d+\.\d s, \d+ messages? replayed$")


def slow_demo(delay: float = 0.01) -> str:
    """--agent for the demo agent streaming one word every ``delay`` seconds."""
    return shlex.join([*DEMO_AGENT, "--word-delay", str(delay)])


def events(page: Page) -> Locator:
    """The page's socket event rows."""
    return page.locator('#log li[data-dir="event"] .summary')


BAD = "rgb(179, 38, 30)"  # console.css's --bad


async def event_colour(page: Page, text: str) -> str:
    """The colour of the label of the first socket row whose text starts with ``text``."""
    row = page.locator('#log li[data-dir="event"]').filter(
        has=page.locator(".summary", has_text=re.compile(f"^{re.escape(text)}"))
    )
    colour = await row.first.locator(".dir").evaluate("(e) => getComputedStyle(e).color")
    assert isinstance(colour, str)
    return colour


def not_refused_as_it_stopped(problems: list[str]) -> list[str]:
    """``problems`` but Chromium's own line for a boundary record fetched as the relay
    stopped: it closes its listening socket before the sockets it carries, so a poll in
    between is refused (the page expects it: the socket's close follows)."""
    return [p for p in problems if p != "Failed to load resource: net::ERR_CONNECTION_REFUSED"]


def not_from_the_cut(problems: list[str]) -> list[str]:
    """``problems`` but Chromium's own line for a request on a pooled connection that the
    test's network cut reset (a ticket or boundary record fetched as the cut came: the
    page fetches again)."""
    return [p for p in problems if p != "Failed to load resource: net::ERR_CONNECTION_RESET"]


async def open_console(context: BrowserContext, url: str, problems: list[str]) -> Page:
    """The console at ``url``, open; page errors go into ``problems``."""
    page = await context.new_page()
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    await page.goto(url)
    await expect(page.locator("#status")).to_have_text("open: /acp")
    return page


async def start_session(page: Page) -> None:
    """initialize and session/new, answered."""
    await page.click("#send-initialize")
    await expect(rows(page, "to_client", "result #1 (initialize)")).to_have_count(1)
    await page.click("#send-new")
    await expect(rows(page, "to_client", "result #2 (session/new)")).to_have_count(1)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_console_resumes_a_long_answer_across_a_network_cut(
    chromium: str, tmp_path: Path
) -> None:
    """The console streams a long answer, the network is reset mid-way: the page says it is
    resuming, then "resumed after N s, M messages replayed", and the answer is complete with
    every chunk once; the relay kept one connection (one agent) and logged one resume."""
    words = [f"word{i:03d} " for i in range(LONG)]
    async with (
        serve("--dev", "--agent", slow_demo(), env=clean_env()) as relay,
        NetCut(relay.port) as net,
        browser(chromium, tmp_path / "profile") as context,
    ):
        token = console_token(await console_url(relay))
        problems: list[str] = []
        page = await open_console(context, f"http://127.0.0.1:{net.port}/?token={token}", problems)
        await start_session(page)
        await page.fill("#prompt", "".join(words))
        await page.click("#send-prompt")
        chunks = rows(page, "to_client", "agent_message_chunk")
        await expect(chunks.nth(LONG // 3)).to_be_attached()  # a third of the answer is in
        net.reset()
        await expect(events(page).filter(has_text="resuming within")).to_have_count(1)
        await expect(events(page).filter(has_text=RESUMED)).to_have_count(1)
        await expect(rows(page, "to_client", "result #3 (session/prompt)")).to_have_count(1)
        await expect(page.locator("#agent-text .agent").last).to_have_text("".join(words))
        assert await chunks.count() == LONG + 1  # and the session report: each once
        await expect(page.locator("#status")).to_have_text(RESUMED)
        save_artifact(await page.screenshot(), "console-resumed.png")
        [lost] = await events(page).filter(has_text="resuming within").all_inner_texts()
        assert lost == "connection lost (lost (no close frame)), resuming within 60 s"
        assert len(relay.events("connection opened")) == 1
        await relay.wait_event("connection resumed")
    assert not_from_the_cut(problems) == []
    assert token not in "\n".join(relay.stderr)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_console_says_why_it_could_not_resume(chromium: str, tmp_path: Path) -> None:
    """With the network gone past the relay's grace, the console says it could not resume and
    why, and offers a new connection."""
    args = ("--dev", "--agent", "cat", "--resume-grace", "1")
    async with (
        serve(*args, env=clean_env()) as relay,
        NetCut(relay.port) as net,
        browser(chromium, tmp_path / "profile") as context,
    ):
        token = console_token(await console_url(relay))
        problems: list[str] = []
        page = await open_console(context, f"http://127.0.0.1:{net.port}/?token={token}", problems)
        net.reset()
        net.blackhole()  # new sockets get nowhere either
        status = page.locator("#status")
        await expect(status).to_have_text(
            "could not resume: could not resume within the relay's grace of 1 s (no ticket in time)"
        )
        await expect(page.locator("#reload")).to_be_visible()
        await expect(page.locator("#send-raw")).to_be_disabled()
        assert await event_colour(page, "connection lost") == BAD  # what went wrong is red
        assert await event_colour(page, "could not resume") == BAD
        await relay.wait_event("connection expired")
        net.restore()
    assert problems == []


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_console_answers_the_agents_requests(chromium: str, tmp_path: Path) -> None:
    """A permission request shows as the tool call's title and kind with a button per option;
    the click sends the chosen outcome. Any other agent request is answered -32601 at once;
    an fs request the relay answered itself (--files box) shows under what the relay changed."""
    async with (
        serve("--dev", "--agent", shlex.join(ASKS), env=clean_env()) as relay,
        browser(chromium, tmp_path / "profile") as context,
    ):
        problems: list[str] = []
        page = await open_console(context, await console_url(relay), problems)
        ask = page.locator("#asks .ask")
        await expect(ask).to_have_count(1)
        await expect(ask.locator(".tool-title")).to_have_text("Write notes.md")
        await expect(ask.locator(".tool-kind")).to_have_text("edit")
        await expect(ask.locator("button")).to_have_text(["Allow"])
        save_artifact(await page.screenshot(), "console-ask.png")
        await ask.locator("button", has_text="Allow").click()
        await expect(page.locator("#asks")).to_be_hidden()
        answer = rows(page, "to_agent", "result #perm-1 (session/request_permission)")
        await expect(answer).to_have_count(1)
        answered = rows(page, "to_client", "answered")
        await expect(answered).to_have_count(1)
        params = json.loads(await answered.get_attribute("data-line") or "")["params"]
        assert params == {"outcome": {"outcome": "selected", "optionId": "allow"}}

        # asks.py echoes other lines: a request sent raw comes back as the agent's request
        params = {"sessionId": "s-1", "path": "/etc/hostname"}
        read = {"jsonrpc": "2.0", "id": "q1", "method": "fs/read_text_file", "params": params}
        await page.fill("#raw", json.dumps(read))
        await page.click("#send-raw")
        answered_by_relay = page.locator('#boundary-list li[data-kind="answered"] .what')
        await expect(answered_by_relay).to_have_text(
            "fs/read_text_file: fs/read_text_file answered by the relay: fs withheld"
        )  # --files box: the request never reaches the page
        ext = {"jsonrpc": "2.0", "id": "q2", "method": "_example/ask", "params": {}}
        await page.fill("#raw", json.dumps(ext))
        await page.click("#send-raw")
        refusal = rows(page, "to_agent", "error #q2 (_example/ask): Method not found")
        await expect(refusal).to_have_count(1)
        error = json.loads(await refusal.get_attribute("data-line") or "")["error"]
        assert error["code"] == -32601
        assert error["data"]["method"] == "_example/ask"
        asked = page.locator('#log li[data-dir="to_client"] .summary')
        assert await asked.filter(has_text=re.compile(r"^fs/read_text_file")).count() == 0
        save_artifact(await page.screenshot(), "console-asks.png")
    assert problems == []


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_console_stacks_its_panes_on_a_narrow_window(chromium: str, tmp_path: Path) -> None:
    """At a phone's width the send pane sits above the lines, both full width, nothing wider
    than the window; at a desktop's width they sit side by side."""
    async with serve("--dev", "--agent", "cat", env=clean_env()) as relay:
        url = await console_url(relay)
        for width, height, stacked in ((390, 844, True), (1100, 640, False)):
            viewport = ViewportSize(width=width, height=height)
            profile = tmp_path / f"profile-{width}"
            async with browser(chromium, profile, viewport) as context:
                page = await open_console(context, url, [])
                controls = await page.locator("section.controls").bounding_box()
                lines = await page.locator("section.lines").bounding_box()
                assert controls is not None
                assert lines is not None
                if stacked:
                    assert lines["y"] >= controls["y"] + controls["height"] - 1
                    for box in (controls, lines):
                        assert box["x"] <= 1
                        assert box["width"] >= width - 20
                else:
                    assert lines["x"] >= controls["x"] + controls["width"] - 1
                    assert abs(lines["y"] - controls["y"]) <= 1
                scroll_width = await page.evaluate("document.documentElement.scrollWidth")
                assert scroll_width <= width
                save_artifact(await page.screenshot(full_page=True), f"console-{width}.png")


# -- sharing: the watch view ------------------------------------------------------------

WATCH_LINK = re.compile(
    r"^http://127\.0\.0\.1:\d+/\?token=[\w-]{32}&watch=([0-9a-f-]{36})(&answer=1)?$"
)


async def share_links(page: Page) -> tuple[str, str, str]:
    """The connection's id and its two watch addresses (sees only; may answer), from "share"."""
    await expect(page.locator("#share")).to_be_enabled()
    await page.click("#share")
    await expect(page.locator("#share-links")).to_be_visible()
    watch = await page.locator("#share-watch").get_attribute("href") or ""
    answer = await page.locator("#share-answer").get_attribute("href") or ""
    assert await page.locator("#share-answer-url").input_value() == answer
    found, found_answer = WATCH_LINK.match(watch), WATCH_LINK.match(answer)
    assert found, watch
    assert found_answer, answer
    assert found_answer[2] == "&answer=1"
    assert found[2] is None
    assert found[1] == found_answer[1]
    return found[1], watch, answer


async def open_watch(context: BrowserContext, url: str, problems: list[str]) -> Page:
    """The watch view at ``url``, watching; page errors go into ``problems``."""
    page = await context.new_page()
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    await page.goto(url)
    await expect(page.locator("#status")).to_have_text(re.compile(r"^watching "))
    return page


async def prompt(page: Page, text: str, reply_id: int) -> None:
    """Send ``text`` as a prompt from the console; wait for its answer when ``reply_id``."""
    await page.fill("#prompt", text)
    await page.click("#send-prompt")
    if reply_id:
        await expect(rows(page, "to_client", f"result #{reply_id} (session/prompt)")).to_have_count(
            1
        )


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_shared_connection_is_watched_and_a_watcher_answers(
    chromium: str, tmp_path: Path
) -> None:
    """The console shares its connection: a second page watches it (the history, then live,
    both directions, the agent's text joined), a third sees only; the demo agent's /ask shows
    with Allow and Reject on the page that may answer, without buttons on the other; the
    watcher's click is the answer the agent gets, every page says a watcher answered (the
    console's dialog closes; a view opened later sees it in the history), and when the agent
    exits the watchers say the connection ended."""
    async with (
        serve("--dev", env=clean_env()) as relay,
        browser(chromium, tmp_path / "profile") as context,
    ):
        problems: list[str] = []
        console = await open_console(context, await console_url(relay), problems)
        await start_session(console)
        await prompt(console, "said before anyone watched", 3)
        connection, watch_url, answer_url = await share_links(console)
        hint = console.locator("#share-hint")
        await expect(hint).to_contain_text(f"connection {connection}")

        watcher = await open_watch(context, answer_url, problems)
        await expect(watcher.locator("#status")).to_have_text(
            f"watching {connection} (may answer permission requests)"
        )
        history = watcher.locator('#log li[data-dir="event"] .summary').first
        await expect(history).to_have_text(
            re.compile(r"^watching: \d+ lines of history from line 1$")
        )
        for direction, summary in (
            ("to_agent", "initialize #1"),
            ("to_client", "result #1 (initialize)"),
            ("to_agent", "session/new #2"),
            ("to_agent", "session/prompt #3"),
            ("to_client", "result #3 (session/prompt)"),
        ):
            await expect(rows(watcher, direction, summary)).to_have_count(1)
        seqs = await watcher.locator("#log li[data-seq]").evaluate_all(
            "rows => rows.map(r => Number(r.dataset.seq))"
        )
        assert seqs == list(range(1, len(seqs) + 1))  # every line once, in order
        transcript = watcher.locator("#agent-text")
        await expect(transcript.locator(".you")).to_have_text(["said before anyone watched"])
        await expect(transcript.locator(".agent").last).to_have_text("said before anyone watched")

        onlooker = await open_watch(context, watch_url, problems)
        await expect(onlooker.locator("#status")).to_have_text(f"watching {connection} (sees only)")

        await prompt(console, "and this live", 4)
        for page in (watcher, onlooker):
            await expect(rows(page, "to_client", "result #4 (session/prompt)")).to_have_count(1)
            await expect(page.locator("#agent-text .agent").last).to_have_text("and this live")
            await expect(page.locator("#agent-text .you")).to_have_count(2)

        await prompt(console, "/ask", 0)
        await expect(console.locator("#asks .ask .tool-title")).to_have_text("Write notes.md")
        ask = watcher.locator("#agent-text .ask")
        await expect(ask.locator(".tool-title")).to_have_text("Write notes.md")
        await expect(ask.locator("button")).to_have_text(["Allow", "Reject"])
        await expect(onlooker.locator("#agent-text .ask .ask-waiting")).to_have_text(
            "waiting for an answer (Allow, Reject)"
        )
        assert await onlooker.locator("#agent-text .ask button").count() == 0
        await expect(watcher.locator("#agent-text .tool .tool-status")).to_have_text(
            ["pending"]
        )  # the tool call the request is for
        save_screenshot(await watcher.screenshot(), "console-watch.png")

        await ask.locator("button", has_text="Allow").click()
        who = "a watcher (dev-console)"
        said = f"answered by {who}: allow"
        await expect(ask.locator(".ask-answered")).to_have_text(said)
        await expect(ask.locator("button")).to_have_count(0)
        await expect(onlooker.locator("#agent-text .ask .ask-answered")).to_have_text(said)
        await expect(rows(watcher, "to_agent").filter(has_text="watcher → agent")).to_have_count(1)
        await expect(rows(watcher, "relay", "_acp-relay/answered")).to_have_count(1)
        for page in (console, watcher, onlooker):
            await expect(page.locator("#agent-text .agent").last).to_have_text("permission: allow")
            await expect(rows(page, "to_client", "result #5 (session/prompt)")).to_have_count(1)
            tool = page.locator("#agent-text .tool .tool-status")
            await expect(tool).to_have_text(["completed"])
        await expect(console.locator("#asks")).to_be_hidden()  # its dialog closed
        await expect(
            rows(console, "to_client", "_acp-relay/answered #0 by a watcher (dev-console): allow")
        ).to_have_count(1)
        await expect(console.locator("#agent-text .note.answered")).to_have_text(
            f"permission request #0 (Write notes.md) answered by {who}: allow"
        )
        await relay.wait_event("answer taken")
        latecomer = await open_watch(context, watch_url, problems)
        await expect(latecomer.locator("#agent-text .ask .ask-answered")).to_have_text(
            "answered by a watcher: allow"
        )  # from the history: the watcher's answer as the agent received it
        await expect(latecomer.locator("#agent-text .tool .tool-status")).to_have_text(
            ["completed"]
        )

        await prompt(console, "/exit 0", 0)
        for page in (watcher, onlooker, latecomer):
            await expect(page.locator("#status")).to_have_text(
                "closed: 1000 (the connection ended: agent exited)"
            )
            await expect(page.locator("#again")).to_be_visible()
        await expect(console.locator("#status")).to_have_text(re.compile(r"^closed: 1000"))

    assert problems == []
    [taken] = relay.events("answer taken")
    assert taken["by"] == "watcher"
    assert [e["may_answer"] for e in relay.events("watcher attached")] == [True, False, False]
    assert len(relay.events("connection opened")) == 1  # the watch views opened none
    stderr = "\n".join(relay.stderr)
    assert console_token(answer_url) not in stderr


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_watch_view_says_why_it_cannot_watch(chromium: str, tmp_path: Path) -> None:
    """With sharing off, the console's share says so and offers no address; a watch address
    gets 404 from the watcher's ticket endpoint, says so, and offers to try again."""
    async with serve("--dev", "--agent", "cat", "--max-watchers", "0", env=clean_env()) as relay:
        url = await console_url(relay)
        async with browser(chromium, tmp_path / "profile") as context:
            problems: list[str] = []
            console = await open_console(context, url, problems)
            await console.click("#share")
            await expect(console.locator("#share-hint")).to_have_text(
                "sharing is off: the relay runs with --max-watchers 0"
            )
            await expect(console.locator("#share-watch")).to_be_hidden()
            page = await context.new_page()
            await page.goto(f"{url}&watch=00000000-0000-4000-8000-000000000000")
            await expect(page.locator("#status")).to_have_text(
                "could not watch: 404: sharing is off on this relay (--max-watchers 0)"
            )
            await expect(page.locator("#again")).to_be_visible()
    # a page's fetch that got 404 is logged by Chromium as an error; nothing else may be
    assert all("404" in p for p in problems), problems


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_console_shows_withheld_capabilities_and_translated_paths(
    chromium: str, tmp_path: Path
) -> None:
    """Under --files box with a --cwd-map rule, the console lists what the relay changed on
    its connection: fs and terminal withheld from initialize, session/new's cwd translated
    editor → box (the demo agent reports the box's), the /ask tool call's location box →
    editor; the lines stay as the two sides sent them, no more, no fewer."""
    box = tmp_path / "box"
    (box / "project").mkdir(parents=True)
    args = ("--dev", "--workspace", str(box), "--cwd-map", f"/Users/alice={box}")
    async with (
        serve(*args, env=clean_env()) as relay,
        browser(chromium, tmp_path / "profile") as context,
    ):
        problems: list[str] = []
        page = await open_console(context, await console_url(relay), problems)
        capabilities = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}
        initialize = {
            "jsonrpc": "2.0",
            "id": "raw-init",
            "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": capabilities},
        }
        await page.fill("#raw", json.dumps(initialize))
        await page.click("#send-raw")
        crossings = page.locator("#boundary-list li")
        await expect(crossings.locator(".what")).to_have_text(
            [
                "initialize: withheld the editor's fs, terminal (--files box: the agent uses "
                "the box's own files and terminal)"
            ]
        )
        await expect(page.locator("#boundary-none")).to_be_hidden()
        sent = json.loads(
            await rows(page, "to_agent", "initialize #raw-init").get_attribute("data-line") or ""
        )
        assert sent["params"]["clientCapabilities"] == capabilities  # the page's line, as sent

        await page.fill("#cwd", "/Users/alice/project")
        await page.click("#send-new")
        await expect(rows(page, "to_client", "result #1 (session/new)")).to_have_count(1)
        await expect(page.locator("#agent-text .agent").first).to_have_text(
            f"session started in {box}/project with MCP servers: (none)"
        )
        await expect(crossings.nth(1)).to_have_attribute("data-dir", "to_agent")
        await expect(crossings.nth(1).locator(".what")).to_have_text(
            f"session/new params.cwd: /Users/alice/project → {box}/project"
        )

        await prompt(page, "/ask", 0)
        await expect(page.locator("#asks .ask")).to_have_count(1)
        location = f"{box}/project/notes.md → /Users/alice/project/notes.md"
        await expect(crossings.locator(".what")).to_contain_text(
            [
                f"session/update params.update.locations[0].path: {location}",
                f"session/request_permission params.toolCall.locations[0].path: {location}",
            ]
        )
        await expect(crossings.nth(2)).to_have_attribute("data-dir", "to_client")
        ask = json.loads(
            await rows(page, "to_client", "session/request_permission").get_attribute("data-line")
            or ""
        )
        assert ask["params"]["toolCall"]["locations"] == [{"path": "/Users/alice/project/notes.md"}]
        await page.locator("#asks button", has_text="Reject").click()
        await expect(page.locator("#agent-text .agent").last).to_have_text("permission: reject")
        await expect(page.locator("#agent-text .tool .tool-status")).to_have_text(["failed"])
        await page.locator("#boundary-list").scroll_into_view_if_needed()
        save_artifact(await page.screenshot(), "console-boundary.png")
        to_agent = await rows(page, "to_agent").count()
        to_client = await rows(page, "to_client").count()
        await page.close()  # nothing more asked of a relay that stops
        assert await relay.stop() == 0
    assert problems == []
    [closed] = relay.events("connection closed")
    assert (closed["messages_in"], closed["messages_out"]) == (to_agent, to_client)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_watch_view_sees_the_controller_drop_and_resume(
    chromium: str, tmp_path: Path
) -> None:
    """The network under the console is reset: its watch view (reaching the relay directly)
    says the controller's socket was lost and the connection waits, then that it is back,
    and goes on showing the conversation."""
    async with (
        serve("--dev", env=clean_env()) as relay,
        NetCut(relay.port) as net,
        browser(chromium, tmp_path / "profile") as context,
    ):
        token = console_token(await console_url(relay))
        problems: list[str] = []
        console = await open_console(
            context, f"http://127.0.0.1:{net.port}/?token={token}", problems
        )
        await start_session(console)
        connection, watch_url, _ = await share_links(console)
        direct = watch_url.replace(f":{net.port}/", f":{relay.port}/")
        watcher = await open_watch(context, direct, problems)
        net.reset()
        lost = watcher.locator("#agent-text .note").filter(has_text="socket was lost")
        await expect(lost).to_have_text(
            re.compile(r"^the controller's socket was lost \(.+\): the connection waits 60 s")
        )
        await expect(events(console).filter(has_text=RESUMED)).to_have_count(1)
        await expect(watcher.locator("#agent-text .note").last).to_have_text(
            "the controller is back"
        )
        await expect(watcher.locator("#status")).to_have_text(f"watching {connection} (sees only)")
        await prompt(console, "after the cut", 3)
        await expect(watcher.locator("#agent-text .agent").last).to_have_text("after the cut")
        await expect(rows(watcher, "relay", "_acp-relay/detached")).to_have_count(1)
        await expect(rows(watcher, "relay", "_acp-relay/resumed")).to_have_count(1)
    assert problems == []


def test_the_consoles_transcript_reads_a_session_in_the_conversation_models_words() -> None:
    """The console's changeOf, run in Node on gemini-cli's recorded session, names each
    change it shows as relay.acp.conversation names the same line's."""
    if shutil.which("node") is None:
        pytest.skip("needs Node.js to run the console's module")
    lines = list(recorded(GEMINI_SESSION))
    script = (
        f"import {{ changeOf }} from {json.dumps(CONSOLE_MODULE.as_uri())};\n"
        "const pending = new Map(); const names = [];\n"
        "for (const [direction, message] of JSON.parse(process.argv[1])) {\n"
        "  if (direction === 'to_agent' && 'id' in message && 'method' in message)"
        " pending.set(message.id, message.method);\n"
        "  names.push(changeOf(direction, message, pending).change);\n"
        "}\nconsole.log(JSON.stringify(names));\n"
    )
    given = [
        ["to_agent" if side == "client" else "to_client", json.loads(line)] for side, line in lines
    ]
    ran = subprocess.run(
        ["node", "--input-type=module", "-e", script, json.dumps(given)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    conversation = Conversation()
    expected = [type(conversation.line(side, line)).__name__ for side, line in lines]  # type: ignore[arg-type]
    shown = {"Prompted", "Said", "ToolCallChanged", "TurnEnded"}
    assert json.loads(ran.stdout) == [name if name in shown else "Other" for name in expected]
    assert {"Prompted", "Said", "ToolCallChanged", "TurnEnded"} <= set(json.loads(ran.stdout))
