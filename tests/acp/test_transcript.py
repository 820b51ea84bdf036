"""relay.acp.transcript: a watched conversation as terminal text, from tables of real ACP
shapes (the ACP Python SDK's schema) and of odd input."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from acp import helpers, schema
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from relay.acp.showing import MAX_ITEMS, MAX_TEXT_CHARS
from relay.acp.transcript import MAX_PARSED_BYTES, Transcript
from relay.core.watchprofile import (
    ANSWERED,
    DETACHED,
    RESUMED,
    Garbled,
    Opening,
    Said,
    Told,
    notification,
)

SESSION = "sess-1"
ALLOW = schema.PermissionOption(option_id="allow", name="Allow", kind="allow_once")
REJECT = schema.PermissionOption(option_id="reject", name="Reject", kind="reject_once")


def dumped(model: BaseModel) -> Any:
    """A schema model as it goes on the wire."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def request(request_id: int | str, method: str, params: BaseModel) -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": dumped(params)}
    return json.dumps(message).encode()


def respond(request_id: int | str, result: BaseModel | dict[str, Any]) -> bytes:
    body = result if isinstance(result, dict) else dumped(result)
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": body}).encode()


def update(change: BaseModel, session: str = SESSION) -> bytes:
    params = dumped(helpers.session_notification(session, change))  # type: ignore[arg-type]
    return json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params}).encode()


def prompt(request_id: int, *blocks: BaseModel) -> bytes:
    return request(request_id, "session/prompt", schema.PromptRequest(
        session_id=SESSION, prompt=list(blocks)))  # type: ignore[arg-type]  # fmt: skip


def ask(
    request_id: str, title: str | None = "Write notes.md", *options: schema.PermissionOption
) -> bytes:
    call = schema.ToolCallUpdate(tool_call_id="t-1", title=title, kind="edit")
    params = schema.RequestPermissionRequest(
        session_id=SESSION, tool_call=call, options=list(options or (ALLOW, REJECT))
    )
    return request(request_id, "session/request_permission", params)


def chosen(request_id: str, option: str | None) -> bytes:
    outcome = (
        schema.AllowedOutcome(outcome="selected", option_id=option)
        if option
        else schema.DeniedOutcome(outcome="cancelled")
    )
    return respond(request_id, schema.RequestPermissionResponse(outcome=outcome))


def told(method: str, **params: Any) -> Told:
    return Told(notification(method, params))


def shown(*frames: tuple[str, bytes] | Told | Garbled) -> str:
    """The text of a conversation (no history) after its opening line."""
    transcript = Transcript()
    transcript.show(Opening("c-1", False, 1, 0, 0))
    text = ""
    for seq, frame in enumerate(frames, start=1):
        text += transcript.show(Said(seq, *frame) if isinstance(frame, tuple) else frame)
    return text


