"""A stand-in for the Gemini API on 127.0.0.1: every model call answers one fixed text.

Enough of ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` (and
``:generateContent``) for gemini-cli to finish a prompt turn offline; each call is kept
with the API key it carried, so a test can tell what reached the agent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

REPLY = "hello from the loopback model"


@dataclass
class ModelCall:
    """One request gemini-cli made: its target and its ``x-goog-api-key`` header."""

    target: str
    api_key: str | None


@dataclass
class GeminiStandIn:
    """The running stand-in: its base URL and the calls it answered."""

    url: str
    calls: list[ModelCall] = field(default_factory=list)


def answer() -> dict[str, object]:
    """A generateContent response: one candidate with REPLY, finished."""
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": REPLY}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8},
    }


def response_for(target: str) -> bytes:
    """The HTTP response to a request for ``target``."""
    if ":streamGenerateContent" in target:
        body, kind, status = (
            b"data: " + json.dumps(answer()).encode() + b"\r\n\r\n",
            "text/event-stream",
            "200 OK",
        )
    elif ":generateContent" in target:
        body, kind, status = json.dumps(answer()).encode(), "application/json", "200 OK"
    else:
        body, kind, status = b'{"error": {"code": 404}}', "application/json", "404 Not Found"
    head = f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


@asynccontextmanager
async def gemini_api() -> AsyncIterator[GeminiStandIn]:
    """Serve the stand-in on 127.0.0.1 for the block."""
    stand_in = GeminiStandIn("")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
            while True:  # keep-alive: one request after another
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                target = head[0].split(" ")[1]
                pairs = (line.split(": ", 1) for line in head[1:] if ": " in line)
                headers = {name.lower(): value for name, value in pairs}
                await reader.readexactly(int(headers.get("content-length", "0")))
                stand_in.calls.append(ModelCall(target, headers.get("x-goog-api-key")))
                writer.write(response_for(target))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    stand_in.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield stand_in
    finally:
        server.close()
