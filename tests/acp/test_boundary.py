"""Tests for relay.acp.boundary: every place a path crosses, under each --files policy."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.acp.boundary import Boundary, read_lines
from relay.acp.crossings import (
    CROSSINGS,
    MAX_PENDING_LISTS,
    READ_MAX_VALUES,
    TRANSLATE_MAX_PLACES,
)
from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.refusals import ToAgent, id_key
from relay.acp.rewrite import SHOWN_CHARS, Files, RewritePolicy, Rewritten
from relay.core.framing import FrameRefused
from tests.support.acpmessages import AGENT_MESSAGES, EDITOR_MESSAGES, LINK, line

FILES: tuple[Files, ...] = (Files.BOX, Files.SHARED, Files.PASS)
RULES = (parse_rule("/Users/alice=/workspace"), parse_rule("C:\\Users\\bob=/win"))
FILES_SERVER = {"name": "files", "command": "/usr/bin/mcp-files", "args": [], "env": []}


def policy(files: Files, fallback: str = "reject") -> RewritePolicy:
    cwd = CwdPolicy(RULES, fallback, "/srv/work", False)  # type: ignore[arg-type]
    return RewritePolicy(cwd, McpPolicy(), files)


def read(data: bytes) -> Any:
    return json.loads(data)


# -- editor -> agent -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "capabilities"),
    [
        (Files.BOX, {"_meta": {"x": 1}}),
        (Files.SHARED, None),
        (Files.PASS, None),
    ],
)
def test_initialize_capabilities_under_each_policy(
    files: Files, capabilities: dict[str, Any] | None
) -> None:
    """box takes fs and terminal out of clientCapabilities (other members stay); shared and
    pass forward initialize byte-identical."""
    message = EDITOR_MESSAGES["initialize"][0]
    sent = line(message)
    result = Boundary(policy(files)).client_line(sent)
    if capabilities is None:
        assert result is sent
        return
    assert isinstance(result, Rewritten)
    got = read(result.line)
    assert got["params"]["clientCapabilities"] == capabilities
    assert got["params"]["protocolVersion"] == 1
    assert result.report.withheld == ["fs", "terminal"]
    assert "--files box" in result.report.fields()["withheld_because"]


@pytest.mark.parametrize(
    "capabilities",
    [{}, {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
     {"fs": None}, {"terminal": None}, {"fs": {"_meta": {}}}],
)  # fmt: skip
def test_initialize_offering_nothing_passes(capabilities: dict[str, Any]) -> None:
    """Under box, an initialize that offers neither fs nor terminal passes as it came."""
    sent = line({"id": 0, "method": "initialize", "params": {"clientCapabilities": capabilities}})
    assert Boundary(policy(Files.BOX)).client_line(sent) is sent


@pytest.mark.parametrize("value", ["yes", 1, [], {"readTextFile": "true"}, {"listDir": True}])
def test_odd_capability_values_are_withheld_too(value: Any) -> None:
    """Under box, anything that may offer a capability is taken out, not second-guessed."""
    params = {"clientCapabilities": {"fs": value, "terminal": value}}
    result = Boundary(policy(Files.BOX)).client_line(
        line({"id": 0, "method": "initialize", "params": params})
    )
    assert isinstance(result, Rewritten)
    assert read(result.line)["params"]["clientCapabilities"] == {}


def test_session_opening_is_the_session_rewrite_under_every_policy() -> None:
    """session/new: cwd and additionalDirectories mapped, the relay's MCP servers merged in."""
    sent = line(EDITOR_MESSAGES["session/new"][0])
    for files in FILES:
        cwd = CwdPolicy(RULES, "reject", "/srv/work", False)
        boundary = Boundary(RewritePolicy(cwd, McpPolicy((FILES_SERVER,)), files))
        result = boundary.client_line(sent)
        assert isinstance(result, Rewritten)
        params = read(result.line)["params"]
        assert params == {"cwd": "/workspace/p", "additionalDirectories": ["/workspace/lib"],
                          "mcpServers": [FILES_SERVER]}  # fmt: skip
        assert boundary.summary()["translated_to_agent"] == 2


@pytest.mark.parametrize(
    ("files", "fallback", "cwd", "expected"),
    [
        (Files.BOX, "reject", "/Users/alice/p", "/workspace/p"),
        (Files.SHARED, "reject", "c:\\users\\bob\\q", "/win/q"),
        (Files.BOX, "workspace", "/elsewhere", "/srv/work"),  # as session/new would have opened it
        (Files.BOX, "keep", "/elsewhere", None),
        (Files.PASS, "reject", "/Users/alice/p", None),
    ],
)
def test_session_list_filter(files: Files, fallback: str, cwd: str, expected: str | None) -> None:
    """The session/list cwd filter maps as session/new's cwd would; pass leaves it."""
    sent = line({"id": 2, "method": "session/list", "params": {"cwd": cwd}})
    result = Boundary(policy(files, fallback)).client_line(sent)
    if expected is None:
        assert result is sent
        return
    assert isinstance(result, Rewritten)
    assert read(result.line)["params"]["cwd"] == expected
    assert [str(t) for t in result.report.translations] == [f"params.cwd: {cwd} -> {expected}"]


def test_session_list_filter_under_no_rule_is_refused_under_reject() -> None:
    """--cwd-fallback reject refuses a list filter no rule maps, as it refuses session/new."""
    sent = line({"id": "l-1", "method": "session/list", "params": {"cwd": "/etc"}})
    boundary = Boundary(policy(Files.BOX))
    result = boundary.client_line(sent)
    assert isinstance(result, FrameRefused)
    reply = read(result.reply)
    assert (reply["id"], reply["error"]["code"]) == ("l-1", -32602)
    assert reply["error"]["data"]["field"] == "cwd"
    assert boundary.pending == {}  # nothing waits for an answer that will not come


