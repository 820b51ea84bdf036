"""A stand-in for the Gemini API on 127.0.0.1: every model call answers one fixed text, or
first asks for one tool call.

Enough of ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` (and
``:generateContent``) for gemini-cli to finish a prompt turn offline; each call is kept
with the API key it carried and the function responses it brought, so a test can tell
what reached the agent and what its tool did.

Given a ``tool_call`` (``{"name": "write_file", "args": {...}}``, one of gemini-cli's
tools), the model answers a call that brings no function response with that
``functionCall`` part, as the real API does when a model uses a tool; gemini-cli runs the
tool and sends its result back as a ``functionResponse`` part, which the model answers
with the fixed text, ending the turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

REPLY = "hello from the loopback model"


@dataclass
class ModelCall:
    """One request gemini-cli made: its target, its ``x-goog-api-key`` header, and the
    ``functionResponse`` parts of its last content (a tool's result for the model)."""

    target: str
    api_key: str | None
    function_responses: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class GeminiStandIn:
    """The running stand-in: its base URL and the calls it answered."""

    url: str
    calls: list[ModelCall] = field(default_factory=list)


def answer(parts: list[dict[str, Any]] | None = None) -> dict[str, object]:
    """A generateContent response: one candidate with ``parts`` (REPLY by default), finished."""
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts or [{"text": REPLY}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8},
    }


def function_responses(body: bytes) -> list[dict[str, Any]]:
    """The ``functionResponse`` parts of a request's last content (none when it is not JSON)."""
    try:
        last = json.loads(body)["contents"][-1]
        return [part["functionResponse"] for part in last["parts"] if "functionResponse" in part]
    except (ValueError, LookupError, TypeError):
        return []


def response_for(target: str, parts: list[dict[str, Any]] | None = None) -> bytes:
    """The HTTP response to a request for ``target``, answering ``parts`` (REPLY by default)."""
    if ":streamGenerateContent" in target:
        body, kind, status = (
            b"data: " + json.dumps(answer(parts)).encode() + b"\r\n\r\n",
            "text/event-stream",
            "200 OK",
        )
    elif ":generateContent" in target:
        body, kind, status = json.dumps(answer(parts)).encode(), "application/json", "200 OK"
    else:
        body, kind, status = b'{"error": {"code": 404}}', "application/json", "404 Not Found"
    head = f"HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


def parts_for(call: ModelCall, tool_call: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """What the model answers ``call``: the tool call while no tool result came, else REPLY."""
    if tool_call is None or call.function_responses or ":streamGenerateContent" not in call.target:
        return None
    return [{"functionCall": dict(tool_call)}]


@asynccontextmanager
async def gemini_api(tool_call: Mapping[str, Any] | None = None) -> AsyncIterator[GeminiStandIn]:
    """Serve the stand-in on 127.0.0.1 for the block (see the module's doc for ``tool_call``)."""
    stand_in = GeminiStandIn("")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
            while True:  # keep-alive: one request after another
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                target = head[0].split(" ")[1]
                pairs = (line.split(": ", 1) for line in head[1:] if ": " in line)
                headers = {name.lower(): value for name, value in pairs}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                call = ModelCall(target, headers.get("x-goog-api-key"), function_responses(body))
                stand_in.calls.append(call)
                writer.write(response_for(target, parts_for(call, tool_call)))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    stand_in.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield stand_in
    finally:
        server.close()
