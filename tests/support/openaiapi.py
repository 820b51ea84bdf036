"""A stand-in for OpenAI's Responses API on 127.0.0.1: every model call answers one fixed text.

Enough of ``POST /v1/responses`` (streamed as server-sent events: ``response.created``,
one ``response.output_item.done`` message, ``response.completed``) for codex-acp to
finish a prompt turn offline. codex reaches it through a model provider of its own
config (:func:`codex_config`): without one it would first try the API over a WebSocket
and retry, and it would need OpenAI's own authentication.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from tests.support.http import Request, http_response, http_server

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
        return http_response("200 OK", "text/event-stream", body)
    return http_response("404 Not Found", "application/json", b'{"error": {"code": 404}}')


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

    def reply(request: Request) -> bytes:
        stand_in.calls.append((request.line, request.headers.get("authorization")))
        return response_for(request.line)

    async with http_server(reply) as port:
        stand_in.url = f"http://127.0.0.1:{port}/v1"
        yield stand_in
