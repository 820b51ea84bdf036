"""Loopback servers that are not relays: for what ``acp-relay connect`` meets in the wild.

Each listens on 127.0.0.1 port 0 and yields its port: a TCP server answering with a
given coroutine (silence, a handshake then silence, plain HTTP to a TLS hello), and a
``wss://`` echo server with a throwaway self-signed certificate.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

Responder = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def loopback_server(respond: Responder) -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 answering each connection with ``respond``; its port."""
    held: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await respond(reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.transport.abort()
        server.close()


async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accept, and never answer (the connection is held until the server goes)."""


async def upgrade_then_fall_silent(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Complete the WebSocket handshake, then never read or answer a ping again."""
    head = await reader.readuntil(b"\r\n\r\n")
    key = next(
        line.split(b":", 1)[1].strip()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )
    await writer.drain()


async def answer_plain_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer whatever arrives (a TLS hello) with plain HTTP, as a server without TLS would."""
    await reader.read(1)
    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A throwaway certificate for 127.0.0.1 and its key, made with the openssl CLI."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=20,
    )  # fmt: skip
    return cert, key


@asynccontextmanager
async def tls_echo_server(cert: Path, key: Path) -> AsyncIterator[int]:
    """A wss:// WebSocket server on 127.0.0.1 that echoes every message; its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(message)

    async with ws_serve(echo, "127.0.0.1", 0, ssl=context) as server:
        yield next(iter(server.sockets)).getsockname()[1]
