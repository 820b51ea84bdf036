"""Tests for relay.acp.mcp: the --mcp-servers file, ${VAR} expansion, merging and gating, and
the relay's servers hidden from everyone but the agent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.acp.mcp import (
    MAX_DEPTH,
    Capabilities,
    McpConfigError,
    McpPolicy,
    expanded_values,
    hide_injected,
    load_servers,
    merge,
)
from relay.core.redaction import Redactor

ENV = {"TOKEN": "s3cr3t", "HOME": "/home/relay"}
STDIO = {"name": "files", "command": "/usr/bin/mcp-files", "args": ["--root", "/w"], "env": []}
HTTP = {"type": "http", "name": "search", "url": "https://mcp.example/x", "headers": []}
SSE = {"type": "sse", "name": "events", "url": "https://mcp.example/sse", "headers": []}


def load(servers: Any) -> tuple[dict[str, Any], ...]:
    return load_servers(json.dumps(servers), ENV, source="mcp.json")


def test_valid_file_loads_in_v1_shape() -> None:
    """All three kinds load; stdio loses an explicit type and missing lists are filled in."""
    loaded = load(
        [
            {"type": "stdio", "name": "a", "command": "a"},
            {"type": "http", "name": "b", "url": "http://b"},
            SSE,
        ]
    )
    assert loaded == (
        {"name": "a", "command": "a", "args": [], "env": []},
        {"type": "http", "name": "b", "url": "http://b", "headers": []},
        SSE,
    )


def test_variables_are_expanded_everywhere() -> None:
    """${VAR} in any string, nested or not, comes from the environment."""
    server = dict(HTTP, headers=[{"name": "Authorization", "value": "Bearer ${TOKEN}"}])
    stdio = dict(STDIO, args=["${HOME}/data"], env=[{"name": "T", "value": "${TOKEN}"}])
    loaded = load([server, stdio])
    assert loaded[0]["headers"][0]["value"] == "Bearer s3cr3t"
    assert loaded[1]["args"] == ["/home/relay/data"]
    assert loaded[1]["env"][0]["value"] == "s3cr3t"


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ([dict(HTTP, url="https://x/${MISSING}")],
         "mcp.json[0].url: ${MISSING} is not set in the relay's environment; set MISSING"),
        ({"name": "x"}, "mcp.json: expected a JSON array of MCP server objects"),
        (["x"], "mcp.json[0]: expected an object, got str"),
        ([{"type": "ws", "name": "x", "url": "ws://x"}], "unknown type 'ws'"),
        ([{"name": "x"}], "mcp.json[0]: stdio server: missing command"),
        ([{"type": "http", "name": "x"}], "http server: missing url"),
        ([dict(STDIO, cmd="x")], "unknown field cmd"),
        ([dict(STDIO, name="")], "mcp.json[0].name: expected a non-empty string"),
        ([dict(HTTP, url="ftp://x")], "expected an http:// or https:// URL"),
        ([dict(STDIO, args="--x")], "mcp.json[0].args: expected an array of strings"),
        ([dict(STDIO, env={"A": "1"})], "mcp.json[0].env: expected an array of"),
        ([dict(HTTP, headers=[{"name": "A"}])], "mcp.json[0].headers: expected an array"),
        ([STDIO, STDIO], "server names must be unique, repeated: ['files']"),
    ],
)  # fmt: skip
def test_bad_files_are_refused_with_where_and_what(servers: Any, message: str) -> None:
    """Every mistake in the file is named with its place in the file."""
    with pytest.raises(McpConfigError) as caught:
        load(servers)
    assert message in str(caught.value)


def test_invalid_json() -> None:
    """A file that is not JSON says so."""
    with pytest.raises(McpConfigError, match=r"mcp\.json: not valid JSON"):
        load_servers("[", ENV, source="mcp.json")


def meta_nested(depth: int) -> str:
    """The file: one stdio server whose ``_meta`` makes the whole ``depth`` levels deep."""
    inner = "[" * (depth - 3) + "]" * (depth - 3)
    return f'[{{"name": "x", "command": "y", "_meta": {{"k": {inner}}}}}]'


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        (meta_nested(MAX_DEPTH), False),
        (meta_nested(MAX_DEPTH + 1), True),
        ("[" * 100_000 + "]" * 100_000, True),  # past what json.loads can follow
        (meta_nested(5_000), True),
    ],
    ids=["at the limit", "one past", "past the parser", "deep meta"],
)
def test_a_file_nested_too_deeply_is_refused(text: str, refused: bool) -> None:
    """A file nested deeper than MAX_DEPTH is refused, saying so, however deep (never a
    RecursionError); one at the limit loads."""
    if not refused:
        assert load_servers(text, ENV, source="mcp.json")[0]["name"] == "x"
        return
    with pytest.raises(McpConfigError) as caught:
        load_servers(text, ENV, source="mcp.json")
    assert str(caught.value).startswith(
        f"mcp.json: nested too deeply (arrays or objects more than {MAX_DEPTH} levels"
    )


CLIENT = [
    {"name": "laptop-tool", "command": "/Users/alice/bin/tool", "args": [], "env": []},
    {"type": "http", "name": "search", "url": "https://client/x", "headers": []},
    {"type": "http", "name": "docs", "url": "https://client/docs", "headers": []},
]
ALL = Capabilities(http=True, sse=True)


@pytest.mark.parametrize(
    ("policy", "caps", "names", "report"),
    [
        (McpPolicy((STDIO, HTTP)), ALL,
         ["laptop-tool", "docs", "files", "search"],
         {"injected": ["files", "search"], "overridden": ["search"]}),
        (McpPolicy((STDIO, HTTP), drop_client_stdio=True), ALL,
         ["docs", "files", "search"],
         {"injected": ["files", "search"], "dropped": ["laptop-tool"],
          "overridden": ["search"]}),
        (McpPolicy((STDIO, HTTP, SSE)), Capabilities(),
         ["laptop-tool", "search", "docs", "files"],
         {"injected": ["files"], "withheld": ["search", "events"]}),
        (McpPolicy((STDIO, HTTP, SSE)), Capabilities(http=True),
         ["laptop-tool", "docs", "files", "search"],
         {"injected": ["files", "search"], "withheld": ["events"], "overridden": ["search"]}),
        (McpPolicy((STDIO,), merge="replace"), ALL,
         ["files"],
         {"injected": ["files"], "overridden": ["laptop-tool", "search", "docs"]}),
    ],
)  # fmt: skip
def test_merge(
    policy: McpPolicy, caps: Capabilities, names: list[str], report: dict[str, list[str]]
) -> None:
    """Append keeps the client's servers (the relay's win a clash), replace drops them;
    http and sse servers of the relay are withheld unless the agent declared them."""
    merged, got = merge(CLIENT, policy, caps)
    assert [s["name"] for s in merged] == names
    expected: dict[str, list[str]] = {
        "injected": [],
        "dropped": [],
        "overridden": [],
        "withheld": [],
    }
    expected |= report
    assert vars(got) == expected


def test_merge_does_not_alias_the_policy() -> None:
    """Merged entries are copies: changing a request never changes the configured servers."""
    merged, _ = merge([], McpPolicy((STDIO,)), ALL)
    merged[0]["name"] = "changed"
    assert STDIO["name"] == "files"


@pytest.mark.parametrize(
    ("result", "caps"),
    [
        ({"agentCapabilities": {"mcpCapabilities": {"http": True, "sse": False}}},
         Capabilities(http=True)),
        ({"agentCapabilities": {"mcpCapabilities": {"http": "yes"}}}, Capabilities()),
        ({"agentCapabilities": {}}, Capabilities()),
        ({"agentCapabilities": None}, Capabilities()),
        ({}, Capabilities()),
    ],
)  # fmt: skip
def test_capabilities_from_initialize(result: dict[str, Any], caps: Capabilities) -> None:
    """Only an explicit true in mcpCapabilities opens http or sse."""
    assert Capabilities.from_initialize(result) == caps


def test_expanded_values_are_what_the_file_named() -> None:
    """The values ${VAR} stood for are known, to be kept out of logs and traces."""
    text = '[{"name":"a","command":"x","args":["${TOKEN}","${EMPTY}","$NOT"]}]'
    env = {"TOKEN": "t-123", "EMPTY": "", "OTHER": "o"}
    assert expanded_values(text, env) == {"t-123"}


# -- the relay's servers, hidden ------------------------------------------------------------

PATTERNS_ONLY = Redactor()  # query values and bearer tokens only: no secret registered
GITHUB = {
    "type": "http",
    "name": "github",
    "url": "https://mcp.example/gh?token=abc123",
    "headers": [{"name": "Authorization", "value": "Bearer ghp-secret"}],
}
FILES = {
    "name": "files",
    "command": "/bin/files",
    "args": ["--x"],
    "env": [{"name": "K", "value": "v1"}],
}
CLIENT_OWN = {
    "name": "notes",
    "command": "/bin/notes",
    "args": [],
    "env": [{"name": "K", "value": "v2"}],
}


def session_new(*servers: Any) -> bytes:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": 2, "method": "session/new"}
    request["params"] = {"cwd": "/w", "mcpServers": list(servers)}
    return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("servers", "injected", "hidden", "kept"),
    [
        ([GITHUB], ["github"], ["github"], []),
        ([CLIENT_OWN, FILES], ["files"], ["files"], ["v2"]),  # the client's own values stay
        ([CLIENT_OWN], [], [], ["v2"]),
        ([CLIENT_OWN, GITHUB], ["files"], [], ["v2", "ghp-secret", "abc123"]),  # not injected
    ],
)
def test_injected_server_values_are_hidden(
    servers: list[dict[str, Any]], injected: list[str], hidden: list[str], kept: list[str]
) -> None:
    """Header and env values of the relay's injected servers become [redacted], nothing else."""
    line = session_new(*servers)
    shown = hide_injected(line, injected, PATTERNS_ONLY.redact_text)
    assert shown is not None
    out, names = shown
    assert names == hidden
    if not hidden:
        assert out is line
    text = out.decode()
    for secret in ("ghp-secret", "abc123", "v1"):
        assert (secret in text) == (secret in kept)
    for value in kept:
        assert value in text
    parsed = json.loads(out)
    assert [s["name"] for s in parsed["params"]["mcpServers"]] == [s["name"] for s in servers]
    if hidden:  # only the values changed: same text once they are put back
        restored = json.loads(line)
        for server in restored["params"]["mcpServers"]:
            if server["name"] in hidden:
                for pair in server.get("headers", []) + server.get("env", []):
                    pair["value"] = "[redacted]"
                if "url" in server:
                    server["url"] = PATTERNS_ONLY.redact_text(server["url"])
        assert out == json.dumps(restored, ensure_ascii=False, separators=(",", ":")).encode()


