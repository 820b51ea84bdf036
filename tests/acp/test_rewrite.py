"""Tests for relay.acp.rewrite: the session-opening pre-filter and the rewrite of those requests."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.rewrite import (
    SESSION_OPENING_METHODS,
    RewritePolicy,
    Rewritten,
    SessionRewriter,
    might_open_session,
)
from relay.core.framing import FrameRefused

OTHER_METHODS = (
    "initialize",
    "authenticate",
    "session/prompt",
    "session/cancel",
    "session/update",
    "session/set_mode",
    "session/request_permission",
    "fs/read_text_file",
    "terminal/create",
)


def request(method: str, params: object = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


@pytest.mark.parametrize(
    "line",
    [
        *(request(m, {"cwd": "/w", "mcpServers": []}) for m in SESSION_OPENING_METHODS),
        b'{ "method" : "session/load" , "id" : 2 }',
        b'{"method":"session\\/new","id":1}',
        b'{"method":"\\u0073ession/fork","id":1}',
        b'{"method":"session/\\u006Eew","id":1}',
        b'{"method":"session\\u002fresume","id":1}',
        # False positives are allowed: the parser behind the filter decides.
        request("session/newish"),
        request("session/prompt", {"text": 'please call "session/new"'}),
        request("session/prompt", {"text": "see session/new in the docs"}),
        request("session/prompt", {"url": "http://h/a/b"}).replace(b"/", b"\\/"),
    ],
)
def test_lines_that_might_open_a_session(line: bytes) -> None:
    """Every line that could carry a session-opening method passes the pre-filter."""
    assert might_open_session(line)


@pytest.mark.parametrize(
    "line",
    [
        *(request(m, {"sessionId": "s1"}) for m in OTHER_METHODS),
        b'{"jsonrpc":"2.0","id":1,"result":{"sessionId":"s1"}}',
        request("initialize", {"text": "see session/new in the docs"}),
        request("session/prompt", {"text": "café ✓ \u2028"}),
        request("session/prompt", {"text": 'a "quoted" \\ line\n'}),
        request("Session/New"),
        b"",
        b"not json at all",
    ],
)
def test_lines_that_cannot_open_a_session(line: bytes) -> None:
    """Ordinary traffic (prompts, updates, cancels, responses) is rejected without parsing."""
    assert not might_open_session(line)


# -- properties ------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


def _spellings(char: str) -> list[str]:
    """Every way JSON may spell ``char`` inside a string literal."""
    ways = [char, f"\\u{ord(char):04x}", f"\\u{ord(char):04X}"]
    return [*ways, "\\/"] if char == "/" else ways


def spelled(method: str) -> st.SearchStrategy[str]:
    """The JSON string body of ``method``, each character written plainly or escaped."""
    return st.tuples(*(st.sampled_from(_spellings(c)) for c in method)).map("".join)


@st.composite
def request_lines(draw: st.DrawFn, methods: st.SearchStrategy[str]) -> tuple[str, bytes]:
    """A JSON-RPC request line with its method spelled any valid way, fields in any order."""
    method = draw(methods)
    fields = [
        '"jsonrpc":"2.0"',
        f'"id":{draw(st.integers(0, 10**6))}',
        f'"method":"{draw(spelled(method))}"',
        f'"params":{json.dumps(draw(JSON_VALUES), ensure_ascii=draw(st.booleans()))}',
    ]
    separator = draw(st.sampled_from([",", ", ", " ,\t"]))
    line = ("{" + separator.join(draw(st.permutations(fields))) + "}").encode()
    return method, line


@pytest.mark.slow
@given(request_lines(st.sampled_from(SESSION_OPENING_METHODS)))
def test_no_false_negatives_however_the_method_is_spelled(case: tuple[str, bytes]) -> None:
    """A session-opening request passes the pre-filter even with JSON escapes in its method."""
    method, line = case
    assert json.loads(line)["method"] == method
    assert might_open_session(line)


NON_OPENING = st.sampled_from(OTHER_METHODS) | st.text(max_size=20).filter(
    lambda m: m not in SESSION_OPENING_METHODS
)


@given(NON_OPENING, JSON_VALUES, st.booleans())
def test_other_methods_pass_unchanged(method: str, params: object, ascii_only: bool) -> None:
    """A request whose method opens no session reaches the agent byte-identical."""
    message = {"jsonrpc": "2.0", "id": 3, "method": method, "params": params}
    line = json.dumps(message, ensure_ascii=ascii_only).encode()
    assert SessionRewriter().client_line(line) == line


@given(st.binary(max_size=200))
def test_unconfigured_rewriter_is_the_identity(line: bytes) -> None:
    """Until a rewrite is configured, every line (session-opening or not) passes unchanged."""
    assert SessionRewriter().client_line(line) == line


@given(request_lines(st.sampled_from(SESSION_OPENING_METHODS)))
def test_unconfigured_rewriter_passes_session_requests(case: tuple[str, bytes]) -> None:
    """Session-opening requests also pass unchanged while no rewrite is configured."""
    _, line = case
    assert SessionRewriter().client_line(line) == line


WORKSPACE_ONLY = RewritePolicy(
    CwdPolicy(rules=(), fallback="workspace", workspace="/srv/work", must_exist=False),
    McpPolicy(),
)


@given(st.sampled_from(SESSION_OPENING_METHODS).flatmap(spelled))
def test_escaped_method_cannot_dodge_the_rewrite(method_token: str) -> None:
    """A session request with JSON escapes in its method is rewritten like a plain one."""
    line = f'{{"jsonrpc":"2.0","id":1,"method":"{method_token}","params":{{"cwd":"/home/a"}}}}'
    result = SessionRewriter(WORKSPACE_ONLY).client_line(line.encode())
    assert isinstance(result, Rewritten)
    assert json.loads(result.line)["params"]["cwd"] == "/srv/work"


# -- the rewrite proper ---------------------------------------------------------------

FILES = {"name": "files", "command": "/usr/bin/mcp-files", "args": [], "env": []}
SEARCH = {"type": "http", "name": "search", "url": "https://mcp/x", "headers": []}
MAPPED = CwdPolicy((parse_rule("/Users/alice=/workspace"),), "workspace", "/srv/work", False)
CONFIGURED = RewritePolicy(MAPPED, McpPolicy((FILES,)))
NO_SERVERS = RewritePolicy(MAPPED, McpPolicy())


def rewrite(line: bytes, policy: RewritePolicy = CONFIGURED) -> bytes | FrameRefused | Rewritten:
    return SessionRewriter(policy, exists=lambda _p: True).client_line(line)


def line_of(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


@given(st.binary(max_size=300) | NON_OPENING.map(lambda m: request(m, {"cwd": "/Users/alice"})))
def test_configured_rewriter_passes_other_lines_unchanged(line: bytes) -> None:
    """With mappings and MCP servers configured, any other line still passes byte-identical."""
    if might_open_session(line) and b"session/" in line:
        return  # a random line that happens to hold a session request is not "other"
    assert rewrite(line) == line


EXTRA_FIELDS = st.dictionaries(
    st.text(max_size=8).filter(lambda k: k not in ("cwd", "mcpServers", "additionalDirectories")),
    JSON_VALUES,
    max_size=5,
)


@pytest.mark.slow
@given(
    st.sampled_from(SESSION_OPENING_METHODS),
    st.integers(-(10**12), 10**12) | st.text(max_size=10),
    EXTRA_FIELDS,
    st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=3),
    st.integers(0, 5),
)
def test_rewrite_keeps_every_field_it_does_not_mean_to_change(
    method: str, request_id: int | str, extra: dict[str, Any], meta: dict[str, Any], at: int
) -> None:
    """Only cwd and mcpServers change; the id (and its type), _meta, unknown fields and key
    order are kept."""
    params: dict[str, Any] = dict(extra)
    keys = list(params)
    keys.insert(min(at, len(keys)), "cwd")
    params = {k: ("/Users/alice/p" if k == "cwd" else params[k]) for k in keys}
    params["_meta"] = meta
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    result = rewrite(line_of(message))
    assert isinstance(result, Rewritten)
    got = json.loads(result.line)
    assert list(got) == list(message)
    assert (got["id"], type(got["id"])) == (request_id, type(request_id))
    assert got["params"].pop("cwd") == "/workspace/p"
    assert got["params"].pop("mcpServers") == [FILES]
    params.pop("cwd")
    assert list(got["params"]) == list(params)
    assert got["params"] == params


@pytest.mark.parametrize(
    ("params", "policy", "expected"),
    [
        # resume/fork: mcpServers is optional; added only when something is injected
        ({"sessionId": "s", "cwd": "/Users/alice/x"}, NO_SERVERS,
         {"sessionId": "s", "cwd": "/workspace/x"}),
        ({"sessionId": "s", "cwd": "/Users/alice/x"}, CONFIGURED,
         {"sessionId": "s", "cwd": "/workspace/x", "mcpServers": [FILES]}),
        ({"sessionId": "s", "cwd": "/workspace"}, RewritePolicy(
            CwdPolicy((parse_rule("/workspace=/workspace"),), "keep", "/w", False), McpPolicy()),
         None),
        ({"cwd": "/Users/alice", "additionalDirectories": ["/Users/alice/lib", "D:\\\\x"]},
         NO_SERVERS,
         {"cwd": "/workspace", "additionalDirectories": ["/workspace/lib", "/srv/work"]}),
    ],
)  # fmt: skip
def test_resume_and_additional_directories(
    params: dict[str, Any], policy: RewritePolicy, expected: dict[str, Any] | None
) -> None:
    """On session/resume mcpServers appears only when injected; additionalDirectories map
    like cwd; a request needing no change passes byte-identical."""
    line = line_of({"jsonrpc": "2.0", "id": 1, "method": "session/resume", "params": params})
    result = rewrite(line, policy)
    if expected is None:
        assert result == line
        return
    assert isinstance(result, Rewritten)
    assert json.loads(result.line)["params"] == expected


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "method": "session/new", "params": {"cwd": "/Users/alice"}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/new"},
        {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": ["/Users/alice"]},
        {"jsonrpc": "2.0", "id": 1, "result": {"method": "session/new", "cwd": "/Users/alice"}},
    ],
    ids=["notification", "no-params", "params-not-object", "response"],
)
def test_malformed_or_non_request_session_lines_pass(message: dict[str, Any]) -> None:
    """Only well-formed session requests are rewritten; anything else is the agent's to judge."""
    line = line_of(message)
    assert rewrite(line) == line


