"""Tests for relay.server.http.browsermodule: ``/acp-relay-resume.js``, served to the origins
allowed to connect.

The module's behaviour in Node and Chromium is tests/server/http/test_browsermodule_js.py's.
"""

from __future__ import annotations

import re

import pytest

from relay.server.http.browsermodule import (
    CONTENT_TYPE,
    MODULE_PATH,
    REFUSED,
    module_headers,
    module_response,
    module_source,
)
from tests.support.http import http_get
from tests.support.live import live_relay


def test_module_source_is_the_packaged_es_module() -> None:
    """The packaged file is an ES module exporting the resuming class, with no imports."""
    text = module_source().decode()
    assert "export class ResumingWebSocket extends EventTarget" in text
    assert "export function resumingWebSocket(" in text
    assert 'export const PROFILE = "acp-relay.resume.v1";' in text
    assert not re.search(r"^\s*import\s", text, re.MULTILINE)  # dependency-free


@pytest.mark.parametrize(
    ("origin", "cors"),
    [(None, None), ("http://127.0.0.1:5173", "http://127.0.0.1:5173")],
)
def test_module_headers_allow_the_page_origin(origin: str | None, cors: str | None) -> None:
    """A page's origin (already judged allowed) gets CORS for itself; no Origin gets none."""
    headers = dict(module_headers(origin))
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Vary"] == "Origin"
    assert headers.get("Access-Control-Allow-Origin") == cors


@pytest.mark.parametrize(
    ("origin", "allowed", "status"),
    [
        (None, (), 200),  # a same-origin script or a tool
        ("http://localhost:3000", (), 200),  # loopback pages may connect by default
        ("https://app.example", ("https://app.example",), 200),
        ("https://app.example", (), 403),
        ("https://evil.example", ("https://app.example",), 403),
        ("https://x.app.example", ("https://*.app.example",), 200),
    ],
)
def test_module_is_served_to_the_origins_allowed_to_connect(
    origin: str | None, allowed: tuple[str, ...], status: int
) -> None:
    """200 with the module for an origin the relay lets connect (or none); 403 otherwise."""
    answer = module_response(origin, allowed)
    assert answer.status_code == status
    if status == 200:
        assert answer.body == module_source()
        assert answer.headers["Content-Type"] == CONTENT_TYPE
        assert answer.headers.get("Access-Control-Allow-Origin") == origin
    else:
        assert answer.body == REFUSED.encode()
        assert "Access-Control-Allow-Origin" not in answer.headers
    assert answer.headers["Vary"] == "Origin"


async def test_relay_serves_the_module_without_dev() -> None:
    """A relay serves GET /acp-relay-resume.js with or without --dev, never cached."""
    async with live_relay(("cat",)) as live:
        status, headers, body = await http_get(live.relay.port, MODULE_PATH)
    assert status == 200
    assert headers["content-type"] == CONTENT_TYPE
    assert headers["cache-control"] == "no-store"
    assert body.encode() == module_source()
