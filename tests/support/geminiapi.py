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

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support.http import Request, http_response, http_server

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
        return http_response(
            "200 OK",
            "text/event-stream",
            b"data: " + json.dumps(answer(parts)).encode() + b"\r\n\r\n",
        )
    if ":generateContent" in target:
        return http_response("200 OK", "application/json", json.dumps(answer(parts)).encode())
    return http_response("404 Not Found", "application/json", b'{"error": {"code": 404}}')


def parts_for(call: ModelCall, tool_call: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """What the model answers ``call``: the tool call while no tool result came, else REPLY."""
    if tool_call is None or call.function_responses or ":streamGenerateContent" not in call.target:
        return None
    return [{"functionCall": dict(tool_call)}]


@asynccontextmanager
async def gemini_api(tool_call: Mapping[str, Any] | None = None) -> AsyncIterator[GeminiStandIn]:
    """Serve the stand-in on 127.0.0.1 for the block (see the module's doc for ``tool_call``)."""
    stand_in = GeminiStandIn("")

    def reply(request: Request) -> bytes:
        api_key = request.headers.get("x-goog-api-key")
        call = ModelCall(request.target, api_key, function_responses(request.body))
        stand_in.calls.append(call)
        return response_for(call.target, parts_for(call, tool_call))

    async with http_server(reply) as port:
        stand_in.url = f"http://127.0.0.1:{port}"
        yield stand_in
