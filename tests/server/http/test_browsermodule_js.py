"""The browser module ``relay/server/http/web/acp-relay-resume.js`` and the ACP TypeScript SDK,
for real.

The official SDK (``@agentclientprotocol/sdk`` 2.4.0, pinned in ``tests/web``) runs an ACP
session against a live relay (``acp-relay serve``, the demo agent): in Node through
``tests/web/node-client.mjs``, and in Chromium from a page on another loopback origin.
Its ``createWebSocketStream`` gets either the platform's socket with ``protocols:
["acp.v1", "acp-ticket.<ticket>"]`` (no ticket in the URL) or the module's resuming class;
a TCP proxy (:mod:`tests.support.netcut`) cuts the network mid-answer.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from playwright.async_api import BrowserContext, Page

from tests.support.agents import DEMO_AGENT, STREAM
from tests.support.browser import Answer, browser, page_server, require_chromium
from tests.support.cli import RelayRun, serve
from tests.support.env import secret_env
from tests.support.live import SECRET, make_ticket
from tests.support.netcut import NetCut
from tests.support.web import (
    NODE_MODULES,
    RESUME_MODULE,
    WEB,
    node_client,
    require_node_packages,
    ticket_command,
    words,
)

WORD_DELAY = 0.01  # seconds before each streamed word: a long answer takes a while
LONG = 400  # words in the long answer


def slow_demo(delay: float = WORD_DELAY) -> str:
    """--agent for the demo agent streaming one word every ``delay`` seconds."""
    return shlex.join([*DEMO_AGENT, "--word-delay", str(delay)])


def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    return path


def assert_no_ticket_logged(relay: RelayRun, tickets: list[str]) -> None:
    """No ticket, nor its signature, appears in the relay's log."""
    stderr = "\n".join(relay.stderr)
    for ticket in tickets:
        assert ticket not in stderr
        assert ticket.rsplit(".", 1)[-1] not in stderr


def session_chunks(result: dict[str, Any]) -> list[str]:
    """The prompt's chunks: those after the demo agent's 'session started' report."""
    chunks: list[str] = result["chunks"]
    assert chunks[0].startswith("session started in ")
    return chunks[1:]


def module_args(url: str, tmp_path: Path, prompt: str) -> dict[str, Any]:
    """What the Node client needs to prompt through the resume module at ``url``."""
    return {
        "url": url,
        "cwd": str(tmp_path),
        "prompt": prompt,
        "module": str(RESUME_MODULE),
        "ticketCommand": ticket_command(secret_file(tmp_path)),
    }


@pytest.fixture
def node_packages() -> Path:
    """tests/web/node_modules: the SDK, ws and zod, installed from the lock file."""
    return require_node_packages()


# -- the SDK's own socket: acp.v1 and the ticket as a subprotocol ----------------------


@pytest.mark.slow
async def test_node_sdk_with_acp_v1_and_a_ticket_subprotocol(
    node_packages: Path, tmp_path: Path
) -> None:
    """The SDK's client over Node's ws, offering acp.v1 and acp-ticket.<ticket> with no ticket
    in the URL, runs a whole session; the ticket never reaches the log."""
    prompt, chunks = words(20)
    async with serve("--agent", shlex.join(DEMO_AGENT), env=secret_env()) as relay:
        ticket = make_ticket()
        args = {
            "url": relay.url,
            "protocols": ["acp.v1", f"acp-ticket.{ticket}"],
            "cwd": str(tmp_path),
            "prompt": prompt,
        }
        async with node_client(args) as node:
            result = await node.result()
        assert (result["agent"], result["stopReason"]) == ("acp-relay-demo", "end_turn")
        assert session_chunks(result) == list(chunks)
        opened = await relay.wait_event("connection opened")
        assert opened[0]["subject"] == "tester"
        closed = await relay.wait_event("connection closed")
        assert closed[0]["exit_status"] == 0
    assert_no_ticket_logged(relay, [ticket])