@pytest.mark.parametrize("request_id", [7, "seven", None])
def test_refusal_answers_the_same_id(request_id: int | str | None) -> None:
    """A refused path is answered with -32602 to the request's own id, whatever its type."""
    policy = RewritePolicy(CwdPolicy((), "reject", "/w", False), McpPolicy())
    line = line_of(
        {"jsonrpc": "2.0", "id": request_id, "method": "session/new", "params": {"cwd": "/x"}}
    )
    result = rewrite(line, policy)
    assert isinstance(result, FrameRefused)
    reply = json.loads(result.reply)
    assert (reply["id"], reply["error"]["code"]) == (request_id, -32602)
    assert reply["error"]["message"] == (
        "cwd /x cannot be used on the agent's machine: no --cwd-map rule matches it and "
        "--cwd-fallback is reject. Mappings in force: otherwise: reject"
    )


def test_a_refusal_echoes_a_bounded_path() -> None:
    """A 512 KiB cwd under reject is answered with a reply of a few KiB: the relay's answer
    does not grow with what it refuses (the path is cut, saying its length)."""
    policy = RewritePolicy(CwdPolicy((), "reject", "/w", False), McpPolicy())
    huge = "/" + "x" * (512 * 1024)
    line = line_of({"id": 1, "method": "session/new", "params": {"cwd": huge}})
    result = rewrite(line, policy)
    assert isinstance(result, FrameRefused)
    assert len(result.reply) < 4096
    assert f"({len(huge)} chars)" in json.loads(result.reply)["error"]["data"]["clientPath"]


