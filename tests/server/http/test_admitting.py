"""relay.server.http.admitting: what the relay answers before the upgrade, through a live relay."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from relay.core.resumeprofile import PROFILE
from tests.support.http import busy, http_get, status_line, upgrade_request
from tests.support.live import SECRET, live_relay, make_ticket
from tests.support.processes import agents_running
from tests.support.sockets import refused

CAT = ("cat",)
MiB = 1024 * 1024


@pytest.mark.parametrize(
    ("ticket", "reason"),
    [
        (lambda: None, "no ticket"),
        (lambda: "garbage", "malformed ticket"),
        (lambda: make_ticket("another-secret"), "ticket signature is invalid"),
        (lambda: make_ticket(now=time.time() - 3600), "ticket expired"),
        (lambda: make_ticket(audience="other-box"), "ticket is for another audience"),
    ],
    ids=["none", "garbage", "signature", "expired", "audience"],
)
async def test_bad_tickets_get_401_and_no_agent(
    ticket: Callable[[], str | None], reason: str
) -> None:
    """Every bad ticket is refused with 401 and a reason, and no agent starts."""
    async with live_relay(CAT, audience="this-box") as live:
        status, body, _ = await refused(live.url(ticket()))
        assert agents_running() == []
    assert status == 401
    assert reason in body


async def test_replayed_ticket_is_refused() -> None:
    """A ticket works once; the second use gets 401."""
    ticket = make_ticket()
    async with live_relay(CAT) as live:
        async with connect(live.url(ticket)):
            pass
        status, body, _ = await refused(live.url(ticket))
    assert (status, body.strip()) == (
        401,
        "ticket was already used: tickets are single-use, get a new one",
    )


async def test_secret_rotation() -> None:
    """Tickets signed with any configured secret are accepted."""
    async with live_relay(CAT, secrets=("new-secret-abcdef", SECRET)) as live:
        for secret in ("new-secret-abcdef", SECRET):
            async with connect(live.url(make_ticket(secret))) as ws:
                await ws.send("{}")
                async with asyncio.timeout(5):
                    assert await ws.recv() == "{}"


@pytest.mark.parametrize(
    ("allow", "origin", "status"),
    [
        ((), "https://evil.example", 403),
        ((), "http://localhost:3000", 101),
        (("https://*.example.com",), "https://app.example.com", 101),
        (("https://*.example.com",), "https://example.com.evil.net", 403),
    ],
)
async def test_origin_checked(allow: tuple[str, ...], origin: str, status: int) -> None:
    """A browser Origin must be allowed; refused ones get 403 before any agent starts."""
    async with live_relay(CAT, allow_origins=allow) as live:
        url = live.ticket_url()
        if status == 101:
            async with connect(url, origin=origin):  # type: ignore[arg-type]
                return
        got, body, _ = await refused(url, origin=origin)
        assert agents_running() == []
    assert got == status
    assert f"origin {origin} is not allowed" in body


async def test_full_relay_answers_503_with_retry_after() -> None:
    """At --max-connections a new socket gets 503 with Retry-After, and no agent."""
    async with (
        live_relay(CAT, max_connections=2) as live,
        connect(live.ticket_url()),
        connect(live.ticket_url()),
    ):
        before = agents_running()
        status, body, headers = await refused(live.ticket_url())
        assert agents_running() == before
    assert status == 503
    assert headers["Retry-After"] == "5"
    assert "limit of 2 connections" in body


async def test_other_paths_404_healthz_and_busy() -> None:
    """Unknown paths get 404; /healthz says ok; /busy counts open sockets."""
    async with live_relay(CAT) as live:
        status, body, _ = await refused(live.url(make_ticket(), path="/elsewhere"))
        assert (status, "the ACP endpoint is /acp" in body) == (404, True)
        healthz = await http_get(live.relay.port, "/healthz")
        assert (healthz.status, healthz.body) == (200, "ok\n")
        idle = json.loads((await http_get(live.relay.port, "/busy")).body)
        async with connect(live.ticket_url()):
            busy = json.loads((await http_get(live.relay.port, "/busy")).body)
    assert (idle["busy"], idle["connections"]) == (False, 0)
    assert isinstance(idle["idle_seconds"], float)
    assert busy == {
        "busy": True,
        "connections": 1,
        "detached": 0,
        "warm": 0,
        "watchers": 0,
        "idle_seconds": None,
    }


async def test_acp_v1_is_selected_and_a_ticket_can_ride_as_a_subprotocol() -> None:
    """acp.v1 is selected when offered; acp-ticket.<ticket> admits and is never echoed."""
    async with live_relay(CAT) as live:
        offered = ["acp.v1", f"acp-ticket.{make_ticket()}"]
        async with connect(live.url(), subprotocols=offered) as ws:  # type: ignore[arg-type]
            assert ws.subprotocol == "acp.v1"
            assert ws.response is not None
            assert ws.response.headers["Sec-WebSocket-Protocol"] == "acp.v1"
            await ws.send("{}")
            async with asyncio.timeout(5):
                assert await ws.recv() == "{}"


async def http_get_upgrade_like(port: int, url: str, extra: dict[str, Any]) -> int:
    """Send an upgrade request for ``url`` changed by ``extra``; the HTTP status answered."""
    target = url.split(str(port), 1)[1]
    headers = [f"{k}: {v}" for k, v in extra.get("additional_headers", {}).items()]
    if "subprotocols" in extra:
        headers.append("Sec-WebSocket-Protocol: " + ", ".join(extra["subprotocols"]))
    return await status_line(port, upgrade_request(target, *headers))


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"subprotocols": ["graphql-ws"]}, 400),
        ({"additional_headers": {"Sec-WebSocket-Version": "12"}}, 426),
    ],
)
async def test_requests_that_cannot_become_sockets_do_not_spend_the_ticket(
    extra: dict[str, Any], status: int
) -> None:
    """An unknown subprotocol or a wrong version is refused, and the ticket still works."""
    async with live_relay(CAT) as live:
        url = live.ticket_url()
        raw = await http_get_upgrade_like(live.relay.port, url, extra)
        assert raw == status
        async with connect(url) as ws:
            await ws.send("{}")
            async with asyncio.timeout(5):
                assert await ws.recv() == "{}"


async def test_a_get_without_upgrade_gets_426_and_keeps_the_ticket() -> None:
    """GET /acp?ticket=T without Upgrade is 426; T then opens a socket as if new."""
    async with live_relay(CAT) as live:
        url = live.ticket_url()
        target = url.split(str(live.relay.port), 1)[1]
        status, _, body = await http_get(live.relay.port, target)
        assert (status, "WebSocket only" in body) == (426, True)
        async with connect(url) as ws:
            await ws.send("{}")
            async with asyncio.timeout(5):
                assert await ws.recv() == "{}"


async def test_401_says_bearer() -> None:
    """A refused ticket's 401 carries WWW-Authenticate: Bearer with why."""
    async with live_relay(CAT) as live:
        status, _, headers = await refused(live.url("garbage"))
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('Bearer realm="acp-relay", error="invalid_token"')
    assert "malformed" in headers["WWW-Authenticate"]