@pytest.mark.parametrize(
    ("files", "link", "embedded"),
    [
        (Files.BOX, "file:///workspace/p/a.py", "file:///workspace/p/b.md"),
        (Files.SHARED, "file:///workspace/p/a.py", "file:///workspace/p/b.md"),
        (Files.PASS, None, None),
    ],
)
def test_prompt_resource_uris(files: Files, link: str | None, embedded: str | None) -> None:
    """A prompt's resource_link and resource URIs go to the box; its text stays as written."""
    sent = line(EDITOR_MESSAGES["session/prompt"][0])
    result = Boundary(policy(files)).client_line(sent)
    if link is None:
        assert result is sent
        return
    assert isinstance(result, Rewritten)
    prompt = read(result.line)["params"]["prompt"]
    assert prompt[0]["text"] == "see file:///Users/alice/p/a.py"
    assert (prompt[1]["uri"], prompt[2]["resource"]["uri"]) == (link, embedded)
    assert prompt[2]["resource"]["text"] == "# b"


@pytest.mark.parametrize(
    "uri",
    ["file:///Users/carol/x", "file:///Users/alice/%zz", "https://example.com/a", "untitled:1"],
)
def test_prompt_uris_under_no_rule_pass_untouched(uri: str) -> None:
    """A prompt link the relay cannot map passes, and so does the line (the same bytes)."""
    block = {"type": "resource_link", "name": "x", "uri": uri}
    sent = line(
        {"id": 3, "method": "session/prompt", "params": {"sessionId": "s", "prompt": [block]}}
    )
    assert Boundary(policy(Files.BOX)).client_line(sent) is sent


# -- agent -> editor -------------------------------------------------------------------------

TRANSLATED_TOOL_CALL = {
    "params.update.locations[0].path": "/Users/alice/p/a.py",
    "params.update.content[0].path": "/Users/alice/p/a.py",
    "params.update.content[1].content.uri": "file:///Users/alice/p/a.py",
    "params.update.content[2].content.resource.uri": "file:///Users/alice/p/b.md",
}
AGENT_EXPECTED: dict[str, dict[str, str]] = {
    "tool_call": TRANSLATED_TOOL_CALL,
    "tool_call_update": TRANSLATED_TOOL_CALL,
    "agent_message_chunk": {"params.update.content.uri": "file:///Users/alice/p/a.py"},
    "user_message_chunk": {"params.update.content.resource.uri": "file:///Users/alice/p/b.md"},
    "agent_thought_chunk": {"params.update.content.uri": "file:///Users/alice/p/a.py"},
    "session/request_permission": {
        k.replace("params.update", "params.toolCall"): v for k, v in TRANSLATED_TOOL_CALL.items()
    },
}


@pytest.mark.parametrize("files", FILES)
@pytest.mark.parametrize("name", sorted(AGENT_EXPECTED))
def test_agent_notifications_and_permission_requests(name: str, files: Files) -> None:
    """Tool-call locations and diffs, content URIs and permission subjects come back to the
    editor's paths under box and shared; rawInput, rawOutput and terminal content pass."""
    message = AGENT_MESSAGES[name][0]
    sent = line(message)
    result = Boundary(policy(files)).agent_line(sent)
    if files is Files.PASS:
        assert result is sent
        return
    assert isinstance(result, Rewritten)
    expected = AGENT_EXPECTED[name]
    assert {t.field: t.after for t in result.report.translations} == expected
    assert restored(read(result.line), result.report.translations) == read(sent)


def restored(message: Any, translations: list[Any]) -> Any:
    """``message`` with each translated field set back to what it was."""
    for translation in translations:
        put(message, translation.field, translation.before)
    return message


def put(message: Any, where: str, value: Any) -> None:
    steps = [int(s) if s.isdigit() else s for s in re.findall(r"[^.\[\]]+", where)]
    node = message
    for step in steps[:-1]:
        node = node[step]
    node[steps[-1]] = value


def test_box_paths_under_no_rule_are_left_in_notifications() -> None:
    """A location or diff outside every mapping reaches the editor as the agent wrote it."""
    update = {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x",
              "locations": [{"path": "/etc/hosts"}, {"path": "/workspace/a"}],
              "content": [{"type": "diff", "path": "/etc/hosts", "newText": ""}]}  # fmt: skip
    boundary = Boundary(policy(Files.BOX))
    result = boundary.agent_line(line({"method": "session/update", "params": {"update": update}}))
    assert isinstance(result, Rewritten)
    got = read(result.line)["params"]["update"]
    assert [loc["path"] for loc in got["locations"]] == ["/etc/hosts", "/Users/alice/a"]
    assert got["content"][0]["path"] == "/etc/hosts"
    assert result.report.left == [
        ("params.update.locations[0].path", "/etc/hosts"),
        ("params.update.content[0].path", "/etc/hosts"),
    ]
    assert boundary.summary()["left_unmapped"] == 2


@pytest.mark.parametrize("name", ["fs/read_text_file", "fs/write_text_file", "terminal/create"])
@pytest.mark.parametrize("files", FILES)
def test_agent_fs_and_terminal_requests(name: str, files: Files) -> None:
    """box: answered by the relay (-32601, withheld); shared: the path goes to the editor's;
    pass: forwarded as it came. Other fields (file content, command) are never touched."""
    message = AGENT_MESSAGES[name][0]
    sent = line(message)
    boundary = Boundary(policy(files))
    result = boundary.agent_line(sent)
    if files is Files.PASS:
        assert result is sent
    elif files is Files.BOX:
        assert isinstance(result, ToAgent)
        reply = read(result.reply)
        assert (reply["id"], reply["error"]["code"]) == (message["id"], -32601)
        assert reply["error"]["data"]["withheld"] == name.split("/")[0]
        assert "--files shared" in reply["error"]["data"]["hint"]
        assert boundary.summary()["answered_to_agent"] == 1
    else:
        assert isinstance(result, Rewritten)
        got = read(result.line)
        field = "cwd" if name == "terminal/create" else "path"
        want = "/Users/alice/p" + ("/a.py" if field == "path" else "")
        assert got["params"][field] == want
        assert restored(got, result.report.translations) == read(sent)