TABLE: list[tuple[str, list[tuple[str, bytes] | Told | Garbled], str]] = [
    ("the user's prompt, its blocks named",
     [("client", prompt(2, helpers.text_block("Write a haiku\nabout relays"),
                        helpers.resource_link_block("notes", "file:///w/notes.md")))],
     "user: Write a haiku\n  about relays [resource_link file:///w/notes.md]\n"),
    ("the agent's chunks joined into one paragraph, closed by the next line",
     [("client", prompt(2, helpers.text_block("Write"))),
      ("agent", update(helpers.update_agent_message_text("Relays "))),
      ("agent", update(helpers.update_agent_message_text("carry words\nacross "))),
      ("agent", update(helpers.update_agent_message_text("the wire."))),
      ("agent", respond(2, schema.PromptResponse(stop_reason="end_turn")))],
     "user: Write\nagent: Relays carry words\n  across the wire.\nagent: end of turn (end_turn)\n"),
    ("thoughts marked as such, apart from the words",
     [("agent", update(helpers.update_agent_thought_text("Which form? "))),
      ("agent", update(helpers.update_agent_thought_text("A haiku."))),
      ("agent", update(helpers.update_agent_message_text("Here:")))],
     "thought: Which form? A haiku.\nagent: Here:"),
    ("a new message id starts a new paragraph",
     [("agent", update(schema.AgentMessageChunk(session_update="agent_message_chunk",
       content=helpers.text_block("one"), message_id="m1"))),
      ("agent", update(schema.AgentMessageChunk(session_update="agent_message_chunk",
       content=helpers.text_block("two"), message_id="m2")))],
     "agent: one\nagent: two"),
    ("a paragraph ending in a newline is not closed twice",
     [("agent", update(helpers.update_agent_message_text("done\n"))),
      ("agent", update(helpers.update_current_mode("architect")))],
     "agent: done\nagent: mode is now architect\n"),
    ("a tool call as its status changes; a content-only update adds nothing",
     [("agent", update(helpers.start_read_tool_call("t-2", "Read notes.md", "/w/notes.md"))),
      ("agent", update(helpers.update_tool_call("t-2", status="in_progress"))),
      ("agent", update(helpers.update_tool_call("t-2", content=[
          helpers.tool_content(helpers.text_block("4 lines"))]))),
      ("agent", update(helpers.update_tool_call("t-2", status="completed", title="Read 4 lines")))],
     "tool: Read notes.md [read] pending\ntool: Read notes.md [read] in_progress\n"
     "tool: Read 4 lines [read] completed\n"),
    ("an update of a tool call never started",
     [("agent", update(helpers.update_tool_call("t-9", status="failed")))],
     "tool: tool call t-9 failed\n"),
    ("a permission request with its options, then the answer and who gave it first",
     [("agent", ask("perm-1")),
      told(ANSWERED, id="perm-1", by="watcher", subject="lead",
           result={"outcome": {"outcome": "selected", "optionId": "allow"}}),
      ("watcher", chosen("perm-1", "allow"))],
     "agent asks permission: Write notes.md [edit]\n  - Allow (allow_once, allow)\n"
     "  - Reject (reject_once, reject)\n"
     'relay: permission perm-1 answered first by a watcher (lead): selected "Allow" (allow)\n'
     'a watcher answered permission perm-1: selected "Allow" (allow)\n'),
    ("a permission request cancelled by the client, titled from its tool call",
     [("agent", update(helpers.start_tool_call("t-1", "Run make", kind="execute"))),
      ("agent", ask("perm-2", None)),
      ("client", chosen("perm-2", None))],
     "tool: Run make [execute] pending\nagent asks permission: Run make [edit]\n"
     "  - Allow (allow_once, allow)\n  - Reject (reject_once, reject)\n"
     "client answered permission perm-2: cancelled\n"),
    ("a plan, each entry with its status",
     [("agent", update(helpers.update_plan([
         helpers.plan_entry("Read the code", status="completed"),
         helpers.plan_entry("Write the tests", status="in_progress"),
         helpers.plan_entry("Ship it")])))],
     "plan:\n  [x] Read the code\n  [~] Write the tests\n  [ ] Ship it\n"),
    ("the controller detached and resumed",
     [told(DETACHED, reason="socket lost", grace=30), told(RESUMED)],
     "relay: the controller detached (socket lost); the connection waits 30 s for it\n"
     "relay: the controller resumed\n"),
    ("the opening of a session",
     [("client", request(0, "initialize", schema.InitializeRequest(
         protocol_version=1, client_info=schema.Implementation(name="zed", version="0.2")))),
      ("agent", respond(0, schema.InitializeResponse(
          protocol_version=1, agent_info=schema.Implementation(name="demo", version="1")))),
      ("client", request(1, "session/new", schema.NewSessionRequest(cwd="/w", mcp_servers=[]))),
      ("agent", respond(1, schema.NewSessionResponse(session_id=SESSION)))],
     "client: initialize (zed 0.2, protocol 1)\nagent: initialized (demo 1, protocol 1)\n"
     "client: new session in /w\nagent: session sess-1 opened\n"),
    ("the agent's requests to the client's files and terminals, and their answers",
     [("agent", request(7, "fs/read_text_file", schema.ReadTextFileRequest(
         session_id=SESSION, path="/w/a.md"))),
      ("client", respond(7, schema.ReadTextFileResponse(content="x"))),
      ("agent", request(8, "terminal/create", schema.CreateTerminalRequest(
          session_id=SESSION, command="make", args=["test"]))),
      ("client", b'{"jsonrpc":"2.0","id":8,"error":{"code":-32601,"message":"Method not found"}}')],
     "agent asks to read /w/a.md\nclient: answered fs/read_text_file\n"
     "agent asks to run make test\nclient: error answering terminal/create: "
     "Method not found (-32601)\n"),
    ("the client cancels the turn",
     [("client", b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}')],
     "client: cancel the turn\n"),
    ("methods and updates of no known kind are named",
     [("client", b'{"jsonrpc":"2.0","id":3,"method":"_zed/ping","params":{}}'),
      ("agent", b'{"jsonrpc":"2.0","method":"_x/notice"}'),
      ("agent", b'{"jsonrpc":"2.0","id":4,"method":"_x/ask"}'),
      ("agent", update(schema.UsageUpdate(session_update="usage_update", used=5, size=9))),
      ("agent", b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s",'
                b'"update":{"sessionUpdate":"hologram"}}}'),
      ("agent", b'{"jsonrpc":"2.0","id":3,"result":{}}'),
      ("agent", b'{"jsonrpc":"2.0","id":99,"result":{}}'),
      told("_acp-relay/unknown")],
     "client: _zed/ping\nagent: _x/notice (notification)\nagent asks _x/ask\n"
     "agent: context used: 5 of 9 tokens\nagent: session update hologram\n"
     "agent: answered _zed/ping\nagent: answered request 99\nrelay: _acp-relay/unknown\n"),
    ("lines that are not JSON-RPC",
     [("agent", b"Traceback (most recent call last):"),
      ("agent", b"[1, 2]"),
      ("client", b'{"jsonrpc":"2.0"}'),
      ("agent", b'{"a":1,"a":2}')],
     "agent: (not JSON: Expecting value: line 1 column 1 (char 0)) Traceback (most recent "
     "call last):\nagent: (not a JSON-RPC message) [1, 2]\n"
     'client: (not a JSON-RPC message) {"jsonrpc":"2.0"}\n'
     "agent: (not JSON: key 'a' appears twice in one object) {\"a\":1,\"a\":2}\n"),
    ("fields of the wrong types are shown as empty, never fail",
     [("agent", b'{"jsonrpc":"2.0","method":"session/update","params":{"update":{'
                b'"sessionUpdate":"tool_call","toolCallId":7,"title":["x"],"status":3}}}'),
      ("agent", b'{"jsonrpc":"2.0","id":"p","method":"session/request_permission",'
                b'"params":{"toolCall":"x","options":"all"}}'),
      ("agent", b'{"jsonrpc":"2.0","method":"session/update","params":"x"}'),
      ("client", b'{"jsonrpc":"2.0","id":"p","result":{"outcome":{"outcome":"maybe"}}}')],
     "tool: tool call 7 pending\nagent asks permission: a tool call\n"
     "agent: session update (none)\n"
     "client answered permission p: outcome maybe\n"),
    ("a frame that is none of the profile's",
     [Garbled(b"hello", "its header is not readable JSON")],
     "-- a frame that is not the watch profile's: its header is not readable JSON --\n"),
    ("the relay's refusal of a frame",
     [Told(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request",'
           b'"data":{"detail":"no"}}}')],
     "relay: refused what this watcher sent: Invalid request: no (-32600)\n"),
]  # fmt: skip


@pytest.mark.parametrize(("frames", "text"), [row[1:] for row in TABLE], ids=[r[0] for r in TABLE])
def test_each_kind_of_line_reads_as_a_person_wants_it(
    frames: list[tuple[str, bytes] | Told | Garbled], text: str
) -> None:
    """Each line of a conversation in ACP's shapes becomes its text."""
    assert shown(*frames) == text


@pytest.mark.parametrize(
    ("opening", "text"),
    [
        (Opening("c-1", False, 41, 2, 40), "-- watching connection c-1: the conversation so far "
         "(2 lines; 40 older ones no longer kept) --\n"),
        (Opening("c-1", True, 1, 0, 0), "-- watching connection c-1: nothing said yet; live --\n"),
    ],
)  # fmt: skip
def test_the_opening_says_how_much_history_follows_and_how_much_was_dropped(
    opening: Opening, text: str
) -> None:
    """The first line names the connection, the lines that follow and those dropped."""
    assert Transcript().show(opening) == text


def test_the_history_is_followed_by_a_live_marker_once() -> None:
    """After the history's last line (a paragraph closed first) comes "-- live --", once."""
    transcript = Transcript()
    transcript.show(Opening("c-1", False, 1, 2, 0))
    chunk = update(helpers.update_agent_message_text("hi"))
    texts = [transcript.show(Said(n, "agent", chunk)) for n in (1, 2, 3)]
    assert texts == ["agent: hi", "hi\n-- live --\n", "agent: hi"]


@pytest.mark.parametrize(
    ("end", "text"),
    [
        (lambda t: t.closed(1000, "the connection ended: agent exited"),
         "-- closed: the connection ended: agent exited (1000) --\n"),
        (lambda t: t.closed(4429, "fell behind: more than 2097152 bytes unread"),
         "-- closed: fell behind: more than 2097152 bytes unread (4429); attach again with a "
         "new ticket --\n"),
        (lambda t: t.closed(1001, "the relay is shutting down"),
         "-- closed: the relay is shutting down (1001) --\n"),
        (lambda t: t.closed(1011, ""), "-- closed: (1011) --\n"),
        (lambda t: t.lost("no close frame"), "-- lost: no close frame --\n"),
        (lambda t: t.stopped(), "-- stopped --\n"),
    ],
)  # fmt: skip
def test_the_end_closes_the_open_paragraph_and_says_why(end: Any, text: str) -> None:
    """The last line follows the open paragraph on a line of its own, and says why."""
    transcript = Transcript()
    transcript.show(Said(1, "agent", update(helpers.update_agent_message_text("half"))))
    assert end(transcript) == "\n" + text


ESCAPES = "\x1b]0;owned\x07\x1b[2J\u009b1m\u202edesrever\r\x00"


@pytest.mark.parametrize(
    "line",
    [
        update(helpers.update_agent_message_text(ESCAPES)),
        update(helpers.update_agent_thought_text(ESCAPES)),
        update(helpers.start_tool_call("t" + ESCAPES, ESCAPES, status="pending")),
        ask(
            ESCAPES,
            ESCAPES,
            schema.PermissionOption(option_id=ESCAPES, name=ESCAPES, kind="allow_once"),
        ),
        prompt(1, helpers.text_block(ESCAPES), helpers.resource_link_block("x", ESCAPES)),
        json.dumps({"jsonrpc": "2.0", "method": ESCAPES}).encode(),
        ESCAPES.encode(),
    ],
)
def test_control_characters_from_the_conversation_are_escaped(line: bytes) -> None:
    """No escape sequence, bidi override or carriage return of a line reaches the terminal:
    they are written as escapes."""
    text = shown(("agent", line), ("client", line)) + Transcript().closed(1000, ESCAPES)
    assert unprintable(text) == []
    assert "\\x1b]0;owned\\x07" in text


def unprintable(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on (but newline and tab)."""
    return [
        c for c in text if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")
    ]


@pytest.mark.parametrize(
    ("line", "most"),
    [
        (update(helpers.update_agent_message_text("a" * 10_000_000)), MAX_TEXT_CHARS + 100),
        (update(helpers.update_agent_message_text("\x1b" * 1_000_000)), 4 * MAX_TEXT_CHARS + 100),
        (prompt(1, *[helpers.text_block("word ")] * 10_000), MAX_TEXT_CHARS + 100),
        (ask("p", "t" * 1_000_000, *[ALLOW] * 10_000), 3_000),
        (update(helpers.update_plan([helpers.plan_entry("x" * 10_000)] * 10_000)), 5_000),
        (b"x" * 20_000_000, 1_000),
        (b'{"jsonrpc":"2.0","method":"' + b"m" * 5_000_000 + b'"}', 1_000),
        (b"[" * 100_000, 1_000),
    ],
    ids=["10 MB chunk", "escapes", "10k blocks", "10k options", "10k plan entries",
         "20 MB not JSON", "5 MB method", "deep"],
)  # fmt: skip
def test_what_one_line_prints_is_bounded(line: bytes, most: int) -> None:
    """However large or deep a line, from either side, its text is cut (saying so)."""
    text = shown(("agent", line), ("client", line))
    assert len(text) <= 2 * most
    assert "more" in text or "deep" in text or "too large" in text or len(line) < MAX_TEXT_CHARS


def test_a_line_over_the_parse_limit_is_named_not_read() -> None:
    """A line larger than the transcript reads is shown by its size only."""
    line = update(helpers.update_agent_message_text("a" * MAX_PARSED_BYTES))
    assert shown(("agent", line)) == f"agent: (a line of {len(line)} bytes, too large to show)\n"


def test_what_is_remembered_is_bounded() -> None:
    """Tool calls and requests are remembered up to a bound: the oldest are forgotten
    (a later line about them is shown without what was said of them)."""
    transcript = Transcript()
    for n in range(5000):
        transcript.show(Said(n, "agent", update(helpers.start_tool_call(f"t{n}", f"T{n}"))))
        transcript.show(Said(n, "agent", ask(f"p{n}")))
    failed = update(helpers.update_tool_call("t0", status="failed"))
    assert transcript.show(Said(0, "agent", failed)) == "tool: tool call t0 failed\n"
    assert transcript.show(Said(0, "client", chosen("p0", "allow"))) == (
        "client: answered request p0\n"
    )


def test_lists_beyond_the_bound_say_how_many_more() -> None:
    """Past MAX_ITEMS options, a line says how many were not shown."""
    text = shown(("agent", ask("p", "T", *[ALLOW] * (MAX_ITEMS + 5))))
    assert text.count("- Allow") == MAX_ITEMS
    assert text.endswith("  ... and 5 more\n")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(
        st.sampled_from(["method", "id", "params", "result", "error", "update", "sessionUpdate",
                         "content", "text", "type", "title", "options", "outcome", "entries",
                         "toolCallId", "toolCall", "optionId", "name", "status", "prompt"]),
        inner, max_size=6),
    max_leaves=20,
)  # fmt: skip
METHODS = st.sampled_from(["session/update", "session/request_permission", "session/prompt",
                           "initialize", "fs/read_text_file", "x"])  # fmt: skip


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["client", "agent", "watcher", "\x1bx"]),
            st.one_of(
                st.binary(max_size=60),
                st.builds(
                    lambda method, params, has_id: json.dumps(
                        {"jsonrpc": "2.0", "method": method, "params": params}
                        | ({"id": 1} if has_id else {})
                    ).encode(),
                    METHODS,
                    JSON,
                    st.booleans(),
                ),
                JSON.map(lambda value: json.dumps(value).encode()),
            ),
        ),
        max_size=8,
    )
)
def test_any_line_is_shown_without_failing_or_control_characters(
    lines: list[tuple[str, bytes]],
) -> None:
    """Whatever the lines, the transcript shows them, escaped, without raising."""
    assert unprintable(shown(*lines)) == []