@pytest.mark.slow
async def test_node_sdk_ticket_subprotocol_is_single_use(
    node_packages: Path, tmp_path: Path
) -> None:
    """A ticket carried as a subprotocol is spent like any other: a second socket gets 401."""
    async with serve("--agent", shlex.join(DEMO_AGENT), env=secret_env()) as relay:
        ticket = make_ticket()
        args = {
            "url": relay.url,
            "protocols": ["acp.v1", f"acp-ticket.{ticket}"],
            "cwd": str(tmp_path),
            "prompt": "once",
        }
        async with node_client(args) as node:
            await node.result()
        async with node_client(args) as again:
            await again.wait_for(lambda: bool(again.events("error")), "an error")
        assert "401" in again.events("error")[0]["message"]
        refused = await relay.wait_event("connection refused")
        assert refused[0]["status"] == 401
        assert "already used" in refused[0]["reason"]


# -- the SDK through the resuming module ------------------------------------------------


@pytest.mark.slow
async def test_node_sdk_through_the_module(node_packages: Path, tmp_path: Path) -> None:
    """The module's class as the SDK's WebSocket: the relay selects the resume profile, the
    SDK sees plain ACP, and the close ends the connection at once (1000)."""
    prompt, chunks = words(20)
    async with serve("--agent", shlex.join(DEMO_AGENT), env=secret_env()) as relay:
        args = module_args(relay.url, tmp_path, prompt)
        async with node_client(args) as node:
            result = await node.result()
        assert session_chunks(result) == list(chunks)
        assert node.events("resuming") == []
        closed = await relay.wait_event("connection closed")
        assert (closed[0]["close_code"], closed[0]["exit_status"]) == (1000, 0)
        assert relay.events("connection detached") == []


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_node_sdk_resumes_across_a_network_cut(node_packages: Path, tmp_path: Path) -> None:
    """A reset mid-answer: the module resumes with a fresh ticket, the SDK gets every chunk once,
    in order, from the same agent and session, and the relay logged one resume."""
    prompt, chunks = words(LONG)
    async with (
        serve("--agent", slow_demo(), env=secret_env()) as relay,
        NetCut(relay.port) as net,
    ):
        args = module_args(net.url(), tmp_path, prompt)
        async with node_client(args) as node:
            await node.wait_for(lambda: node.chunks() >= LONG // 4, "a quarter of the answer")
            net.reset()
            result = await node.result(60)
        assert session_chunks(result) == list(chunks)
        assert result["stopReason"] == "end_turn"
        [resuming] = node.events("resuming")
        assert resuming["reason"] == "lost (no close frame)"
        [resumed] = node.events("resumed")
        assert resumed["seconds"] > 0
        assert resumed["replayed"] >= 0
        assert resumed["resent"] == 0
        assert len(node.events("session")) == 1
        opened = relay.events("connection opened")
        assert len(opened) == 1
        [relay_resumed] = await relay.wait_event("connection resumed")
        assert relay_resumed["connection_id"] == opened[0]["connection_id"]
        closed = await relay.wait_event("connection closed")
        assert (closed[0]["close_code"], closed[0]["exit_status"]) == (1000, 0)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_node_sdk_resumes_after_a_silent_drop(node_packages: Path, tmp_path: Path) -> None:
    """Packets vanish mid-answer: the relay's keepalive gives the socket up and detaches; when
    the network comes back its 1011 'keepalive ping timeout' reaches the module, which resumes
    and the SDK gets every chunk once, in order."""
    prompt, chunks = words(LONG)
    keepalive = ("--ping-interval", "0.5", "--ping-timeout", "0.5")
    async with (
        serve("--agent", slow_demo(0.02), *keepalive, env=secret_env()) as relay,
        NetCut(relay.port) as net,
    ):
        args = module_args(net.url(), tmp_path, prompt)
        async with node_client(args) as node:
            await node.wait_for(lambda: node.chunks() >= 20, "20 chunks")
            net.blackhole()
            await relay.wait_event("connection detached")
            net.restore()
            result = await node.result(60)
        assert session_chunks(result) == list(chunks)
        [resuming] = node.events("resuming")
        assert resuming["reason"] == "closed with 1011: keepalive ping timeout"
        assert len(node.events("resumed")) == 1
        assert len(relay.events("connection opened")) == 1


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_node_sdk_message_sent_while_resuming_arrives_once(
    node_packages: Path, tmp_path: Path
) -> None:
    """A session/cancel the SDK sends while the socket is lost is kept, sent after the resume,
    and reaches the agent once: the prompt ends cancelled with an in-order prefix of the words."""
    prompt, chunks = words(LONG)
    async with (
        serve("--agent", slow_demo(0.02), env=secret_env()) as relay,
        NetCut(relay.port) as net,
    ):
        args = module_args(net.url(), tmp_path, prompt) | {"cancelOnResuming": True}
        async with node_client(args) as node:
            await node.wait_for(lambda: node.chunks() >= 20, "20 chunks")
            net.reset()
            result = await node.result(60)
        assert result["stopReason"] == "cancelled"
        got = session_chunks(result)
        assert 20 <= len(got) < LONG
        assert got == list(chunks[: len(got)])
        [resumed] = node.events("resumed")
        assert resumed["resent"] == 1  # the cancel, numbered while no socket was up
        [relay_resumed] = await relay.wait_event("connection resumed")
        assert relay_resumed["messages_resent"] == 1


def test_module_pure_functions_in_node(node_packages: Path) -> None:
    """The module's wire functions (frames, welcome, backoff, which closes resume, UTF-8
    lengths) pass their table in Node (tests/web/module-units.mjs)."""
    done = subprocess.run(
        ["node", str(WEB / "module-units.mjs"), str(RESUME_MODULE)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("checks passed")


# -- in Chromium: the SDK from a page of another loopback origin ------------------------

SCRIPT = "text/javascript; charset=utf-8"


def sdk_pages(path: str) -> Answer | None:
    """The test page, the SDK's files from tests/web/node_modules, and fresh tickets."""
    route = urlsplit(path).path
    if route == "/ticket":
        return 200, "text/plain", make_ticket().encode()
    if route == "/sdk.html":
        return 200, "text/html; charset=utf-8", (WEB / "sdk-page.html").read_bytes()
    if route == "/reload.html":
        return 200, "text/html; charset=utf-8", (WEB / "reload-page.html").read_bytes()
    if route == "/sdk-session.mjs":
        return 200, SCRIPT, (WEB / "sdk-session.mjs").read_bytes()
    file = (NODE_MODULES / route.removeprefix("/node_modules/")).resolve()
    if file.is_relative_to(NODE_MODULES) and file.suffix == ".js" and file.is_file():
        return 200, SCRIPT, file.read_bytes()
    return None


def sdk_origin() -> AbstractContextManager[str]:
    """A loopback HTTP server for the SDK's page (an origin the relay allows by default)."""
    return page_server(sdk_pages)


async def open_sdk_page(
    context: BrowserContext, origin: str, params: dict[str, Any], sockets: list[str]
) -> Page:
    """The SDK page, running one session with ``params``; the URLs of its WebSockets go
    into ``sockets``; page errors fail the test."""
    page = await context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("websocket", lambda ws: sockets.append(ws.url))
    await page.goto(f"{origin}/sdk.html#{quote(json.dumps(params))}")
    assert problems == []
    return page


async def sdk_result(page: Page, seconds: float = 30) -> dict[str, Any]:
    """The page's session result, once its title says done."""
    await page.wait_for_function("document.title === 'done'", timeout=seconds * 1000)
    failure = await page.evaluate("window.failure")
    assert failure is None, failure
    result: dict[str, Any] = await page.evaluate("window.result")
    return result


@pytest.fixture
def chromium() -> str:
    """Debian's chromium, installed by the project's test setup if missing."""
    return require_chromium()


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_chromium_sdk_with_acp_v1_and_a_ticket_subprotocol(
    node_packages: Path, chromium: str, tmp_path: Path
) -> None:
    """In Chromium, the SDK with the browser's own WebSocket offering acp.v1 and
    acp-ticket.<ticket> runs a session: no ticket in any URL, none in the log."""
    prompt, chunks = words(20)
    async with (
        serve("--agent", shlex.join(DEMO_AGENT), env=secret_env()) as relay,
        browser(chromium, tmp_path / "profile") as context,
    ):
        ticket = make_ticket()
        params = {
            "url": relay.url,
            "protocols": ["acp.v1", f"acp-ticket.{ticket}"],
            "cwd": str(tmp_path),
            "prompt": prompt,
        }
        with sdk_origin() as origin:
            sockets: list[str] = []
            page = await open_sdk_page(context, origin, params, sockets)
            result = await sdk_result(page)
        assert session_chunks(result) == list(chunks)
        assert sockets == [relay.url]
        opened = await relay.wait_event("connection opened")
        assert opened[0]["subject"] == "tester"
    assert_no_ticket_logged(relay, [ticket])


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_chromium_sdk_resumes_through_the_relays_module(
    node_packages: Path, chromium: str, tmp_path: Path
) -> None:
    """In Chromium, a page of another origin imports the module from the relay (CORS), hands
    its class to the SDK, and a network reset mid-answer loses and doubles no chunk."""
    prompt, chunks = words(LONG)
    async with (
        serve("--agent", slow_demo(), env=secret_env()) as relay,
        NetCut(relay.port) as net,
        browser(chromium, tmp_path / "profile") as context,
    ):
        module = f"http://127.0.0.1:{relay.port}/acp-relay-resume.js"
        params = {"url": net.url(), "cwd": str(tmp_path), "prompt": prompt, "module": module}
        with sdk_origin() as origin:
            sockets: list[str] = []
            page = await open_sdk_page(context, origin, params, sockets)
            await page.wait_for_function(
                f"window.progress && window.progress.chunks >= {LONG // 4}"
            )
            net.reset()
            result = await sdk_result(page, 60)
            events = await page.evaluate("window.progress.events")
        assert session_chunks(result) == list(chunks)
        assert [e["event"] for e in events] == ["resuming", "resumed"]
        assert sockets == [net.url(), net.url()]  # no ticket in either URL
        assert len(relay.events("connection opened")) == 1
        await relay.wait_event("connection resumed")
        closed = await relay.wait_event("connection closed")
        assert (closed[0]["close_code"], closed[0]["exit_status"]) == (1000, 0)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_chromium_reloaded_page_resumes_from_session_storage(
    chromium: str, tmp_path: Path
) -> None:
    """With storage: sessionStorage a page reloaded mid-stream resumes the same connection
    (same agent): together the two loads see every record, in order, none skipped."""
    total = 3000
    agent = shlex.join([*STREAM, str(total), "0.05"])
    async with (
        serve("--agent", agent, env=secret_env()) as relay,
        browser(chromium, tmp_path / "profile") as context,
    ):
        module = f"http://127.0.0.1:{relay.port}/acp-relay-resume.js"
        params = {"url": relay.url, "module": module, "total": total}
        with sdk_origin() as origin:
            page = await context.new_page()
            await page.goto(f"{origin}/reload.html#{quote(json.dumps(params))}")
            await page.wait_for_function("window.got && window.got.length >= 300")
            assert await page.evaluate("window.opened.fromStorage") is False
            await page.reload()
            await page.wait_for_function("document.title === 'done'", timeout=30_000)
            first: list[int] = await page.evaluate("window.before")
            second: list[int] = await page.evaluate("window.got")
            assert await page.evaluate("window.opened.fromStorage") is True
            assert await page.evaluate("window.pids.size") == 1
        assert first == list(range(len(first)))
        assert second == list(range(second[0], total))
        assert second[0] <= len(first)  # what the first load had not acknowledged comes again
        assert len(relay.events("connection opened")) == 1
        [resumed] = await relay.wait_event("connection resumed")
        assert resumed["connection_id"] == relay.events("connection opened")[0]["connection_id"]
