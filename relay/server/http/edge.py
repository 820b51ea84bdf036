"""The relay's HTTP edge: plain answers, and the guards websockets' server lacks.

websockets parses GET requests only: any other method has its connection dropped
without a word, so a Streamable-HTTP client (``POST /acp``) learns nothing; a TLS client
(``wss://`` to this plain port) waits in silence until the open timeout. And every
half-open handshake holds a file descriptor until the open timeout. The connection
class here answers other methods ``405`` and a TLS hello ``400`` itself (a TLS client
reports a plain HTTP answer as "wrong version number" at once), and counts handshakes
in progress (:class:`relay.core.handshake.HandshakeGate`), refusing those past the caps
with ``503`` before websockets reads them. The responses the relay writes are built here too.
"""

from __future__ import annotations

import asyncio
import http
import json
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Response

from relay.core.handshake import HandshakeGate
from relay.observe.logs import Logger, get_logger
from relay.observe.stats import RelayStats

MAX_REQUEST_LINE = 8192  # as websockets: a longer request line is its to refuse (414)
PLAIN_PORT = (
    "this port speaks plain HTTP and WebSocket (ws://), not TLS: use ws://, "
    "or put a TLS proxy in front of the relay"
)
TLS_HANDSHAKE = b"\x16"  # a TLS record's first byte; no HTTP request starts with it
REFUSAL_LOG_SECONDS = 10.0  # at most one log line per this many seconds per kind of refusal


def text_response(status: int, body: str, headers: Sequence[tuple[str, str]] = ()) -> Response:
    return response(status, body.encode(), "text/plain; charset=utf-8", headers)


def json_response(status: int, payload: object) -> Response:
    return response(status, json.dumps(payload).encode(), "application/json", ())


def response(
    status: int, body: bytes, content_type: str, extra: Sequence[tuple[str, str]]
) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
            ("Cache-Control", "no-store"),
            *extra,
        ]
    )
    return Response(status, http.HTTPStatus(status).phrase, headers, body)


def raw_response(status: int, body: str, extra: Sequence[tuple[str, str]] = ()) -> bytes:
    """A whole HTTP/1.1 response as bytes, for answers written before websockets reads."""
    payload = body.encode()
    lines = [
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(payload)}",
        "Connection: close",
        "Cache-Control: no-store",
        *(f"{name}: {value}" for name, value in extra),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def method_not_allowed(path: str, acp_path: str) -> bytes:
    """The answer to any method but GET: what the relay speaks, and where."""
    if path == acp_path:
        body = (
            f"{acp_path} speaks ACP's WebSocket profile only (GET with Upgrade: websocket); "
            "the Streamable HTTP profile is not offered\n"
        )
    else:
        body = "only GET is answered here\n"
    return raw_response(405, body, (("Allow", "GET"),))


def other_method(head: bytes) -> str | None:
    """The method of an HTTP request line other than GET; "" to let websockets read it.

    "" for GET, and for what is not an HTTP/1 request line at all (websockets drops that,
    or answers 414 past its limit); None while the line is not complete.
    """
    if head.startswith(b"GET "):
        return ""
    end = head.find(b"\r\n", 0, MAX_REQUEST_LINE)
    if end < 0:
        return None if len(head) < MAX_REQUEST_LINE else ""
    parts = head[:end].split(b" ")
    looks_http = len(parts) == 3 and parts[2].startswith(b"HTTP/1.")
    method = parts[0]
    if looks_http and method.isalpha() and method.isupper() and len(method) <= 16:
        return method.decode()
    return ""


class RateLimitedLog:
    """One warning per kind per REFUSAL_LOG_SECONDS, with how many were not logged."""

    def __init__(self, log: Logger, clock: Any = time.monotonic) -> None:
        self.log = log
        self.clock = clock
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def warning(self, event: str, **fields: Any) -> None:
        now = self.clock()
        if now - self._last.get(event, -REFUSAL_LOG_SECONDS) < REFUSAL_LOG_SECONDS:
            self._skipped[event] = self._skipped.get(event, 0) + 1
            return
        self._last[event] = now
        skipped = self._skipped.pop(event, 0)
        self.log.warning(event, **fields, **({"not_logged_since": skipped} if skipped else {}))


