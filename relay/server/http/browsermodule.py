"""The browser module ``/acp-relay-resume.js``, served to the pages allowed to connect.

The module (``relay/server/http/web/acp-relay-resume.js``, package data) speaks the resume profile
for a page: its class has the browser ``WebSocket`` interface (docs/resume.md,
"Browsers"). Pages import it as an ES module, a CORS request: a page whose ``Origin``
the relay would let connect gets it with ``Access-Control-Allow-Origin`` for that
origin; any other origin gets ``403``; a request without ``Origin`` (a same-origin
script, a tool) gets it as it is. Served with or without ``--dev``.

Pure but for :func:`module_source`, which reads the file once from the installed package.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources

from websockets.http11 import Response

from relay.core.admission import origin_refusal
from relay.server.http.edge import response, text_response

MODULE_PATH = "/acp-relay-resume.js"
MODULE_FILE = "acp-relay-resume.js"
CONTENT_TYPE = "text/javascript; charset=utf-8"
REFUSED = "the module is only served to origins allowed to connect\n"


@cache
def module_source() -> bytes:
    """The module's bytes, as installed."""
    return (resources.files("relay.server.http") / "web" / MODULE_FILE).read_bytes()


def module_headers(origin: str | None) -> tuple[tuple[str, str], ...]:
    """Headers for the module: CORS for a page's origin (already judged allowed)."""
    headers = [("X-Content-Type-Options", "nosniff"), ("Vary", "Origin")]
    if origin is not None:
        headers.append(("Access-Control-Allow-Origin", origin))
    return tuple(headers)


def module_response(origin: str | None, allow_origins: Sequence[str]) -> Response:
    """The answer to ``GET /acp-relay-resume.js`` from a page of ``origin`` (None: no header)."""
    if origin_refusal(origin, allow_origins) is not None:
        return text_response(403, REFUSED, (("Vary", "Origin"),))
    return response(200, module_source(), CONTENT_TYPE, module_headers(origin))