def test_refused_additional_directory_names_its_field() -> None:
    """A refused additionalDirectories entry is named by its index."""
    params = {"cwd": "/x", "additionalDirectories": ["/y"]}
    policy = RewritePolicy(CwdPolicy((parse_rule("/x=/srv"),), "reject", "/w", False), McpPolicy())
    result = rewrite(line_of({"id": 1, "method": "session/new", "params": params}), policy)
    assert isinstance(result, FrameRefused)
    assert json.loads(result.reply)["error"]["data"]["field"] == "additionalDirectories[0]"


def test_capabilities_come_from_the_agents_initialize_reply() -> None:
    """http servers are withheld until the agent's initialize reply declares http, once."""
    rewriter = SessionRewriter(RewritePolicy(MAPPED, McpPolicy((FILES, SEARCH))))
    line = line_of({"id": 1, "method": "session/new", "params": {"cwd": "/Users/alice"}})
    before = rewriter.client_line(line)
    assert rewriter.watches_agent
    assert rewriter.agent_line(b'{"id":0,"method":"x"}') is True
    reply = {"id": 0, "result": {"agentCapabilities": {"mcpCapabilities": {"http": True}}}}
    assert rewriter.agent_line(line_of(reply)) is False
    after = rewriter.client_line(line)
    assert isinstance(before, Rewritten)
    assert isinstance(after, Rewritten)
    assert json.loads(before.line)["params"]["mcpServers"] == [FILES]
    assert before.report.fields()["mcp_withheld"] == ["search"]
    assert "http=False" in before.report.fields()["withheld_because"]
    assert json.loads(after.line)["params"]["mcpServers"] == [FILES, SEARCH]


