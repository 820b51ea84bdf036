"""The agent's earlier sessions: listed on a connection of their own, brought back by
resume or load, as the agent offers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.chat.earlier import (
    CANNOT_BRING_BACK,
    MAX_LISTED,
    Listed,
    Offered,
    SessionLister,
    bringing_back,
    listed_of,
    offered_of,
    sessions_text,
    valid_session_id,
)


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


CAPS = {"loadSession": True, "sessionCapabilities": {"list": {}, "resume": {}}}


def test_what_the_agent_offers_chooses_resume_then_load_else_nothing() -> None:
    """resume when offered, else load; neither: said."""
    assert offered_of({"agentCapabilities": CAPS}) == Offered(True, True, True)
    assert bringing_back(Offered(load=True, resume=True)) == "session/resume"
    assert bringing_back(Offered(load=True)) == "session/load"
    assert bringing_back(Offered()) is None
    assert offered_of({"agentCapabilities": {"loadSession": "yes"}}) == Offered()
    assert "neither session/resume nor session/load" in CANNOT_BRING_BACK


def test_the_lister_initializes_then_lists_for_the_folder() -> None:
    """initialize, then session/list with the cwd; the answer's sessions, first page."""
    lister = SessionLister("/w", "1.0")
    assert json.loads(lister.start())["method"] == "initialize"
    request = lister.line(line({"jsonrpc": "2.0", "id": 1, "result": {"agentCapabilities": CAPS}}))
    assert isinstance(request, bytes)
    assert json.loads(request)["params"] == {"cwd": "/w"}
    assert lister.line(line({"jsonrpc": "2.0", "method": "session/update", "params": {}})) is None
    sessions = [{"sessionId": "s-1", "title": "fix", "updatedAt": "2026-12-06T10:00:00Z"}]
    assert lister.line(line({"jsonrpc": "2.0", "id": 2, "result": {"sessions": sessions}})) == [
        Listed("s-1", "fix", "2026-12-06T10:00:00Z")]  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, "does not list its sessions"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "x"}},
         "does not list its sessions"),
    ],
)  # fmt: skip
def test_an_agent_that_does_not_list_is_said_so(answer: dict[str, Any], why: str) -> None:
    """No list capability, or initialize refused: a reason, not a silence."""
    got = SessionLister("/w", "1.0").line(line(answer))
    assert isinstance(got, str)
    assert why in got


def test_listed_sessions_are_read_leniently_and_bounded() -> None:
    """Malformed entries and ids with spaces are left out; at most MAX_LISTED."""
    bad: list[Any] = [{"sessionId": "has space"}, {"sessionId": 3}, "x"]
    assert listed_of({"sessions": [*bad, {"sessionId": "ok"}]}) == [Listed("ok", "", "")]
    many = [{"sessionId": f"s-{n}"} for n in range(MAX_LISTED + 5)]
    assert len(listed_of({"sessions": many})) == MAX_LISTED
    assert listed_of({"sessions": "no"}) == []
    assert not valid_session_id("a b")
    assert not valid_session_id("x" * 201)


def test_the_list_reads_with_titles_times_and_how_to_resume() -> None:
    """One line per session; none: said."""
    body, _ = sessions_text("/w", [Listed("s-1", "fix the test", "2026-12-06")], "@bot:t")
    assert body.splitlines() == [
        "🗂 The agent's sessions in /w:",
        "• s-1 — fix the test (2026-12-06)",
        "Bring one back in a new thread: @bot:t resume SESSION_ID",
    ]
    assert sessions_text("/w", [], "@bot:t")[0] == "The agent has no earlier session in /w."
