"""Tests for relay.acp.translating: one message's places carried out by the rows of the table."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from relay.acp.crossings import TO_AGENT, TO_EDITOR, Message
from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.refusals import ToAgent
from relay.acp.rewrite import Files, RewritePolicy, Rewritten, SessionRewriter
from relay.acp.translating import MessageTranslator
from relay.core.framing import FrameRefused
from tests.support.acpmessages import AGENT_MESSAGES, EDITOR_MESSAGES, line

RULES = (parse_rule("/Users/alice=/workspace"),)


def translator(
    files: Files, resolve: Callable[[str], str] = lambda path: path
) -> MessageTranslator:
    policy = RewritePolicy(CwdPolicy(RULES, "reject", "/srv/work", False), McpPolicy(), files)
    return MessageTranslator(
        policy,
        files,
        SessionRewriter(policy, lambda _p: True),
        lambda _p: True,
        resolve,
        Counter(),
    )


def cross(files: Files | MessageTranslator, message: dict[str, Any], to_editor: bool = True) -> Any:
    """``message`` carried out by a translator of ``files`` (or the one given)."""
    sent = line(message)
    kind: Message = "request" if "id" in message else "notification"
    direction = TO_EDITOR if to_editor else TO_AGENT
    t = files if isinstance(files, MessageTranslator) else translator(files)
    return t.cross(sent, json.loads(sent), direction, kind, message["method"])


def test_a_message_with_nothing_to_change_is_its_own_line() -> None:
    """A message whose rows find nothing to change comes back as the very line given."""
    message = {"method": "session/update", "params": {"update": {"sessionUpdate": "plan"}}}
    sent = line(message)
    result = translator(Files.BOX).cross(sent, json.loads(sent), TO_EDITOR, "notification", "x/y")
    assert result is sent


@pytest.mark.parametrize(
    ("name", "to_editor", "expected"),
    [
        ("tool_call", True, Rewritten),
        ("fs/read_text_file", True, ToAgent),
        ("initialize", False, Rewritten),
    ],
)
def test_each_row_gives_its_outcome(name: str, to_editor: bool, expected: type) -> None:
    """Under box: a tool call is translated, an fs request answered, initialize withheld from."""
    pool = AGENT_MESSAGES if to_editor else EDITOR_MESSAGES
    assert isinstance(cross(Files.BOX, pool[name][0], to_editor), expected)


def test_a_message_is_translated_whole_or_refused_whole() -> None:
    """A refused place leaves no translation behind: the refusal is all that comes back, and
    nothing was counted as translated."""
    params = {"sessionId": "s", "path": "/etc/passwd"}
    t = translator(Files.SHARED)
    sent = line({"id": 1, "method": "fs/read_text_file", "params": params})
    result = t.cross(sent, json.loads(sent), TO_EDITOR, "request", "fs/read_text_file")
    assert isinstance(result, ToAgent)
    assert t.counts["translated_to_editor"] == 0
    assert not isinstance(result, FrameRefused)


@pytest.mark.parametrize(
    ("method", "field"),
    [("fs/read_text_file", "path"), ("fs/write_text_file", "path"), ("terminal/create", "cwd")],
)
@pytest.mark.parametrize("kind", ["request", "notification"])
def test_under_shared_a_path_linked_out_of_its_folder_is_answered(
    method: str, field: str, kind: str
) -> None:
    """Under shared, a request (or notification) whose path leads out of its mapped folder
    through a symbolic link is answered -32602 by the relay, naming the real path and the
    folder; the same path without the link is translated."""
    links = {"/workspace/app/notes.md": "/root/.ssh/id_rsa"}
    message: dict[str, Any] = {"method": method, "params": {field: "/workspace/app/notes.md"}}
    if kind == "request":
        message["id"] = 4
    result = cross(translator(Files.SHARED, lambda path: links.get(path, path)), message)
    assert isinstance(result, ToAgent)
    reply = json.loads(result.reply)
    assert (reply["id"], reply["error"]["code"]) == (message.get("id"), -32602)
    data = reply["error"]["data"]
    assert (data["boxPath"], data["realPath"]) == ("/workspace/app/notes.md", "/root/.ssh/id_rsa")
    assert (data["field"], data["mappedFolder"]) == (f"params.{field}", "/workspace")
    assert "symbolic link" in reply["error"]["message"]
    assert result.report.refused == f"params.{field}"
    plain = cross(Files.SHARED, message)
    assert isinstance(plain, Rewritten)
    assert json.loads(plain.line)["params"][field] == "/Users/alice/app/notes.md"


def test_links_are_not_followed_where_the_editor_acts_on_nothing() -> None:
    """A tool call's location that links out of its folder is only shown: it is translated
    as it is named, never resolved (under box too)."""
    update = {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x",
              "locations": [{"path": "/workspace/app/notes.md"}]}  # fmt: skip
    message = {"method": "session/update", "params": {"update": update}}
    asked: list[str] = []

    def resolve(path: str) -> str:
        asked.append(path)
        return path

    result = cross(translator(Files.SHARED, resolve), message)
    assert isinstance(result, Rewritten)
    assert asked == []