def test_expanded_values_anywhere_in_an_injected_server_are_hidden() -> None:
    """A ${VAR} token in args, command, URL userinfo, a header's name or _meta is as hidden
    as one in a header's value."""
    redactor = Redactor()
    redactor.add_secret("tok-from-env-123")
    server = {
        "type": "http",
        "name": "api",
        "url": "https://bot:pa55word@mcp.example/x?key=tok-from-env-123",
        "headers": [
            {"name": "X-tok-from-env-123", "value": "v", "_meta": {"k": "tok-from-env-123"}}
        ],
        "_meta": {"auth": ["tok-from-env-123", 1]},
    }
    stdio = {
        "name": "cli",
        "command": "/opt/tok-from-env-123/bin/mcp",
        "args": ["--token", "tok-from-env-123", "--verbose"],
        "env": [],
    }
    shown = hide_injected(session_new(server, stdio), ["api", "cli"], redactor.redact_text)
    assert shown is not None
    out, names = shown
    text = out.decode()
    assert names == ["api", "cli"]
    assert "tok-from-env-123" not in text
    assert "pa55word" not in text
    assert "bot:" not in text
    parsed = json.loads(out)["params"]["mcpServers"]
    assert parsed[0]["url"].startswith("https://[redacted]@mcp.example/x")
    assert parsed[0]["_meta"] == {"auth": ["[redacted]", 1]}
    assert parsed[0]["headers"] == [
        {"name": "X-[redacted]", "value": "[redacted]", "_meta": {"k": "[redacted]"}}
    ]
    assert parsed[1]["args"] == ["--token", "[redacted]", "--verbose"]