@pytest.mark.parametrize(
    "method", ["terminal/output", "terminal/kill", "terminal/release", "fs/unknown"]
)
def test_other_fs_and_terminal_requests(method: str) -> None:
    """Under box every fs/ and terminal/ request is answered by the relay; under shared the
    ones without a path pass."""
    sent = line({"id": 20, "method": method, "params": {"sessionId": "s1", "terminalId": "t"}})
    assert isinstance(Boundary(policy(Files.BOX)).agent_line(sent), ToAgent)
    assert Boundary(policy(Files.SHARED)).agent_line(sent) is sent


@pytest.mark.parametrize(
    ("method", "field", "path"),
    [
        ("fs/read_text_file", "path", "/etc/passwd"),
        ("fs/write_text_file", "path", "/workspace/../etc/passwd"),
        ("terminal/create", "cwd", "/tmp"),
        ("fs/read_text_file", "path", "notes.txt"),
        ("fs/read_text_file", "path", "/win/a:b"),
    ],
)
def test_shared_requests_under_no_rule_are_answered_by_the_relay(
    method: str, field: str, path: str
) -> None:
    """Under shared, a request whose path no rule maps never reaches the editor: -32602 to
    the agent, naming the path, the mappings and what to do."""
    sent = line({"id": "q", "method": method, "params": {"sessionId": "s", field: path}})
    result = Boundary(policy(Files.SHARED)).agent_line(sent)
    assert isinstance(result, ToAgent)
    reply = read(result.reply)
    assert (reply["id"], reply["error"]["code"]) == ("q", -32602)
    data = reply["error"]["data"]
    assert data["boxPath"] == path
    assert data["mappings"] == ["/Users/alice=/workspace", "C:\\Users\\bob=/win"]
    assert "--cwd-map" in data["hint"]
    assert result.report.refused == f"params.{field}"


def test_an_echoed_path_is_bounded() -> None:
    """A very long unmapped path is echoed shortened in the relay's answer."""
    path = "/x" * 100_000
    sent = line({"id": 1, "method": "fs/read_text_file", "params": {"path": path}})
    result = Boundary(policy(Files.SHARED)).agent_line(sent)
    assert isinstance(result, ToAgent)
    assert len(result.reply) < 4 * SHOWN_CHARS
    assert read(result.reply)["error"]["data"]["boxPath"].endswith("(200000 chars)")


@pytest.mark.parametrize("path", [None, 7, ["/workspace/a"], {"p": "/workspace/a"}, True])
def test_non_string_paths_pass(path: Any) -> None:
    """A request whose path is not a string is the editor's to refuse; the line passes."""
    sent = line({"id": 1, "method": "fs/read_text_file", "params": {"path": path}})
    assert Boundary(policy(Files.SHARED)).agent_line(sent) is sent


FORMS = ("request", "notification", "batch")
CALLS = ("fs/read_text_file", "fs/write_text_file", "terminal/create")


def in_form(form: str, message: dict[str, Any]) -> bytes:
    """``message`` (a request) as the agent may write it: as it is, without its id, or as
    one element of a batch beside a notification of its own method."""
    if form == "request":
        return line(message)
    notification = {k: v for k, v in message.items() if k != "id"}
    if form == "notification":
        return line(notification)
    return json.dumps([{"jsonrpc": "2.0", **message}, {"jsonrpc": "2.0", **notification}]).encode()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", CALLS)
def test_under_box_no_form_of_fs_or_terminal_reaches_the_editor(name: str, form: str) -> None:
    """Under box an fs/ or terminal/ request, the same without its id, and a batch holding
    them are each answered by the relay (to the request's id, else id null); none passes."""
    message = AGENT_MESSAGES[name][0]
    boundary = Boundary(policy(Files.BOX))
    result = boundary.agent_line(in_form(form, message))
    assert isinstance(result, ToAgent)
    reply = read(result.reply)
    code = -32600 if form == "batch" else -32601
    assert (reply["id"], reply["error"]["code"]) == (
        message["id"] if form == "request" else None,
        code,
    )
    assert boundary.summary()["answered_to_agent"] == 1


@pytest.mark.parametrize("name", CALLS)
def test_under_shared_a_notification_gets_the_requests_path_check(name: str) -> None:
    """Under shared an fs/ or terminal/ notification is translated like the request; one
    whose path no rule maps is answered by the relay (id null) and never reaches the editor."""
    message = {k: v for k, v in AGENT_MESSAGES[name][0].items() if k != "id"}
    field = "cwd" if name == "terminal/create" else "path"
    boundary = Boundary(policy(Files.SHARED))
    result = boundary.agent_line(line(message))
    assert isinstance(result, Rewritten)
    assert read(result.line)["params"][field].startswith("/Users/alice/p")
    outside = {**message, "params": {**message["params"], field: "/root/.ssh/authorized_keys"}}
    refused = boundary.agent_line(line(outside))
    assert isinstance(refused, ToAgent)
    reply = read(refused.reply)
    assert (reply["id"], reply["error"]["code"]) == (None, -32602)
    assert reply["error"]["data"]["boxPath"] == "/root/.ssh/authorized_keys"


@pytest.mark.parametrize("name", CALLS)
def test_under_shared_a_batch_that_may_hold_fs_or_terminal_is_answered(name: str) -> None:
    """ACP has no batches: under shared one holding an fs/ or terminal/ message is answered
    -32600 (id null) whole, even when its paths are mapped; nothing of it reaches the editor."""
    result = Boundary(policy(Files.SHARED)).agent_line(in_form("batch", AGENT_MESSAGES[name][0]))
    assert isinstance(result, ToAgent)
    reply = read(result.reply)
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert "batch" in reply["error"]["data"]["detail"]
    assert "its own line" in reply["error"]["data"]["hint"]


