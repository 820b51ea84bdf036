"""Sockets on 127.0.0.1: a free port, and what a WebSocket client saw (refused, echoed, closed)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, NamedTuple

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidStatus


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Refusal(NamedTuple):
    """The HTTP answer to an upgrade the relay refused."""

    status: int
    body: str
    headers: dict[str, str]


async def refused(url: str, seconds: float = 10, **kwargs: Any) -> Refusal:
    """Try to connect to ``url`` (``kwargs`` go to ``connect``); the refusal, which must come."""
    with pytest.raises(InvalidStatus) as caught:
        async with asyncio.timeout(seconds), connect(url, **kwargs):
            pass
    response = caught.value.response
    return Refusal(response.status_code, response.body.decode(), dict(response.headers.raw_items()))


async def round_trip(ws: ClientConnection, message: str = '{"jsonrpc":"2.0","method":"x"}') -> None:
    """Send a message through an echoing agent (``cat``) and check it comes back."""
    await ws.send(message)
    async with asyncio.timeout(10):
        assert await ws.recv() == message


async def one_echo(url: str) -> None:
    """Open a socket to an echoing agent, carry ``{}`` both ways, close it."""
    async with connect(url) as ws:
        await ws.send("{}")
        async with asyncio.timeout(5):
            assert await ws.recv() == "{}"


async def frames_until_closed(
    ws: ClientConnection, seconds: float = 10
) -> tuple[list[str], int | None, str | None]:
    """Every frame until the relay closes the socket, then its close code and reason."""
    received: list[str] = []
    async with asyncio.timeout(seconds):
        with suppress(ConnectionClosed):
            while True:
                received.append(str(await ws.recv()))
    return received, ws.close_code, ws.close_reason


async def closed_with(ws: ClientConnection, seconds: float = 10) -> tuple[int | None, str | None]:
    """Read until the relay closes the socket; its close code and reason."""
    _, code, reason = await frames_until_closed(ws, seconds)
    return code, reason


@asynccontextmanager
async def websocket_pair(
    max_size: int | None = 4 * 1024 * 1024,
) -> AsyncIterator[tuple[ServerConnection, ClientConnection]]:
    """A connected WebSocket: the relay's side and a client, over loopback TCP."""
    accepted: asyncio.Future[ServerConnection] = asyncio.get_running_loop().create_future()

    async def handler(conn: ServerConnection) -> None:
        accepted.set_result(conn)
        await conn.wait_closed()

    relay_side = serve(
        handler, "127.0.0.1", 0, max_size=max_size, close_timeout=1, compression=None
    )  # no compression, as the relay and connect use: bytes on the wire are the frame's
    async with relay_side as server:
        port = next(iter(server.sockets)).getsockname()[1]
        url = f"ws://127.0.0.1:{port}"
        async with connect(url, max_size=max_size, close_timeout=1, compression=None) as client:
            async with asyncio.timeout(5):
                conn = await accepted
            yield conn, client