def test_hiding_keeps_every_other_byte_as_the_rewrite_wrote_it() -> None:
    """Numbers keep their spelling and the other fields their order: only values change."""
    line = (
        b'{"jsonrpc":"2.0","id":1E2,"method":"session/new","params":{"cwd":"/w","n":1.50,'
        b'"mcpServers":[{"name":"files","command":"c","args":[],'
        b'"env":[{"name":"K","value":"v1"}]}]}}'
    )
    shown = hide_injected(line, ["files"], PATTERNS_ONLY.redact_text)
    assert shown == (line.replace(b'"v1"', b'"[redacted]"'), ["files"])


@pytest.mark.parametrize(
    "line",
    [b"{not json", b'{"jsonrpc":"2.0","id":1,"params":' + b"[" * 300 + b"]" * 300 + b"}"],
    ids=["unreadable", "too deep"],
)
def test_a_line_that_cannot_be_read_again_is_not_shown(line: bytes) -> None:
    """A line the relay cannot read again is shown to nobody (None), never as it is."""
    assert hide_injected(line, ["files"], PATTERNS_ONLY.redact_text) is None


@pytest.mark.parametrize(
    "servers",
    [[{"name": ["files"], "env": [{"name": "K", "value": "v2"}]}], ["files"], [7]],
    ids=["a list for a name", "a string", "a number"],
)
def test_odd_entries_the_client_sent_are_left_as_they_are(servers: list[Any]) -> None:
    """Entries that are not the relay's servers, whatever their shape, pass unchanged."""
    line = session_new(*servers)
    assert hide_injected(line, ["files"], PATTERNS_ONLY.redact_text) == (line, [])
