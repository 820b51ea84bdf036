"""relay.acp.conversation: one ACP conversation as a person follows it, read from a recorded
session of a real agent (gemini-cli), from tables of odd input, and from hypothesis-made
lines."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.acp.changes import (
    AnswerTaken,
    CommandsChanged,
    ControllerDetached,
    ControllerResumed,
    ModeChanged,
    Notified,
    Option,
    PermissionAnswered,
    PermissionAsked,
    PlanEntry,
    Planned,
    Prompted,
    RelayNotice,
    Replied,
    Requested,
    Said,
    ToolCall,
    ToolCallChanged,
    TurnEnded,
    Unreadable,
    Updated,
    UsageChanged,
)
from relay.acp.conversation import (
    MAX_KEPT_CHARS,
    MAX_LINE_BYTES,
    MAX_REMEMBERED,
    Conversation,
)
from relay.core.strictjson import Number
from relay.core.watchprofile import ANSWERED, DETACHED, RESUMED, notification
from tests.support.recordings import GEMINI_SESSION, recorded


def line(message: Any) -> bytes:
    return json.dumps(message).encode()


def update(session_update: str, **fields: Any) -> bytes:
    params = {"sessionId": "s", "update": {"sessionUpdate": session_update, **fields}}
    return line({"jsonrpc": "2.0", "method": "session/update", "params": params})


def gemini_changes() -> tuple[Conversation, list[Any]]:
    conversation = Conversation()
    changes = [conversation.line(side, text) for side, text in recorded(GEMINI_SESSION)]  # type: ignore[arg-type]
    return conversation, changes


def test_a_recorded_gemini_session_reads_as_two_turns_each_asking_permission() -> None:
    """gemini-cli's session: two prompts, each answered by end_turn after one permission
    request (answered proceed_once) and a write_file tool call that completed."""
    _, changes = gemini_changes()
    prompts = [c for c in changes if isinstance(c, Prompted)]
    ends = [c for c in changes if isinstance(c, TurnEnded)]
    asked = [c for c in changes if isinstance(c, PermissionAsked)]
    answered = [c for c in changes if isinstance(c, PermissionAnswered)]
    assert [p.blocks[0]["text"] for p in prompts] == ["hi", "write the notes"]
    assert [(e.request_id, e.stop_reason, e.failed) for e in ends] == [
        (Number("2"), "end_turn", False),
        (Number("3"), "end_turn", False),
    ]
    assert [a.kind for a in asked] == ["edit", "edit"]
    assert all(a.title.startswith("Writing to") or "notes.txt" in a.title for a in asked)
    assert all("proceed_once" in [o.option_id for o in a.options] for a in asked)
    assert [a.result["outcome"]["optionId"] for a in answered] == ["proceed_once"] * 2
    assert all(a.options.get("proceed_once") for a in answered)  # named by the request


def test_a_recorded_sessions_tool_calls_are_known_by_id_with_their_last_status() -> None:
    """Each write_file call the agent reported is remembered, completed, with its kind."""
    conversation, changes = gemini_changes()
    calls = [c for c in changes if isinstance(c, ToolCallChanged)]
    assert len(calls) == 2
    assert all(c.changed for c in calls)
    assert [call.status for call in conversation.tools.values()] == ["completed", "completed"]
    assert all(call.tool_id.startswith("write_file") for call in conversation.tools.values())


def test_a_recorded_session_leaves_no_request_awaiting_an_answer() -> None:
    """Every request of either side was answered: nothing is left awaiting, no turn runs."""
    conversation, changes = gemini_changes()
    assert not conversation.asked
    assert conversation.prompts() == []
    reads = [c for c in changes if isinstance(c, Requested) and c.side == "agent"]
    assert {c.method for c in reads} == {"fs/read_text_file", "fs/write_text_file"}
    assert {c.method for c in changes if isinstance(c, Replied)} >= {"initialize", "session/new"}


def test_a_recorded_sessions_words_and_commands() -> None:
    """The agent's words are its chunks; its commands are named as it listed them."""
    _, changes = gemini_changes()
    words = [c for c in changes if isinstance(c, Said)]
    assert {c.speaker for c in words} == {"agent"}
    [commands, *_] = [c for c in changes if isinstance(c, CommandsChanged)]
    assert "memory" in commands.names


