"""Loopback servers that are not relays: for what ``acp-relay connect`` meets in the wild.

Each listens on 127.0.0.1 port 0 and yields its port: a TCP server answering with a
given coroutine (silence, a handshake then silence, plain HTTP to a TLS hello), a
``wss://`` echo server with a throwaway self-signed certificate, and a hostile relay
(:func:`hostile_relay`): a WebSocket server speaking just enough of the relay's side,
plain or resume profile, to break it in the ways a test chooses.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from relay.core.resumeprofile import PROFILE

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


# -- a hostile relay -------------------------------------------------------------------------

Behaviour = Callable[["HostileSocket"], Awaitable[None]]


@dataclass
class HostileSocket:
    """One socket a hostile relay accepted, as its behaviour drives it."""

    ws: ServerConnection
    index: int  # 0 for the first socket the relay accepted
    accepted_at: float  # time.monotonic()

    @property
    def resumable(self) -> bool:
        """Whether connect offered the resume profile (and this relay selected it)."""
        return self.ws.subprotocol == PROFILE

    async def welcome(self, **fields: Any) -> dict[str, Any]:
        """Read connect's open or resume frame and answer with a welcome; the frame read.

        ``fields`` replace the welcome's (a hostile ``grace``, say); its ``next`` follows
        the resume's ``ack``, its ``received`` the resume's ``sent``. An infinite value is
        written as ``1e999``, the JSON number a parser reads as infinity (JSON has no
        ``Infinity``).
        """
        first = json.loads(await self.ws.recv())
        welcome = {
            "type": "welcome",
            "connection": "hostile-1",
            "secret": f"secret-{self.index}",
            "resumed": first["type"] == "resume",
            "received": first.get("sent", 0),
            "next": first.get("ack", 0) + 1,
            "grace": 60,
            "window": 1024,
        }
        welcome.update(fields)
        text = json.dumps(welcome).replace("Infinity", "1e999")
        await self.ws.send(text)
        return dict(first)

    async def message(self) -> bytes:
        """connect's next message (the line the editor wrote), past acknowledgements alone."""
        while True:
            frame = await self.ws.recv(decode=False)
            _, newline, body = frame.partition(b"\n")
            if newline:
                return body

    def drop(self) -> None:
        """Hang up without a close frame, as a lost network would."""
        self.ws.transport.abort()

    async def close_received(self) -> tuple[int, str] | None:
        """The close frame connect sent (code, reason), once the socket is closed."""
        await self.ws.wait_closed()
        close = self.ws.protocol.close_rcvd
        return None if close is None else (int(close.code), close.reason)


@dataclass
class HostileRelay:
    """A relay of a test's own; ``sockets`` every socket it accepted, in order."""

    port: int
    sockets: list[HostileSocket] = field(default_factory=list)
    closes: list[tuple[int, str] | None] = field(default_factory=list)  # connect's, in order

    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/acp"

    def accepted_since(self, since: float) -> int:
        """How many sockets it accepted from ``since`` (time.monotonic()) on."""
        return sum(s.accepted_at >= since for s in self.sockets)


def _profile_or_plain(offered: Sequence[Subprotocol], resumes: bool) -> Subprotocol | None:
    """The resume profile when offered (and ``resumes``), else acp.v1 when offered, else none
    (as the relay)."""
    for name in (PROFILE, "acp.v1") if resumes else ("acp.v1",):
        if name in offered:
            return Subprotocol(name)
    return None


@asynccontextmanager
async def hostile_relay(
    behaviour: Behaviour, *, plain_from: int | None = None
) -> AsyncIterator[HostileRelay]:
    """A WebSocket server on 127.0.0.1 standing in for a relay: it takes any ticket, selects
    the resume profile when offered (acp.v1 otherwise; acp.v1 only from its ``plain_from``th
    socket on, as a relay restarted without resuming) and runs ``behaviour`` on each socket,
    then records the close frame connect sent."""
    relay = HostileRelay(0)

    def select(connection: ServerConnection, offered: Sequence[Subprotocol]) -> Subprotocol | None:
        resumes = plain_from is None or len(relay.sockets) < plain_from
        return _profile_or_plain(offered, resumes)

    async def handle(ws: ServerConnection) -> None:
        sock = HostileSocket(ws, len(relay.sockets), time.monotonic())
        relay.sockets.append(sock)
        with suppress(ConnectionClosed):
            await behaviour(sock)
        relay.closes.append(await sock.close_received())

    async with ws_serve(
        handle, "127.0.0.1", 0, select_subprotocol=select, compression=None
    ) as server:
        relay.port = next(iter(server.sockets)).getsockname()[1]
        yield relay