class GuardedConnection(ServerConnection):
    """A websockets server connection that answers non-GET methods and caps handshakes.

    :func:`guarded` makes a subclass bound to one relay's gate, log and endpoint path.
    """

    gate: HandshakeGate
    refusals: RateLimitedLog
    acp_path: str
    stats: RelayStats

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = b""
        self._checked = False
        self._address: str | None = None  # counted in the gate while set

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        why = self.gate.enter(address)
        if why is not None:
            self.stats.refusal("handshakes")
            self.refusals.warning("handshake refused", reason=why, remote=address)
            self._refuse(raw_response(503, f"relay busy: {why}; retry later\n"))
            return
        self._address = address

    def data_received(self, data: bytes) -> None:
        if self._checked:
            super().data_received(data)
            return
        self._head += data
        if self._head.startswith(TLS_HANDSHAKE):
            self.stats.refusal("bad_request")
            self.refusals.warning("TLS handshake refused", reason=PLAIN_PORT)
            self._refuse(raw_response(400, PLAIN_PORT + "\n"))
            return
        method = other_method(self._head)
        if method is None:
            return  # the request line is not complete yet
        if method:
            target = self._head.split(b" ", 2)[1].split(b"?", 1)[0].decode("latin-1")
            self.stats.refusal("method")
            self.refusals.warning("method not allowed", method=method)
            self._refuse(method_not_allowed(target, self.acp_path))
            return
        self._checked = True
        head, self._head = self._head, b""
        super().data_received(head)

    def _refuse(self, answer: bytes) -> None:
        self._checked = True
        self.transport.write(answer)
        self.transport.close()

    def handshake_done(self) -> None:
        """The handshake is over (accepted, refused or failed): it no longer counts."""
        # websockets binds serve()'s select_subprotocol in a closure over this connection:
        # a reference cycle that would keep every closed socket, buffers included, until
        # the collector's next full pass. The subprotocol is chosen by now.
        vars(self.protocol).pop("select_subprotocol", None)
        if self._address is not None:
            self.gate.leave(self._address)
            self._address = None

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().handshake(*args, **kwargs)
        finally:
            self.handshake_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self.handshake_done()
        super().connection_lost(exc)


def guarded(
    gate: HandshakeGate, log: Logger, acp_path: str, stats: RelayStats
) -> type[GuardedConnection]:
    """A :class:`GuardedConnection` class for one relay."""
    attributes = {
        "gate": gate,
        "refusals": RateLimitedLog(log),
        "acp_path": acp_path,
        "stats": stats,
    }
    return type("RelayConnection", (GuardedConnection,), attributes)


MAX_REQUEST_HEAD = 8192  # a metrics request's line and headers
METRICS_REQUESTS = 32  # metrics requests in progress at once, all scrapers together
METRICS_REQUESTS_PER_ADDRESS = 8  # ... from one address
METRICS_TIMEOUT = 10.0  # seconds a metrics request has, from connect to answer sent


def metrics_gate() -> HandshakeGate:
    """The caps of the metrics port: few scrapers ask it, one request at a time each."""
    return HandshakeGate(limit=METRICS_REQUESTS, per_address=METRICS_REQUESTS_PER_ADDRESS)


async def serve_metrics(
    host: str,
    port: int,
    render: Callable[[], tuple[bytes, str]],
    *,
    gate: HandshakeGate | None = None,
    request_seconds: float = METRICS_TIMEOUT,
) -> asyncio.Server:
    """A plain HTTP server answering ``GET /metrics`` (and 404 elsewhere) on its own port.

    Like the main port, it caps the requests in progress (``gate``, overall and per
    address; ``503`` past them) and gives each ``request_seconds`` in all: idle sockets
    cannot hold the file descriptors the main port needs.
    """
    gate = metrics_gate() if gate is None else gate
    refusals = RateLimitedLog(get_logger("relay.server"))

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        why = gate.enter(address)
        if why is not None:
            refusals.warning("metrics request refused", reason=why, remote=address)
            writer.write(raw_response(503, f"relay busy: {why}; retry later\n"))
            writer.close()
            return
        try:
            with suppress(TimeoutError, ConnectionError):
                async with asyncio.timeout(request_seconds):
                    await answer_metrics(reader, writer, render)
        finally:
            gate.leave(address)
            writer.close()

    return await asyncio.start_server(answer, host, port, limit=MAX_REQUEST_HEAD)


async def answer_metrics(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    render: Callable[[], tuple[bytes, str]],
) -> None:
    """Read one request head and answer it: the metrics for ``GET /metrics``."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) == 3 and parts[0] == b"GET" and parts[1].split(b"?")[0] == b"/metrics":
        body, content_type = render()
        writer.write(_raw(200, body, content_type))
    elif len(parts) == 3 and parts[0] != b"GET":
        writer.write(raw_response(405, "only GET is answered here\n", (("Allow", "GET"),)))
    else:
        writer.write(raw_response(404, "not found: this port serves /metrics\n"))
    await writer.drain()


def _raw(status: int, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\nCache-Control: no-store\r\n\r\n"
    )
    return head.encode() + body
