"""Tests for relay.acp.translating: one message's places carried out by the rows of the table."""

from __future__ import annotations

import json
from collections import Counter
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


def translator(files: Files) -> MessageTranslator:
    policy = RewritePolicy(CwdPolicy(RULES, "reject", "/srv/work", False), McpPolicy(), files)
    return MessageTranslator(
        policy, files, SessionRewriter(policy, lambda _p: True), lambda _p: True, Counter()
    )


def cross(files: Files, message: dict[str, Any], to_editor: bool = True) -> Any:
    sent = line(message)
    kind: Message = "request" if "id" in message else "notification"
    direction = TO_EDITOR if to_editor else TO_AGENT
    return translator(files).cross(sent, json.loads(sent), direction, kind, message["method"])


def test_a_message_with_nothing_to_change_is_its_own_line() -> None:
    """A message whose rows find nothing to change comes back as the very line given."""
    message = {"method": "session/update", "params": {"update": {"sessionUpdate": "plan"}}}
    sent = line(message)
    result = translator("box").cross(sent, json.loads(sent), TO_EDITOR, "notification", "x/y")
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
    assert isinstance(cross("box", pool[name][0], to_editor), expected)


def test_a_message_is_translated_whole_or_refused_whole() -> None:
    """A refused place leaves no translation behind: the refusal is all that comes back, and
    nothing was counted as translated."""
    params = {"sessionId": "s", "path": "/etc/passwd"}
    t = translator("shared")
    sent = line({"id": 1, "method": "fs/read_text_file", "params": params})
    result = t.cross(sent, json.loads(sent), TO_EDITOR, "request", "fs/read_text_file")
    assert isinstance(result, ToAgent)
    assert t.counts["translated_to_editor"] == 0
    assert not isinstance(result, FrameRefused)