@pytest.mark.parametrize(
    "sent",
    [
        b'{"jsonrpc":"2.0","method":"fs\\/write_text_file","params":{"path":"/etc/passwd"}}',
        b'[{"jsonrpc":"2.0","method":"\\u0066s/write_text_file","params":{"path":"/w/a"}}]',
        b'[[{"jsonrpc":"2.0","id":1,"method":"terminal/create","params":{"command":"sh"}}]]',
        b'[1, "fs/read_text_file"]',
    ],
)
def test_escaped_or_nested_forms_are_answered_too(sent: bytes) -> None:
    """A notification or a batch with an escaped method, or nested batches, are answered
    under box and shared like plain ones, and pass as they came under pass."""
    for files in (Files.BOX, Files.SHARED):
        result = Boundary(policy(files)).agent_line(sent)
        assert isinstance(result, ToAgent), files
        assert read(result.reply)["id"] is None
    assert Boundary(policy(Files.PASS)).agent_line(sent) is sent


def test_batches_without_fs_or_terminal_pass_untranslated() -> None:
    """A batch that holds no fs/ or terminal/ method is not translated: it passes as it came."""
    batch = b"[" + line(AGENT_MESSAGES["tool_call"][0]) + b"]"
    for files in FILES:
        assert Boundary(policy(files)).agent_line(batch) is batch


def test_terminal_without_cwd_passes() -> None:
    """terminal/create without cwd (the editor's default) passes under shared."""
    sent = line({"id": 1, "method": "terminal/create", "params": {"command": "ls"}})
    assert Boundary(policy(Files.SHARED)).agent_line(sent) is sent


# -- session/list answers --------------------------------------------------------------------


def list_request(request_id: Any) -> bytes:
    return line({"id": request_id, "method": "session/list", "params": {}})


def list_answer(request_id: Any) -> bytes:
    return line({"id": request_id, "result": AGENT_MESSAGES["list answer"][0]["result"]})


@pytest.mark.parametrize("files", [Files.BOX, Files.SHARED])
def test_session_list_answer_comes_back_to_the_editors_paths(files: Files) -> None:
    """Each session's cwd and additionalDirectories go back to the editor's paths; a cwd
    under no rule is left; the id is forgotten once answered."""
    boundary = Boundary(policy(files))
    assert boundary.client_line(list_request(2)) == list_request(2)
    result = boundary.agent_line(list_answer(2))
    assert isinstance(result, Rewritten)
    sessions = read(result.line)["result"]["sessions"]
    assert sessions[0] == {"sessionId": "s1", "cwd": "/Users/alice/p",
                           "additionalDirectories": ["/Users/alice/lib"]}  # fmt: skip
    assert sessions[1]["cwd"] == "/elsewhere"
    assert boundary.pending == {}
    assert boundary.agent_line(list_answer(2)) == list_answer(2)  # not asked twice


def test_only_answers_to_pending_list_requests_are_read() -> None:
    """A result with sessions that answers no session/list is not even parsed."""
    boundary = Boundary(policy(Files.BOX))
    sent = list_answer(9)
    assert boundary.agent_line(sent) is sent
    assert boundary.parses == 0


@pytest.mark.parametrize(("asked", "answered"), [("1E2", "100"), ("100", "100.0"), ('"a"', '"a"')])
def test_ids_match_by_value(asked: str, answered: str) -> None:
    """An agent that respells a numeric id (1E2 -> 100) is still matched to its request."""
    boundary = Boundary(policy(Files.BOX))
    boundary.client_line(f'{{"jsonrpc":"2.0","id":{asked},"method":"session/list"}}'.encode())
    answer = list_answer(0).replace(b'"id":0', b'"id":' + answered.encode())
    assert isinstance(boundary.agent_line(answer), Rewritten)


def test_a_pending_list_is_forgotten_on_error_and_on_cancellation() -> None:
    """An error answer or the editor's $/cancel_request forgets a pending session/list."""
    boundary = Boundary(policy(Files.BOX))
    boundary.client_line(list_request(1))
    boundary.client_line(list_request("two"))
    error = line({"id": 1, "error": {"code": -32603, "message": "no"}})
    assert boundary.agent_line(error) is error
    cancel = line({"method": "$/cancel_request", "params": {"requestId": "two"}})
    assert boundary.client_line(cancel) is cancel
    assert boundary.pending == {}


def test_pending_lists_are_bounded_per_connection() -> None:
    """Past the bound a session/list is refused to the editor, with what to do."""
    boundary = Boundary(policy(Files.BOX))
    for request_id in range(MAX_PENDING_LISTS):
        assert boundary.client_line(list_request(request_id)) == list_request(request_id)
    refused = boundary.client_line(list_request("one too many"))
    assert isinstance(refused, FrameRefused)
    reply = read(refused.reply)
    assert (reply["id"], reply["error"]["code"]) == ("one too many", -32600)
    assert "wait for the answers" in reply["error"]["data"]["hint"]
    assert len(boundary.pending) == MAX_PENDING_LISTS


@pytest.mark.parametrize("request_id", [None, True, [1], {"a": 1}])
def test_untrackable_ids_are_not_remembered(request_id: Any) -> None:
    """A list request with an id that cannot be matched passes, and nothing is remembered."""
    assert id_key(read(list_request(request_id))["id"]) is None
    boundary = Boundary(policy(Files.BOX))
    boundary.client_line(list_request(request_id))
    assert boundary.pending == {}


# -- the hot path ----------------------------------------------------------------------------

STREAMED_TEXT = [
    "Hello",
    "a line\nanother\ttab",
    'say "hi" and \\ backslash',
    "caf\u00e9 \u4e2d\u6587 \U0001f600 \u2028",
    'the "locations" of "diff" and "resource_link" in words',
    "<html> & Go's escapes",
    "/workspace/p/a.py and file:///workspace/p/a.py as text",
]


@pytest.mark.parametrize("files", FILES)
@pytest.mark.parametrize("ascii_only", [True, False])
def test_streamed_message_text_is_never_parsed(files: Files, ascii_only: bool) -> None:
    """agent_message_chunk lines of plain text (quotes, escapes, non-ASCII, paths in prose)
    pass byte-identical without being parsed."""
    boundary = Boundary(policy(files))
    for text in STREAMED_TEXT * 50:
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        message = {"jsonrpc": "2.0", "method": "session/update",
                   "params": {"sessionId": "s1", "update": update}}  # fmt: skip
        sent = json.dumps(message, ensure_ascii=ascii_only).encode()
        assert boundary.agent_line(sent) is sent
    assert boundary.parses == 0


