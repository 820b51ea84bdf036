"""Tests for relay.observe.boundaryrecords: what the boundary did, kept for the dev console.

The reports come from the real boundary (:class:`relay.acp.boundary.Boundary`) handling
real ACP messages; the records are what ``GET /console-boundary`` answers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.acp.boundary import Boundary
from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.refusals import ToAgent
from relay.acp.rewrite import Files, RewritePolicy, RewriteReport, Rewritten, Translation
from relay.core.framing import Dropped
from relay.observe.boundaryrecords import MAX_RECORDS, VALUE_CHARS, BoundaryRecords

RULES = (parse_rule("/Users/alice=/workspace"),)
POLICY = RewritePolicy(CwdPolicy(RULES, "reject", "/srv/work", False), McpPolicy(), Files.BOX)


def line(message: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode()


INITIALIZE = line(
    {
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": True}, "terminal": True},
        },
    }
)
NEW = line(
    {"id": 1, "method": "session/new", "params": {"cwd": "/Users/alice/p", "mcpServers": []}}
)
TOOL_CALL = line(
    {
        "method": "session/update",
        "params": {
            "sessionId": "s1",
            "update": {
                "sessionUpdate": "tool_call",
                "toolCallId": "t1",
                "title": "Edit a.py",
                "locations": [{"path": "/workspace/p/a.py"}],
            },
        },
    }
)
READ = line({"id": 7, "method": "fs/read_text_file", "params": {"sessionId": "s1", "path": "/x"}})


def client_report(boundary: Boundary, sent: bytes) -> RewriteReport:
    result = boundary.client_line(sent)
    assert isinstance(result, Rewritten)
    return result.report


def test_withheld_capabilities_and_translated_paths_both_ways() -> None:
    """initialize's fs and terminal withheld, session/new's cwd editor → box, a tool call's
    location box → editor, an fs request answered by the relay: one record each, in order."""
    boundary = Boundary(POLICY)
    records = BoundaryRecords()
    records.client(client_report(boundary, INITIALIZE))
    records.client(client_report(boundary, NEW))
    crossed = boundary.agent_lines([b'{"jsonrpc":"2.0","id":0,"result":{}}', TOOL_CALL, READ])
    assert crossed is not None
    records.agent(crossed)
    assert records.snapshot() == {
        "records": [
            {
                "n": 1,
                "kind": "withheld",
                "direction": "to_agent",
                "method": "initialize",
                "capabilities": ["fs", "terminal"],
            },
            {
                "n": 2,
                "kind": "translated",
                "direction": "to_agent",
                "method": "session/new",
                "field": "params.cwd",
                "from": "/Users/alice/p",
                "to": "/workspace/p",
            },
            {
                "n": 3,
                "kind": "translated",
                "direction": "to_client",
                "method": "session/update",
                "field": "params.update.locations[0].path",
                "from": "/workspace/p/a.py",
                "to": "/Users/alice/p/a.py",
            },
            {
                "n": 4,
                "kind": "answered",
                "direction": "to_client",
                "method": "fs/read_text_file",
                "reason": "fs/read_text_file answered by the relay: fs withheld",
            },
        ],
        "dropped": 0,
    }
    json.dumps(records.snapshot())  # what the console endpoint sends


def test_lines_that_crossed_untouched_or_were_dropped_make_no_record() -> None:
    """Plain lines and dropped ones are not the boundary's doing: nothing is kept."""
    records = BoundaryRecords()
    records.agent([b'{"jsonrpc":"2.0","method":"x"}', Dropped(10, "invalid UTF-8")])
    assert records.snapshot() == {"records": [], "dropped": 0}


def test_memory_is_bounded_to_the_newest_records() -> None:
    """Past the bound the oldest records go; the snapshot says how many are gone."""
    records = BoundaryRecords(most=3)
    for i in range(5):
        report = RewriteReport("session/update", translations=[Translation("f", f"/b/{i}", "/e")])
        records.agent([Rewritten(b"{}", report)])
    snapshot = records.snapshot()
    assert [r["n"] for r in snapshot["records"]] == [3, 4, 5]
    assert [r["from"] for r in snapshot["records"]] == ["/b/2", "/b/3", "/b/4"]
    assert snapshot["dropped"] == 2
    default = BoundaryRecords()
    for _ in range(MAX_RECORDS + 1):
        default.agent(
            [Rewritten(b"{}", RewriteReport("x", translations=[Translation("f", "a", "b")]))]
        )
    assert (len(default.snapshot()["records"]), default.snapshot()["dropped"]) == (MAX_RECORDS, 1)


@pytest.mark.parametrize("where", ["field", "from", "to", "method", "reason"])
def test_long_values_are_shortened(where: str) -> None:
    """A hostile agent's long path, method or reason is kept cut, saying how long it was."""
    long = "/" + "x" * 100_000
    values = {k: ("/short" if k != where else long) for k in ("field", "from", "to", "method")}
    records = BoundaryRecords()
    if where == "reason":
        answer = ToAgent(b"{}", long, RewriteReport("fs/read_text_file", refused="fs"))
        records.agent([answer])
    else:
        crossing = Translation(values["field"], values["from"], values["to"])
        records.agent([Rewritten(b"{}", RewriteReport(values["method"], translations=[crossing]))])
    [record] = records.snapshot()["records"]
    assert len(record[where]) < VALUE_CHARS + 32
    assert record[where].endswith(f"…({len(long)} chars)")
