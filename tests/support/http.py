"""Raw HTTP/1.1 on 127.0.0.1: plain GETs, WebSocket upgrade requests, answers read whole.

Raw bytes on a socket, so that a test can send what no client library would (half a
request, a header twice, a TLS hello) and read exactly what the relay answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from contextlib import suppress
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