def test_ordinary_client_traffic_is_not_parsed() -> None:
    """Plain prompts, cancels and answers to the agent pass without being parsed."""
    boundary = Boundary(policy(Files.BOX))
    lines = [
        line({"id": 3, "method": "session/prompt", "params": {"sessionId": "s", "prompt": [
            {"type": "text", "text": "edit /Users/alice/p/a.py please\n"}]}}),
        line({"method": "session/cancel", "params": {"sessionId": "s"}}),
        line({"id": 10, "result": {"content": "text of a file"}}),
        line({"id": 13, "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}),
    ]  # fmt: skip
    for sent in lines:
        assert boundary.client_line(sent) is sent
    assert boundary.parses == 0


def test_pass_watches_the_agent_only_until_initialize_and_only_for_mcp() -> None:
    """Under pass without MCP servers agent lines are not looked at; with them, until the
    agent's initialize reply."""
    assert not Boundary(policy(Files.PASS)).watches_agent
    assert not Boundary(None).watches_agent
    cwd = CwdPolicy(RULES, "reject", "/srv/work", False)
    boundary = Boundary(RewritePolicy(cwd, McpPolicy((FILES_SERVER,)), Files.PASS))
    assert boundary.watches_agent
    reply = line({"id": 0, "result": {"agentCapabilities": {"mcpCapabilities": {"http": True}}}})
    assert boundary.agent_line(reply) is reply
    assert not boundary.watches_agent
    assert boundary.sessions.capabilities.http
    assert Boundary(policy(Files.BOX)).watches_agent


@pytest.mark.parametrize(
    "raw",
    [
        b'"loc\\u0061tions":[{"path":"/workspace/a"}]',
        b'"locations":[{"p\\u0061th":"/workspace/a"}]',
        b'"locations":[{"path":"\\/workspace\\/a"}]',
    ],
)
def test_escaped_keys_are_candidates(raw: bytes) -> None:
    """A key spelled with JSON escapes is read like a plain one and translated."""
    sent = (
        b'{"jsonrpc":"2.0","method":"session/update","params":{"update":'
        b'{"sessionUpdate":"tool\\u005fcall","toolCallId":"t","title":"x",' + raw + b"}}}"
    )
    result = Boundary(policy(Files.BOX)).agent_line(sent)
    assert isinstance(result, Rewritten)
    assert read(result.line)["params"]["update"]["locations"] == [{"path": "/Users/alice/a"}]


@pytest.mark.parametrize(
    "method", [b'"fs\\/read_text_file"', b'"\\u0066s/read_text_file"', b'"terminal\\u002fcreate"']
)
def test_escaped_methods_cannot_dodge_the_policy(method: bytes) -> None:
    """An fs or terminal request with escapes in its method is answered like a plain one."""
    sent = b'{"jsonrpc":"2.0","id":1,"method":' + method + b',"params":{"path":"/workspace/a"}}'
    assert isinstance(Boundary(policy(Files.BOX)).agent_line(sent), ToAgent)


def test_escaped_initialize_is_withheld_from() -> None:
    """An initialize spelled with escapes still has its capabilities withheld."""
    sent = (
        b'{"jsonrpc":"2.0","id":0,"method":"initi\\u0061lize",'
        b'"params":{"clientCapabilities":{"terminal":true}}}'
    )
    result = Boundary(policy(Files.BOX)).client_line(sent)
    assert isinstance(result, Rewritten)
    assert read(result.line)["params"]["clientCapabilities"] == {}


# -- the bounds of one line's translation ----------------------------------------------------


def located(count: int, **more: Any) -> bytes:
    """A tool_call_update with ``count`` locations under the rule, and ``more`` fields."""
    locations = [{"path": f"/workspace/p/{i}.py"} for i in range(count)]
    update = {"sessionUpdate": "tool_call_update", "toolCallId": "t", "locations": locations}
    update.update(more)
    return line({"method": "session/update", "params": {"sessionId": "s1", "update": update}})


@pytest.mark.parametrize("files", [Files.BOX, Files.SHARED])
def test_a_line_of_more_places_than_the_cap_passes_untranslated(files: Files) -> None:
    """A tool call with TRANSLATE_MAX_PLACES locations is translated; with one more it is
    delivered as the agent wrote it (nothing lost, nothing half translated), counted."""
    boundary = Boundary(policy(files))
    at_cap = boundary.agent_line(located(TRANSLATE_MAX_PLACES))
    assert isinstance(at_cap, Rewritten)
    assert len(at_cap.report.translations) == TRANSLATE_MAX_PLACES
    past = located(TRANSLATE_MAX_PLACES + 1)
    assert boundary.agent_line(past) is past
    assert boundary.summary()["over_cap"] == 1


def test_the_places_cap_counts_every_row_of_a_message() -> None:
    """Locations and diffs of one tool call are counted together against the cap."""
    half = TRANSLATE_MAX_PLACES // 2 + 1
    diffs = [{"type": "diff", "path": f"/workspace/p/{i}", "newText": ""} for i in range(half)]
    sent = located(half, content=diffs)
    assert Boundary(policy(Files.BOX)).agent_line(sent) is sent


def test_a_line_of_more_values_than_the_cap_is_not_even_read() -> None:
    """A line only to be translated that holds over READ_MAX_VALUES JSON values (a bound
    counted from its bytes) passes as it came, unparsed; so does an editor's prompt."""
    filler = [0] * READ_MAX_VALUES
    boundary = Boundary(policy(Files.BOX))
    sent = located(1, rawOutput=filler)
    assert boundary.agent_line(sent) is sent
    link = {"type": "resource_link", "name": "a", "uri": "file:///Users/alice/a"}
    prompt = line({"id": 3, "method": "session/prompt",
                   "params": {"sessionId": "s", "prompt": [link], "_meta": filler}})  # fmt: skip
    assert boundary.client_line(prompt) is prompt
    assert (boundary.parses, boundary.summary()["over_cap"]) == (0, 2)
    assert isinstance(boundary.agent_line(located(1, rawOutput=filler[:1000])), Rewritten)


def test_a_session_list_answer_past_the_cap_passes_and_is_forgotten() -> None:
    """A session/list answer with more directories than the cap goes back untranslated, and
    its request is no longer awaited."""
    boundary = Boundary(policy(Files.BOX))
    boundary.client_line(list_request(2))
    dirs = [f"/workspace/{i}" for i in range(TRANSLATE_MAX_PLACES + 1)]
    sent = line({"id": 2, "result": {"sessions": [
        {"sessionId": "s1", "cwd": "/workspace/p", "additionalDirectories": dirs}]}})  # fmt: skip
    assert boundary.agent_line(sent) is sent
    assert boundary.pending == {}


@pytest.mark.parametrize("files", [Files.BOX, Files.SHARED])
def test_lines_the_relay_must_read_are_read_past_the_caps(files: Files) -> None:
    """An fs request holding any number of values is still read: answered under box,
    translated under shared, never passed unchecked."""
    params = {"sessionId": "s", "path": "/workspace/p/a.py", "_meta": [0] * READ_MAX_VALUES}
    result = Boundary(policy(files)).agent_line(
        line({"id": 1, "method": "fs/read_text_file", "params": params})
    )
    if files is Files.BOX:
        assert isinstance(result, ToAgent)
    else:
        assert isinstance(result, Rewritten)
        assert read(result.line)["params"]["path"] == "/Users/alice/p/a.py"


@pytest.mark.parametrize("files", FILES)
def test_editor_lines_the_relay_must_read_are_refused_past_the_values_cap(files: Files) -> None:
    """A session/new that may hold over READ_MAX_VALUES values is refused -32600, unread,
    saying why and what to send; one within the cap is read."""
    params = {"cwd": "/Users/alice/p", "mcpServers": [], "_meta": [0] * READ_MAX_VALUES}
    boundary = Boundary(policy(files))
    result = boundary.client_line(line({"id": 1, "method": "session/new", "params": params}))
    assert isinstance(result, FrameRefused)
    error = read(result.reply)["error"]
    assert error["code"] == -32600
    assert "25000 JSON values" in error["data"]["detail"]
    assert "fewer values" in error["data"]["hint"]
    assert (boundary.parses, boundary.summary()["refused_to_editor"]) == (0, 1)
    params["_meta"] = [0] * (READ_MAX_VALUES - 100)
    within = boundary.client_line(line({"id": 2, "method": "session/new", "params": params}))
    assert isinstance(within, Rewritten)


def dense_request(request_id: int, path: str = "/workspace/p/a.py") -> bytes:
    """An fs request the relay must read, holding more values than READ_MAX_VALUES."""
    params = {"sessionId": "s", "path": path, "_meta": [{}] * READ_MAX_VALUES}
    return line({"id": request_id, "method": "fs/read_text_file", "params": params})


@pytest.mark.parametrize("files", [Files.BOX, Files.SHARED])
def test_costly_reads_are_the_must_read_lines_past_the_values_cap(files: Files) -> None:
    """Of one read, only the requests the relay must read that may hold over
    READ_MAX_VALUES values are costly: short lines, and long lines only to be translated
    (read within the cap or not at all), are not."""
    boundary = Boundary(policy(files))
    dense = dense_request(1)
    long_text = line({"method": "session/update", "params": {"pad": "x," * READ_MAX_VALUES}})
    lines = [line({"id": 2, "method": "fs/read_text_file", "params": {"path": "/a"}}),
             dense, located(1, rawOutput=[0] * READ_MAX_VALUES), long_text]  # fmt: skip
    assert boundary.costly_reads(lines) == [dense]
    assert boundary.costly_reads(lines[2:]) == []
    assert Boundary(policy(Files.PASS)).costly_reads(lines) == []


@pytest.mark.parametrize("files", [Files.BOX, Files.SHARED])
def test_lines_read_beforehand_cross_as_if_read_in_place(files: Files) -> None:
    """agent_lines given read_lines() of the costly lines uses each reading once and gives
    what it gives alone, the same line twice included (each translated from its own
    reading: a translation changes the message it reads)."""
    dense, outside = dense_request(1), dense_request(2, path="/etc/passwd")
    lines = [dense, dense, outside, located(1)]
    alone = Boundary(policy(files)).agent_lines(lines)
    boundary = Boundary(policy(files))
    read = read_lines(boundary.costly_reads(lines))
    ahead = boundary.agent_lines(lines, read)
    assert alone is not None
    assert ahead is not None
    assert [shown(r) for r in ahead] == [shown(r) for r in alone]
    assert read == {}  # each reading given was used, once


def test_what_read_lines_cannot_read_is_answered_as_unreadable() -> None:
    """A costly line that is not strict JSON (a key twice) is answered to the agent as it is
    when read in place."""
    dense = dense_request(1).replace(b'"sessionId":"s"', b'"path":"/a","sessionId":"s"')
    boundary = Boundary(policy(Files.BOX))
    results = boundary.agent_lines([dense], read_lines([dense]))
    assert results is not None
    [result] = results
    assert isinstance(result, ToAgent)
    assert shown(result) == shown(Boundary(policy(Files.BOX)).agent_line(dense))


def shown(result: bytes | Rewritten | ToAgent) -> bytes:
    """What a verdict sends: the line, translated or not, or the relay's answer."""
    if isinstance(result, ToAgent):
        return b"answer:" + result.reply
    return result.line if isinstance(result, Rewritten) else result


# -- hostile and odd input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "why"),
    [
        (b'{"jsonrpc":"2.0","id":0,"method":"initialize","method":"x","params":{}}', "twice"),
        (b'{"jsonrpc":"2.0","id":2,"method":"session/list","params":{"cwd":"\\ud800"}}',
         "lone surrogate"),
        (b'{"jsonrpc":"2.0","id":2,"method":"session/list",' + b"[" * 5000, "Expecting"),
        (b'{"jsonrpc":"2.0","id":0,"method":"initialize","x":"' + b"y" * (9 << 20) + b'"}',
         "over"),
    ],
)  # fmt: skip
def test_client_lines_the_relay_must_read_but_cannot_are_refused(sent: bytes, why: str) -> None:
    """initialize (under box) and session/list the relay cannot read in full: -32600, what to do."""
    boundary = Boundary(policy(Files.BOX))
    result = boundary.client_line(sent)
    assert isinstance(result, FrameRefused)
    reply = read(result.reply)
    assert reply["error"]["code"] == -32600
    assert why in reply["error"]["data"]["detail"]
    assert "session/list" in reply["error"]["data"]["hint"]
    assert boundary.summary()["refused_to_editor"] == 1


def test_unreadable_prompts_pass() -> None:
    """A prompt the relay cannot read is only missing a translation: it passes, counted."""
    sent = b'{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"prompt":[{"type":"resource_link","uri":"file:///Users/alice/a","uri":"x"}]}}'
    boundary = Boundary(policy(Files.BOX))
    assert boundary.client_line(sent) is sent
    assert boundary.summary()["not_read"] == 1


@pytest.mark.parametrize(
    "sent",
    [
        b'{"jsonrpc":"2.0","id":5,"method":"fs/read_text_file","method":"x","params":{}}',
        b'{"jsonrpc":"2.0","id":5,"method":"terminal/create","params":{"cwd":"\\udc00"}}',
        b'{"jsonrpc":"2.0","id":5,"method":"fs/write_text_file","params":' + b"[" * 5000,
    ],
)
def test_agent_requests_the_relay_must_act_on_but_cannot_read_are_answered(sent: bytes) -> None:
    """An fs/ or terminal/ request the relay cannot read is answered to the agent, not passed
    to the editor, where it could act on a box path."""
    for files in (Files.BOX, Files.SHARED):
        result = Boundary(policy(files)).agent_line(sent)
        assert isinstance(result, ToAgent)
        reply = read(result.reply)
        assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert Boundary(policy(Files.PASS)).agent_line(sent) is sent


def test_unreadable_agent_notifications_pass() -> None:
    """Any other agent line the relay cannot read passes as it came (the editor's SDK judges it)."""
    sent = (
        b'{"jsonrpc":"2.0","method":"session/update",'
        b'"params":{"update":{"locations":[{"path":"/workspace/a"}],"locations":[]}}}'
    )
    boundary = Boundary(policy(Files.BOX))
    assert boundary.agent_line(sent) is sent
    assert boundary.summary()["not_read"] == 1


@pytest.mark.parametrize(
    "update",
    [
        {"sessionUpdate": "tool_call", "locations": "/workspace/a"},
        {"sessionUpdate": "tool_call", "locations": [None, 1, "x", {"path": 2}]},
        {"sessionUpdate": "tool_call", "content": [{"type": "diff"}, {"type": "content"}]},
        {"sessionUpdate": "tool_call", "content": {"type": "diff", "path": "/workspace/a"}},
        {"sessionUpdate": "plan", "locations": [{"path": "/workspace/a"}]},
        {"sessionUpdate": ["tool_call"], "locations": [{"path": "/workspace/a"}]},
        {"locations": [{"path": "/workspace/a"}]},
    ],
)
def test_malformed_shapes_pass_untouched(update: dict[str, Any]) -> None:
    """Shapes the schema does not have (or other updates) are not translated."""
    sent = line({"method": "session/update", "params": {"update": update}})
    assert Boundary(policy(Files.BOX)).agent_line(sent) is sent


def test_translated_lines_keep_ids_numbers_and_meta_as_spelled() -> None:
    """Only the translated strings change: ids and numbers keep their spelling, _meta and
    unknown fields their place."""
    sent = (
        b'{"jsonrpc":"2.0","id":1E2,"method":"session/request_permission","params":{"_meta":'
        b'{"n":1.50,"p":"/workspace/a"},"toolCall":{"toolCallId":"t","locations":[{"path":'
        b'"/workspace/a","line":-0,"x-unknown":9999999999999999999999}]},"options":[]}}'
    )
    result = Boundary(policy(Files.BOX)).agent_line(sent)
    assert isinstance(result, Rewritten)
    assert result.line == sent.replace(b'"path":"/workspace/a"', b'"path":"/Users/alice/a"')


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
PATHS = st.sampled_from(
    ["/workspace/a", "/workspace/../etc", "/etc", "C:\\x", "", "file:///workspace/a",
     "file:///workspace/%zz", "file:///Users/alice/a", "/Users/alice/a", "/win/a:b"]
) | st.text(max_size=12)  # fmt: skip
LOCATIONS = st.lists(st.fixed_dictionaries({"path": PATHS | JSON_VALUES}), max_size=3)
CONTENT = st.lists(
    st.fixed_dictionaries({"type": st.sampled_from(["diff", "content", "terminal"]),
                           "path": PATHS, "content": st.just(LINK) | JSON_VALUES}),
    max_size=3,
)  # fmt: skip
UPDATES = st.fixed_dictionaries(
    {"sessionUpdate": st.sampled_from(["tool_call", "tool_call_update", "agent_message_chunk",
                                       "user_message_chunk", "plan"]) | JSON_VALUES},
    optional={"locations": LOCATIONS | JSON_VALUES, "content": CONTENT | JSON_VALUES,
              "rawInput": JSON_VALUES},
)  # fmt: skip
PARAMS = st.fixed_dictionaries(
    {},
    optional={"update": UPDATES, "toolCall": UPDATES, "path": PATHS | JSON_VALUES,
              "cwd": PATHS | JSON_VALUES, "clientCapabilities": JSON_VALUES,
              "prompt": CONTENT | JSON_VALUES, "sessions": LOCATIONS, "_meta": JSON_VALUES},
)  # fmt: skip
METHODS = st.sampled_from(sorted({m for row in CROSSINGS for m in row.methods} | {"x/y"}))


@settings(max_examples=300)
@given(
    st.sampled_from(FILES),
    METHODS | st.none(),
    st.none() | st.integers() | st.text(max_size=4) | st.booleans(),
    PARAMS | JSON_VALUES,
    st.booleans(),
)
def test_any_message_is_translated_whole_passed_or_answered(
    files: Files, method: str | None, request_id: Any, params: Any, ascii_only: bool
) -> None:
    """Whatever either side sends: the same bytes, a translation that changes only the fields
    it reports, a refusal, or an answer to the agent (to the request's id); never a raise."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    if method is not None:
        message["method"] = method
    message["params" if method else "result"] = params
    sent = json.dumps(message, ensure_ascii=ascii_only).encode()
    boundary = Boundary(policy(files))
    boundary.client_line(list_request(request_id) if isinstance(request_id, int) else b"{}")
    for result in (boundary.client_line(sent), boundary.agent_line(sent)):
        if isinstance(result, bytes):
            assert result == sent
        elif isinstance(result, Rewritten):
            got = json.loads(result.line)
            if not result.report.withheld:
                assert restored(got, result.report.crossings()) == message
        elif isinstance(result, ToAgent | FrameRefused):
            assert json.loads(result.reply)["id"] in (request_id, None)


MARKERS = [b'"fs/', b'"locations"', b'"initialize"', b'"session/list"', b'"resource', b"\\u0061"]


@given(st.binary(max_size=300), st.sampled_from(MARKERS))
def test_any_bytes_never_raise(noise: bytes, marker: bytes) -> None:
    """Arbitrary bytes around a marker are passed, translated, refused or answered."""
    for files in FILES:
        boundary = Boundary(policy(files))
        boundary.client_line(list_request(1))
        for sent in (noise + marker, marker + noise, noise[:100] + marker + noise[100:]):
            assert isinstance(boundary.client_line(sent), bytes | Rewritten | FrameRefused)
            assert isinstance(boundary.agent_line(sent), bytes | Rewritten | ToAgent)


def test_summary_counts_without_paths() -> None:
    """The summary is counts only: nothing of a path reaches the log line."""
    boundary = Boundary(policy(Files.BOX))
    boundary.client_line(line(EDITOR_MESSAGES["initialize"][0]))
    boundary.client_line(line(EDITOR_MESSAGES["session/prompt"][0]))
    boundary.agent_line(line(AGENT_MESSAGES["tool_call"][0]))
    boundary.agent_line(line(AGENT_MESSAGES["fs/read_text_file"][0]))
    summary = boundary.summary()
    assert summary == {"translated_to_agent": 2, "translated_to_editor": 4, "left_unmapped": 0,
                       "withheld": 2, "answered_to_agent": 1, "refused_to_editor": 0,
                       "not_read": 0, "over_cap": 0, "parses": 4}  # fmt: skip
    assert all(isinstance(v, int) for v in summary.values())


def test_reports_list_each_translation_for_the_trace() -> None:
    """A report lists (field, from, to) of each translation; fields() is what a log line takes."""
    result = Boundary(policy(Files.BOX)).agent_line(line(AGENT_MESSAGES["agent_message_chunk"][0]))
    assert isinstance(result, Rewritten)
    assert result.report.fields() == {
        "method": "session/update",
        "translations": [
            "params.update.content.uri: file:///workspace/p/a.py -> file:///Users/alice/p/a.py"
        ],
    }
    assert result.report.crossings() == result.report.translations


def test_the_editors_own_rule_spells_shared_box_folders() -> None:
    """With a Mac and a WSL rule onto one folder, paths come back in the style of the rule the
    editor's session was opened by."""
    rules = (parse_rule("/Users/alice=/w"), parse_rule("//wsl.localhost/Ubuntu/home/a=/w"))
    boundary = Boundary(
        RewritePolicy(CwdPolicy(rules, "reject", "/s", False), McpPolicy(), Files.BOX)
    )
    cwd = "\\\\wsl.localhost\\Ubuntu\\home\\a\\p"
    opened = line({"id": 1, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}})
    assert isinstance(boundary.client_line(opened), Rewritten)
    update = {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x",
              "locations": [{"path": "/w/p/a.py"}]}  # fmt: skip
    result = boundary.agent_line(line({"method": "session/update", "params": {"update": update}}))
    assert isinstance(result, Rewritten)
    path = read(result.line)["params"]["update"]["locations"][0]["path"]
    assert path == "\\\\wsl.localhost\\Ubuntu\\home\\a\\p\\a.py"


