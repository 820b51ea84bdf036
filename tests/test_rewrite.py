"""Tests for relay.rewrite: the session-opening pre-filter and the (so far identity) rewriter."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.mcp import McpPolicy
from relay.paths import CwdPolicy
from relay.rewrite import (
    SESSION_OPENING_METHODS,
    RewritePolicy,
    Rewritten,
    SessionRewriter,
    might_open_session,
)

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
