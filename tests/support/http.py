"""Raw HTTP/1.1 on 127.0.0.1: plain GETs, WebSocket upgrade requests, answers read whole;
and a server answering each request with what a function makes of it.

Raw bytes on a socket, so that a test can send what no client library would (half a
request, a header twice, a TLS hello) and read exactly what the relay answered. The
server (:func:`http_server`) stands in for the model APIs real agents call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, NamedTuple

WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def upgrade_request(target: str, *headers: str) -> bytes:
    """A WebSocket upgrade request for ``target`` with extra ``headers`` ("Name: value");
    one named like a standard header of the upgrade replaces it."""
    standard = {
        "host": "Host: 127.0.0.1",
        "upgrade": "Upgrade: websocket",
        "connection": "Connection: Upgrade",
        "sec-websocket-key": f"Sec-WebSocket-Key: {WS_KEY}",
        "sec-websocket-version": "Sec-WebSocket-Version: 13",
    }
    extra = []
    for header in headers:
        name = header.split(":", 1)[0].strip().lower()
        if name in standard:
            standard[name] = header
        else:
            extra.append(header)
    lines = [f"GET {target} HTTP/1.1", *standard.values(), *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def exchange(port: int, request: bytes, seconds: float = 5.0) -> bytes:
    """Send ``request`` on a new connection; everything answered until the relay closes it.

    Raises TimeoutError if the relay neither answers nor closes within ``seconds``.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = bytearray()
    try:
        with suppress(ConnectionError):
            writer.write(request)
            await writer.drain()
        async with asyncio.timeout(seconds):
            with suppress(ConnectionError):
                while chunk := await reader.read(65536):
                    answer += chunk
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()
    return bytes(answer)


async def status_line(port: int, request: bytes, seconds: float = 5.0) -> int:
    """Send ``request``; the status of the answer's first line, not waiting for the rest."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        async with asyncio.timeout(seconds):
            line = await reader.readline()
    finally:
        writer.close()
    return int(line.split()[1])


def status_of(answer: bytes) -> int | None:
    """The HTTP status of a response, None when the answer is not one."""
    if not answer.startswith(b"HTTP/1.1 "):
        return None
    return int(answer.split(b" ", 2)[1])


class HttpAnswer(NamedTuple):
    """A response: its status, headers (lower-case names) and body."""

    status: int
    headers: dict[str, str]
    body: str


async def http_get(
    port: int, path: str, host: str | None = None, headers: Sequence[str] = ()
) -> HttpAnswer:
    """A plain HTTP/1.1 GET of ``path`` on loopback (Host: 127.0.0.1:PORT unless given),
    with extra ``headers`` ("Name: value")."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", *headers]
    request = "\r\n".join(lines) + "\r\n\r\n"
    head, _, body = (await exchange(port, request.encode())).partition(b"\r\n\r\n")
    answer = head.decode().split("\r\n")
    fields = dict(line.split(": ", 1) for line in answer[1:])
    return HttpAnswer(
        int(answer[0].split()[1]), {k.lower(): v for k, v in fields.items()}, body.decode()
    )


async def busy(port: int) -> dict[str, Any]:
    """The relay's GET /busy report."""
    report = json.loads((await http_get(port, "/busy")).body)
    assert isinstance(report, dict)
    return report


# -- a server on loopback ----------------------------------------------------------------


class Request(NamedTuple):
    """A request :func:`http_server` received: its first line, headers (lower-case names)
    and body."""

    line: str
    headers: dict[str, str]
    body: bytes

    @property
    def target(self) -> str:
        return self.line.split(" ")[1]


def http_response(status: str, kind: str, body: bytes) -> bytes:
    """A whole HTTP/1.1 response: ``status`` ("200 OK"), its content type and body."""
    head = f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def read_request(reader: asyncio.StreamReader) -> Request:
    """One request from ``reader``, its body sent with a length or chunked."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    pairs = (line.split(": ", 1) for line in head[1:] if ": " in line)
    headers = {name.lower(): value for name, value in pairs}
    if headers.get("transfer-encoding", "").lower() != "chunked":
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return Request(head[0], headers, body)
    chunks = bytearray()
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        chunks.extend((await reader.readexactly(size + 2))[:-2])
    await reader.readuntil(b"\r\n")  # the empty trailer
    return Request(head[0], headers, bytes(chunks))


@asynccontextmanager
async def http_server(answer: Callable[[Request], bytes]) -> AsyncIterator[int]:
    """Serve HTTP/1.1 on 127.0.0.1 for the block, on a free port (yielded): each request,
    one after another on a kept-alive connection, gets the bytes ``answer`` makes of it."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
            while True:
                writer.write(answer(await read_request(reader)))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