def test_no_policy_touches_nothing() -> None:
    """Without a policy every line passes both ways, unread."""
    boundary = Boundary(None)
    for message, _ in (*EDITOR_MESSAGES.values(), *AGENT_MESSAGES.values()):
        sent = line(message)
        assert boundary.client_line(sent) is sent
        assert boundary.agent_line(sent) is sent
    assert boundary.parses == 0


def streamed(text: str) -> bytes:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return line({"method": "session/update", "params": {"sessionId": "s1", "update": update}})


@pytest.mark.parametrize("files", FILES)
def test_a_read_of_plain_lines_is_looked_at_once(files: Files) -> None:
    """agent_lines: the lines of one read that hold nothing are passed on by one look (None)."""
    boundary = Boundary(policy(files))
    assert boundary.agent_lines([streamed(f"word {i} ") for i in range(200)]) is None
    assert boundary.agent_lines([]) is None
    assert boundary.parses == 0


@pytest.mark.parametrize("pad", [10, 20_000])  # looked at joined, and one by one when large
def test_agent_lines_translate_the_lines_that_need_it(pad: int) -> None:
    """agent_lines gives each line's result in order; lines that pass are the same objects."""
    boundary = Boundary(policy(Files.BOX))
    lines = [streamed("x" * pad) for _ in range(60)]
    lines[30] = line(AGENT_MESSAGES["tool_call"][0])
    lines[45] = line(AGENT_MESSAGES["fs/read_text_file"][0])
    results = boundary.agent_lines(lines)
    assert results is not None
    assert isinstance(results[30], Rewritten)
    assert isinstance(results[45], ToAgent)
    assert all(results[i] is lines[i] for i in range(60) if i not in (30, 45))
    assert boundary.parses == 2
