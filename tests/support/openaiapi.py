"""A stand-in for OpenAI's Responses API on 127.0.0.1: every model call answers one fixed text.

Enough of ``POST /v1/responses`` (streamed as server-sent events: ``response.created``,
one ``response.output_item.done`` message, ``response.completed``) for codex-acp to
finish a prompt turn offline. codex reaches it through a model provider of its own
config (:func:`codex_config`): without one it would first try the API over a WebSocket
and retry, and it would need OpenAI's own authentication.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

REPLY = "hello from the loopback model"
PROVIDER = "loopback"


@dataclass
class ResponsesStandIn:
    """The running stand-in: its base URL (``.../v1``) and the requests it answered, as
    (request line, ``authorization`` header)."""

    url: str
    calls: list[tuple[str, str | None]] = field(default_factory=list)


def events() -> list[dict[str, object]]:
    """The events of one streamed response holding REPLY."""
    message = {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "content": [{"type": "output_text", "text": REPLY}],
    }
    usage = {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}
    return [
        {"type": "response.created", "response": {"id": "resp_1"}},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.completed", "response": {"id": "resp_1", "usage": usage}},
    ]


def response_for(request_line: str) -> bytes:
    """The HTTP response to one request: the stream for ``POST .../responses``, else 404."""
    if request_line.startswith("POST ") and request_line.split(" ")[1].endswith("/responses"):
        body = b"".join(
            f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events()
        )
        kind, status = "text/event-stream", "200 OK"
    else:
        body, kind, status = b'{"error": {"code": 404}}', "application/json", "404 Not Found"
    head = f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """A request's body, sent with a length or chunked."""
    if headers.get("transfer-encoding", "").lower() != "chunked":
        return await reader.readexactly(int(headers.get("content-length", "0")))
    body = bytearray()
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        body.extend((await reader.readexactly(size + 2))[:-2])
    await reader.readuntil(b"\r\n")  # the empty trailer
    return bytes(body)


def codex_config(url: str, key_variable: str = "OPENAI_API_KEY") -> str:
    """``$HOME/.codex/config.toml`` sending codex's model calls to ``url``, over HTTP only,
    without retries, with the key from ``key_variable``."""
    return (
        f'model_provider = "{PROVIDER}"\n'
        f"[model_providers.{PROVIDER}]\n"
        f'name = "{PROVIDER}"\n'
        f'base_url = "{url}"\n'
        f'env_key = "{key_variable}"\n'
        'wire_api = "responses"\n'
        "supports_websockets = false\n"
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


@asynccontextmanager
async def responses_api() -> AsyncIterator[ResponsesStandIn]:
    """Serve the stand-in on 127.0.0.1 for the block."""
    stand_in = ResponsesStandIn("")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
            while True:  # keep-alive: one request after another
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                pairs = (line.split(": ", 1) for line in head[1:] if ": " in line)
                headers = {name.lower(): value for name, value in pairs}
                await read_body(reader, headers)
                stand_in.calls.append((head[0], headers.get("authorization")))
                writer.write(response_for(head[0]))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    stand_in.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    try:
        yield stand_in
    finally:
        server.close()
