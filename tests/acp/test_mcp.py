"""Tests for relay.acp.mcp: the --mcp-servers file, ${VAR} expansion, merging and gating."""

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
    load_servers,
    merge,
)

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