# -- robustness: whatever a client sends --------------------------------------------------------

EVERYTHING = RewritePolicy(
    CwdPolicy(
        (parse_rule("/Users/alice=/workspace"), parse_rule("C:\\Users\\bob=/workspace/bob")),
        "reject",
        "/srv/work",
        True,
    ),
    McpPolicy((FILES, SEARCH), "append", drop_client_stdio=True),
)
MCP_ENTRIES = JSON_VALUES | st.fixed_dictionaries(
    {"name": st.text(max_size=6) | JSON_VALUES},
    optional={
        "command": st.text(max_size=6) | JSON_VALUES,
        "type": st.sampled_from(["stdio", "http", "sse", "ws"]) | JSON_VALUES,
        "url": st.text(max_size=6),
        "args": JSON_VALUES,
        "env": JSON_VALUES,
        "headers": JSON_VALUES,
    },
)
PATHS = st.text(max_size=20) | st.sampled_from(
    ["/Users/alice/p", "/Users/alice/../..", "C:\\Users\\bob\\x", "\\\\wsl$\\U\\h", "", "/", ".."]
)
SESSION_PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "cwd": PATHS | JSON_VALUES,
        "additionalDirectories": st.lists(PATHS | JSON_VALUES, max_size=3) | JSON_VALUES,
        "mcpServers": st.lists(MCP_ENTRIES, max_size=3) | JSON_VALUES,
        "sessionId": JSON_VALUES,
        "_meta": JSON_VALUES,
    },
)