async def test_a_header_given_twice_is_400_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two Host headers get 400 and one log line, on any path."""
    async with live_relay(CAT) as live:
        for path in ("/acp", "/busy"):
            request = f"GET {path} HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".encode()
            assert await status_line(live.relay.port, request) == 400
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


@pytest.mark.parametrize("path", ["/wrong", "/healthz", "/busy", "/metrics"])
async def test_an_upgrade_to_another_path_is_404_and_logged(
    caplog: pytest.LogCaptureFixture, path: str
) -> None:
    """A WebSocket upgrade to the wrong path, the plain endpoints' included, is refused 404
    and logged like other refusals."""
    async with live_relay(CAT) as live:
        status, body, _ = await refused(live.url(make_ticket(), path=path))
    assert (status, "the ACP endpoint is /acp" in body) == (404, True)
    assert any("connection refused" in str(r.msg) and "404" in str(r.msg) for r in caplog.records)


async def test_with_a_state_dir_a_used_ticket_stays_used_after_a_restart(tmp_path: Path) -> None:
    """A ticket spent before a restart is refused after it; without the directory it is not."""
    ticket = make_ticket()
    async with live_relay(CAT, state_dir=str(tmp_path)) as live, connect(live.url(ticket)):
        pass
    async with live_relay(CAT, state_dir=str(tmp_path)) as live:
        status, body, _ = await refused(live.url(ticket))
    assert (status, "already used" in body) == (401, True)
    async with live_relay(CAT) as live, connect(live.url(ticket)) as ws:  # memory only
        assert ws.subprotocol is None


async def test_resume_profile_sockets_count_before_their_open_frame() -> None:
    """Sockets of the resume profile count against --max-connections from admission, before
    their open frame, and /busy says so: a supervisor never freezes a box about to work."""
    async with live_relay(CAT, max_connections=4, resume_grace=30) as live:
        sockets = [
            await connect(live.ticket_url(), subprotocols=[PROFILE])  # type: ignore[list-item]
            for _ in range(4)
        ]
        report = await busy(live.relay.port)
        status, body, _ = await refused(live.ticket_url(), subprotocols=[PROFILE])
        for ws in sockets:
            await ws.close()
    assert (report["busy"], report["connections"]) == (True, 4)
    assert status == 503
    assert "limit of 4" in body
