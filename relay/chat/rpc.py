"""The JSON-RPC lines the chat's ACP client writes, and an agent's errors in words.

Pure. Lines are written with :mod:`relay.core.strictjson` (one object, no raw newline); an
agent's error is read leniently, for what a person is shown of it.
"""

from __future__ import annotations

from typing import Any

from relay.chat.text import safe_line
from relay.core import strictjson


def line_of(message: dict[str, Any]) -> bytes:
    """``message`` as one line to the agent."""
    return strictjson.dumps(message)


def error_line(request_id: Any, code: int, message: str) -> bytes:
    """The JSON-RPC error answering the agent's request ``request_id``."""
    error = {"code": code, "message": message}
    return line_of({"jsonrpc": "2.0", "id": request_id, "error": error})


def error_text(error: Any) -> str:
    """An agent's JSON-RPC error in words: its message, code, and the details its ``data``
    gives (agents put the reason there: "Internal error" alone says nothing)."""
    if not isinstance(error, dict):
        return "an error"
    message = error.get("message")
    code = error.get("code")
    code_text = code.text if isinstance(code, strictjson.Number) else str(code)
    data = error.get("data")
    details = data.get("details") or data.get("message") if isinstance(data, dict) else data
    why = f": {safe_line(details, 300)}" if isinstance(details, str) and details else ""
    return f"{safe_line(message if isinstance(message, str) else 'error')} ({code_text}){why}"
