"""Tests for relay.server.http.edge: answers for other methods and the handshake cap, on a live
relay."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from relay.core.handshake import HandshakeGate
from relay.server.http.edge import (
    METRICS_REQUESTS_PER_ADDRESS,
    PLAIN_PORT,
    other_method,
    serve_metrics,
)
from tests.support.http import exchange, status_of
from tests.support.live import live_relay
from tests.support.waiting import until, until_async

CAT = ("cat",)


@pytest.mark.parametrize(
    ("head", "method"),
    [
        (b"GET /acp HTTP/1.1\r\n", ""),
        (b"GET ", ""),
        (b"POST /acp HTTP/1.1\r\nHost: x\r\n", "POST"),
        (b"DELETE /acp?x=1 HTTP/1.1\r\n", "DELETE"),
        (b"POST /acp HTTP/1.1", None),
        (b"\x16\x03\x01\x02\x00\r\n", ""),
        (b"GARBAGE / SPDY/9\r\n", ""),
        (b"x" * 9000, ""),
    ],
)
def test_other_method(head: bytes, method: str | None) -> None:
    """Only a complete HTTP/1 request line of another method is answered here."""
    assert other_method(head) == method


async def test_post_to_the_endpoint_gets_405_naming_the_websocket_profile() -> None:
    """A Streamable-HTTP client's POST /acp learns what the relay speaks, with Allow: GET."""
    async with live_relay(CAT) as live:
        request = b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
        answer = await exchange(live.relay.port, request, seconds=5)
    assert status_of(answer) == 405
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"\r\nAllow: GET" in head
    assert b"WebSocket profile only" in body


def client_hello() -> bytes:
    """The first bytes a TLS client sends (its ClientHello), as Python's ssl writes them."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def test_a_tls_handshake_gets_400_saying_the_port_is_plain_at_once() -> None:
    """A TLS client (wss:// to this ws:// port) is answered at once in plain HTTP, 400 with
    what the port speaks, instead of silence until the open timeout."""
    async with live_relay(CAT, open_timeout=60) as live:
        answer = await exchange(live.relay.port, client_hello(), seconds=5)
        assert await until(lambda: not live.relay.gate.total, seconds=5, what="handshake over")
    assert status_of(answer) == 400
    assert answer.endswith(b"\r\n\r\n" + PLAIN_PORT.encode() + b"\n")


async def test_handshakes_past_the_cap_get_503_and_the_relay_still_answers() -> None:
    """Half-open requests beyond the cap are refused at once; /healthz keeps answering."""
    async with live_relay(CAT) as live:
        live.relay.gate.per_address = 5
        held = [await asyncio.open_connection("127.0.0.1", live.relay.port) for _ in range(5)]
        for _, writer in held:
            writer.write(b"GET /acp HTTP/1.1\r\n")  # never finished
        answer = await exchange(live.relay.port, b"GET /healthz HTTP/1.1\r\n\r\n", seconds=5)
        assert status_of(answer) == 503
        assert b"handshakes in progress" in answer
        for _, writer in held:
            writer.close()
        await until(lambda: not live.relay.gate.total, seconds=5, what="no handshake held")
        answer = await exchange(
            live.relay.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", seconds=5
        )
    assert status_of(answer) == 200


async def test_idle_sockets_on_the_metrics_port_are_capped() -> None:
    """Idle sockets on --metrics-listen stop at the per-address cap: the next request gets
    503 at once, the main port answers meanwhile, and /metrics is served once they go."""
    async with live_relay(CAT, metrics_listen=("127.0.0.1", 0)) as live:
        port = live.relay.metrics_port
        assert port is not None
        held = [
            await asyncio.open_connection("127.0.0.1", port)
            for _ in range(METRICS_REQUESTS_PER_ADDRESS)
        ]
        answer = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n", seconds=5)
        assert status_of(answer) == 503
        assert b"in progress from 127.0.0.1" in answer
        healthz = await exchange(live.relay.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(healthz) == 200
        for _, writer in held:
            writer.close()

        async def served() -> bool:
            answer = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n", seconds=5)
            return status_of(answer) == 200

        await until_async(served, seconds=5, what="/metrics served once the idle sockets left")


async def test_an_idle_metrics_socket_is_closed_after_its_time() -> None:
    """A metrics socket that sends nothing is closed after the request time, and stops
    counting against the cap."""
    gate = HandshakeGate(limit=4, per_address=2)
    server = await serve_metrics(
        "127.0.0.1", 0, lambda: (b"", "text/plain"), gate=gate, request_seconds=0.2
    )
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # closed by the server, unanswered
        writer.close()
        await until(lambda: gate.total == 0, seconds=5, what="the idle socket uncounted")
    finally:
        server.close()
        await server.wait_closed()
