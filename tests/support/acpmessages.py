"""ACP messages of every shape the filesystem boundary reads, as the ACP schema shapes them.

Shared by tests/acp/test_crossings.py (each row of the table against the schema's models)
and tests/acp/test_boundary.py (each shape under each policy).
"""

from __future__ import annotations

import json
from typing import Any

from acp import schema
from pydantic import BaseModel


def line(message: dict[str, Any]) -> bytes:
    """``message`` as one compact JSON-RPC line."""
    return json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode()


LOCATION = {"path": "/workspace/p/a.py", "line": 3}
DIFF = {"type": "diff", "path": "/workspace/p/a.py", "oldText": "a", "newText": "b"}
LINK = {"type": "resource_link", "name": "a.py", "uri": "file:///workspace/p/a.py"}
RESOURCE = {"type": "resource", "resource": {"uri": "file:///workspace/p/b.md", "text": "# b"}}
TOOL_CONTENT = [
    DIFF,
    {"type": "content", "content": LINK},
    {"type": "content", "content": RESOURCE},
    {"type": "terminal", "terminalId": "term-1"},
]
RAW = {"path": "/workspace/p/a.py", "command": "cat /workspace/p/a.py"}


def tool_call(kind: str) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": kind, "toolCallId": "t1", "title": "Edit a.py"}
    update.update(locations=[LOCATION], content=TOOL_CONTENT, rawInput=RAW, rawOutput=RAW)
    return {"method": "session/update", "params": {"sessionId": "s1", "update": update}}


def chunk(kind: str, content: dict[str, Any]) -> dict[str, Any]:
    update = {"sessionUpdate": kind, "content": content}
    return {"method": "session/update", "params": {"sessionId": "s1", "update": update}}


EDITOR_MESSAGES: dict[str, tuple[dict[str, Any], type[BaseModel]]] = {
    "initialize": ({"id": 0, "method": "initialize", "params": {
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True},
                               "terminal": True, "_meta": {"x": 1}}}},
        schema.InitializeRequest),
    "session/new": ({"id": 1, "method": "session/new", "params": {
        "cwd": "/Users/alice/p", "additionalDirectories": ["/Users/alice/lib"],
        "mcpServers": []}}, schema.NewSessionRequest),
    "session/list": ({"id": 2, "method": "session/list", "params": {"cwd": "/Users/alice/p"}},
                     schema.ListSessionsRequest),
    "session/prompt": ({"id": 3, "method": "session/prompt", "params": {
        "sessionId": "s1", "prompt": [
            {"type": "text", "text": "see file:///Users/alice/p/a.py"},
            {"type": "resource_link", "name": "a.py", "uri": "file:///Users/alice/p/a.py"},
            {"type": "resource", "resource": {"uri": "file:///Users/alice/p/b.md",
                                              "text": "# b"}}]}}, schema.PromptRequest),
}  # fmt: skip
AGENT_MESSAGES: dict[str, tuple[dict[str, Any], type[BaseModel]]] = {
    "list answer": ({"id": 2, "result": {"sessions": [
        {"sessionId": "s1", "cwd": "/workspace/p", "additionalDirectories": ["/workspace/lib"]},
        {"sessionId": "s2", "cwd": "/elsewhere"}]}}, schema.ListSessionsResponse),
    "fs/read_text_file": ({"id": 10, "method": "fs/read_text_file", "params": {
        "sessionId": "s1", "path": "/workspace/p/a.py", "line": 1}}, schema.ReadTextFileRequest),
    "fs/write_text_file": ({"id": 11, "method": "fs/write_text_file", "params": {
        "sessionId": "s1", "path": "/workspace/p/a.py", "content": "/workspace/p"}},
        schema.WriteTextFileRequest),
    "terminal/create": ({"id": 12, "method": "terminal/create", "params": {
        "sessionId": "s1", "command": "/workspace/p/run.sh", "cwd": "/workspace/p"}},
        schema.CreateTerminalRequest),
    "tool_call": (tool_call("tool_call"), schema.SessionNotification),
    "tool_call_update": (tool_call("tool_call_update"), schema.SessionNotification),
    "agent_message_chunk": (chunk("agent_message_chunk", LINK), schema.SessionNotification),
    "user_message_chunk": (chunk("user_message_chunk", RESOURCE), schema.SessionNotification),
    "agent_thought_chunk": (chunk("agent_thought_chunk", LINK), schema.SessionNotification),
    "session/request_permission": ({"id": 13, "method": "session/request_permission", "params": {
        "sessionId": "s1",
        "toolCall": {"toolCallId": "t1", "locations": [LOCATION], "content": TOOL_CONTENT,
                     "rawInput": RAW},
        "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]}},
        schema.RequestPermissionRequest),
}  # fmt: skip