TOOL = {"toolCallId": "t1", "title": "Read a.py", "kind": "read", "status": "pending"}


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            [update("tool_call", **TOOL)],
            ToolCallChanged(ToolCall("t1", "Read a.py", "read", "pending"), True, True),
        ),
        (
            [
                update("tool_call", **TOOL),
                update("tool_call_update", toolCallId="t1", status="completed"),
            ],
            ToolCallChanged(ToolCall("t1", "Read a.py", "read", "completed"), False, True),
        ),
        (
            [update("tool_call", **TOOL), update("tool_call_update", toolCallId="t1", content=[])],
            ToolCallChanged(ToolCall("t1", "Read a.py", "read", "pending"), False, False),
        ),
        (
            [update("tool_call_update", toolCallId="t2", status=7)],
            ToolCallChanged(ToolCall("t2"), False, True),
        ),
        (
            [update("plan", entries=[{"content": "a", "status": "pending"}, 3])],
            Planned("items", (PlanEntry("a", "pending"), PlanEntry("", "")), 2),
        ),
        (
            [update("plan_update", plan={"type": "markdown", "content": "# do"})],
            Planned("markdown", text="# do"),
        ),
        (
            [update("plan_update", plan={"type": "file", "uri": "file:///p.md"})],
            Planned("file", text="file:///p.md"),
        ),
        ([update("plan_update", plan={"type": "sketch"})], Planned("sketch")),
        ([update("current_mode_update", currentModeId="plan")], ModeChanged("plan")),
        ([update("usage_update", used=5, size=10)], UsageChanged("5", "10")),
        (
            [update("available_commands_update", availableCommands=[{"name": "go"}, "x"])],
            CommandsChanged(("go",)),
        ),
        (
            [update("brand_new", x=1)],
            Updated("brand_new", {"sessionUpdate": "brand_new", "x": Number("1")}),
        ),
        (
            [update("agent_thought_chunk", content={"type": "text", "text": "hm"})],
            Said("thought", {"type": "text", "text": "hm"}, ("s", "")),
        ),
        (
            [line({"jsonrpc": "2.0", "method": "session/cancel", "params": {}})],
            Notified("agent", "session/cancel"),
        ),
        ([line([1, 2])], Unreadable("rpc", 6)),
        ([b'{"a":1,"a":2}'], Unreadable("json", 13, "duplicate key 'a'")),
        ([line({"jsonrpc": "2.0", "id": 9})], Unreadable("rpc", 0)),
        ([line({"jsonrpc": "2.0", "id": 9, "result": None})], Replied(Number("9"), None, {})),
    ],
)
def test_each_line_reads_as_one_change(lines: list[bytes], expected: Any) -> None:
    """A table of the agent's lines: the last one's change, after those before it."""
    conversation = Conversation()
    changes = [conversation.line("agent", each) for each in lines]
    if isinstance(expected, Unreadable) and expected.why == "json":
        assert isinstance(changes[-1], Unreadable)
        assert changes[-1].why == "json"
    else:
        assert changes[-1] == expected


def test_a_line_over_the_bound_is_named_not_read() -> None:
    """A line over MAX_LINE_BYTES is Unreadable("large") without being parsed."""
    change = Conversation().line("agent", b" " * (MAX_LINE_BYTES + 1))
    assert change == Unreadable("large", MAX_LINE_BYTES + 1)


def test_a_permission_request_takes_the_title_and_kind_its_tool_call_reported() -> None:
    """A request naming a known tool call without a title shows the call's own."""
    conversation = Conversation()
    conversation.line("agent", update("tool_call", **TOOL))
    ask = {
        "id": "p",
        "method": "session/request_permission",
        "params": {
            "toolCall": {"toolCallId": "t1"},
            "options": [{"optionId": "ok", "name": "OK", "kind": "allow_once"}, 5],
        },
    }
    asked = conversation.line("agent", line(ask))
    assert asked == PermissionAsked(
        "p", "Read a.py", "read", (Option("ok", "OK", "allow_once"), Option("", "", "")), 2, ask
    )