@given(
    st.sampled_from(SESSION_OPENING_METHODS) | st.text(max_size=12),
    st.none() | st.integers() | st.text(max_size=6) | JSON_VALUES,
    SESSION_PARAMS | JSON_VALUES,
    st.booleans(),
    st.booleans(),
)
def test_any_session_request_is_rewritten_refused_or_passed_never_raises(
    method: str, request_id: object, params: object, exists: bool, initialized: bool
) -> None:
    """Any JSON-ish session request: passed, rewritten (same id) or refused (its id), no raise."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    line = json.dumps(message, ensure_ascii=False).encode()
    rewriter = SessionRewriter(EVERYTHING, exists=lambda _p: exists)
    if initialized:
        rewriter.agent_line(
            b'{"jsonrpc":"2.0","id":0,"result":{"agentCapabilities":{"mcpCapabilities":'
            b'{"http":true}}}}'
        )
    result = rewriter.client_line(line)
    if isinstance(result, Rewritten):
        got = json.loads(result.line)
        assert (got["method"], got["id"]) == (method, request_id)
    elif isinstance(result, FrameRefused):
        assert json.loads(result.reply)["id"] == request_id
    else:
        assert result == line


@given(
    st.binary(max_size=200), st.sampled_from([b'"session/new"', b'"session\\/load"', b"\\u0073"])
)
def test_any_bytes_holding_a_session_marker_never_raise(noise: bytes, marker: bytes) -> None:
    """Arbitrary bytes around a session marker pass, or are answered; nothing raises."""
    for line in (noise + marker, marker + noise, noise[:50] + marker + noise[50:]):
        result = SessionRewriter(EVERYTHING).client_line(line)
        assert isinstance(result, bytes | Rewritten | FrameRefused)
        SessionRewriter(EVERYTHING).agent_line(line + b'"agentCapabilities"')


def test_session_request_nested_too_deeply_is_refused_not_passed() -> None:
    """A session request too deep to parse is refused (-32600), not passed on unrewritten."""
    line = (
        b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/etc","_meta":'
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}}"
    )
    result = SessionRewriter(EVERYTHING).client_line(line)
    assert isinstance(result, FrameRefused)
    reply = json.loads(result.reply)
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)


def test_agent_line_nested_too_deeply_is_not_the_initialize_reply() -> None:
    """A deeply nested agent line is looked past, not fatal; the real reply still counts."""
    rewriter = SessionRewriter(EVERYTHING)
    assert rewriter.agent_line(b'{"agentCapabilities":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert not rewriter.agent_line(
        b'{"jsonrpc":"2.0","id":0,"result":{"agentCapabilities":{"mcpCapabilities":{"http":true}}}}'
    )


# -- hostile session requests: read whole and unambiguously, or refused -------------------

STRICT = RewritePolicy(
    CwdPolicy((parse_rule("/Users/alice=/workspace"),), "reject", "/srv/work", False),
    McpPolicy((), drop_client_stdio=True),
)
SH = '{"name":"sh","command":"/bin/sh","args":[],"env":[]}'


def raw_request(params: str, method: str = '"session/new"', request_id: str = "1") -> bytes:
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":{method},"params":{params}}}'.encode()


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        (raw_request('{"cwd":"/etc","mcpServers":[]}', method='"session/new","method":"x"'),
         "'method' appears twice"),
        (raw_request('{"cwd":"/Users/alice/p","cwd":"/etc","mcpServers":[]}'),
         "'cwd' appears twice"),
        (raw_request('{"cwd":"/Users/alice/\\ud800","mcpServers":[]}'), "lone surrogate"),
        (raw_request('{"cwd":"/etc","mcpServers":[],"x":NaN}'), "NaN is not JSON"),
        (raw_request('{"cwd":"/etc","mcpServers":[' + SH + "]"), "Expecting"),
        (raw_request('{"cwd":"/etc","mcpServers":[],"pad":"' + "x" * (1 << 20) + '"}'),
         "over 1048576 bytes"),
    ],
)  # fmt: skip
def test_session_requests_the_relay_cannot_read_in_full_are_refused(
    line: bytes, detail: str
) -> None:
    """Duplicate keys, lone surrogates, non-JSON, oversized: -32600 with why, never passed on."""
    result = SessionRewriter(STRICT).client_line(line)
    assert isinstance(result, FrameRefused)
    reply = json.loads(result.reply)
    assert (reply["id"], reply["error"]["code"]) == (None, -32600)
    assert detail in reply["error"]["data"]["detail"]


def test_a_number_of_5000_digits_does_not_let_a_session_request_past() -> None:
    """Huge numbers are read (as text), so cwd and stdio servers are still judged."""
    huge = "9" * 5000
    line = raw_request(f'{{"cwd":"/etc","mcpServers":[{SH}],"n":{huge}}}')
    result = SessionRewriter(STRICT).client_line(line)
    assert isinstance(result, FrameRefused)
    reply = json.loads(result.reply.replace(huge.encode(), b"0"))
    assert reply["error"]["code"] == -32602  # /etc maps nowhere: --cwd-fallback reject
    mapped = raw_request(f'{{"cwd":"/Users/alice/p","mcpServers":[{SH}],"n":{huge}}}')
    rewritten = SessionRewriter(STRICT).client_line(mapped)
    assert isinstance(rewritten, Rewritten)
    assert rewritten.line == raw_request(f'{{"cwd":"/workspace/p","mcpServers":[],"n":{huge}}}')


@pytest.mark.parametrize("request_id", ["1E2", "-0", "1.50", "1e999", '"\\u0041"'])
def test_ids_keep_their_exact_spelling(request_id: str) -> None:
    """A rewrite and the relay's own refusal carry the id spelled as the client spelled it."""
    rewritten = SessionRewriter(STRICT).client_line(
        raw_request('{"cwd":"/Users/alice/p","mcpServers":[]}', request_id=request_id)
    )
    assert isinstance(rewritten, Rewritten)
    spelled = request_id.replace('"\\u0041"', '"A"').encode()
    assert rewritten.line.startswith(b'{"jsonrpc":"2.0","id":' + spelled + b",")
    refused = SessionRewriter(STRICT).client_line(
        raw_request('{"cwd":"/etc","mcpServers":[]}', request_id=request_id)
    )
    assert isinstance(refused, FrameRefused)
    assert b'"id":' + spelled + b"," in refused.reply
    json.loads(refused.reply)  # valid JSON (1e999 is a number, not Infinity)