def test_the_relays_notice_names_the_option_of_an_answer_given_before_it() -> None:
    """The editor answers, then the relay says whose answer was taken: the option has its name."""
    conversation = Conversation()
    ask = {
        "id": 4,
        "method": "session/request_permission",
        "params": {"options": [{"optionId": "ok", "name": "OK", "kind": "allow_once"}]},
    }
    conversation.line("agent", line(ask))
    result = {"outcome": {"outcome": "selected", "optionId": "ok"}}
    answered = conversation.line("client", line({"id": 4, "result": result}))
    taken = conversation.notice(
        notification(ANSWERED, {"id": 4, "by": "watcher", "subject": "bob", "result": result})
    )
    assert answered == PermissionAnswered(Number("4"), {"ok": "OK"}, result)
    assert taken == AnswerTaken(Number("4"), "watcher", "bob", {"ok": "OK"}, result)


@pytest.mark.parametrize(
    ("notice", "expected"),
    [
        (
            notification(DETACHED, {"reason": "lost", "grace": 30}),
            ControllerDetached("lost", Number("30")),
        ),
        (notification(RESUMED, {}), ControllerResumed()),
        (
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600}}',
            RelayNotice(None, True, {"code": Number("-32600")}),
        ),
        (notification("_acp-relay/new", {}), RelayNotice("_acp-relay/new")),
        (b"{", Unreadable("json", 1, "")),
    ],
)
def test_the_relays_own_notices(notice: bytes, expected: Any) -> None:
    """Each notice of the relay's reads as what it says of the controller or the answer."""
    change = Conversation().notice(notice)
    if isinstance(expected, Unreadable):
        assert isinstance(change, Unreadable)
        assert change.why == "json"
    else:
        assert change == expected


def test_a_turn_ends_only_by_the_answer_to_the_clients_prompt() -> None:
    """The agent's answer to the prompt ends the turn; a second answer is a plain reply."""
    conversation = Conversation()
    prompt = {
        "id": 1,
        "method": "session/prompt",
        "params": {"prompt": [{"type": "text", "text": "go"}]},
    }
    assert conversation.line("client", line(prompt)) == Prompted(
        Number("1"), [{"type": "text", "text": "go"}]
    )
    assert len(conversation.prompts()) == 1
    done = line({"id": 1, "result": {"stopReason": "cancelled"}})
    assert conversation.line("agent", done) == TurnEnded(Number("1"), "cancelled")
    assert conversation.line("agent", done) == Replied(
        Number("1"), None, {"stopReason": "cancelled"}
    )
    assert conversation.prompts() == []


def test_a_prompt_kept_across_a_restart_is_ended_by_its_answer() -> None:
    """prompted() brings back a prompt awaiting its answer, as prompts() listed it."""
    before = Conversation()
    before.line("client", line({"id": "p-1", "method": "session/prompt", "params": {}}))
    after = Conversation()
    for key in before.prompts():
        after.prompted(key)
    assert after.line("agent", line({"id": "p-1", "result": {}})) == TurnEnded("p-1", None)


def test_what_is_remembered_is_bounded() -> None:
    """Tool calls and requests keep the newest MAX_REMEMBERED; a title MAX_KEPT_CHARS."""
    conversation = Conversation()
    for n in range(MAX_REMEMBERED + 5):
        conversation.line("agent", update("tool_call", toolCallId=f"t{n}", title="x" * 5000))
        conversation.line("agent", line({"id": n, "method": "fs/read_text_file", "params": {}}))
    assert len(conversation.tools) == len(conversation.asked) == MAX_REMEMBERED
    assert next(iter(conversation.tools)) == "t5"
    assert {len(call.title or "") for call in conversation.tools.values()} == {MAX_KEPT_CHARS}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        "id",
        "method",
        "params",
        "result",
        "error",
        "update",
        "sessionUpdate",
        "toolCallId",
        "options",
        "plan",
        "entries",
        "prompt",
    ]
)
MESSAGES = st.dictionaries(
    KEYS,
    JSON
    | st.sampled_from(
        ["session/update", "session/prompt", "session/request_permission", "tool_call", "plan"]
    ),
    max_size=6,
)


@given(st.lists(st.tuples(st.sampled_from(["client", "agent"]), MESSAGES | JSON), max_size=20))
def test_any_lines_read_as_changes_without_failing(lines: list[tuple[str, Any]]) -> None:
    """Whatever either side writes, each line reads as one change and nothing raises."""
    conversation = Conversation()
    for side, message in lines:
        change = conversation.line(side, json.dumps(message).encode())  # type: ignore[arg-type]
        assert change is not None
    assert len(conversation.tools) <= MAX_REMEMBERED
