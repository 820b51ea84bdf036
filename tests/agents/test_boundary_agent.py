"""The boundary test agent (tests/agents/boundary.py) run directly, driven by the SDK's client."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import (
    PROTOCOL_VERSION,
    resource_block,
    resource_link_block,
    spawn_agent_process,
    text_block,
)
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    EnvVariable,
    FileSystemCapabilities,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalOutputResponse,
    TextResourceContents,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from tests.agents.boundary import NEW_TEXT, OUTSIDE, REPORT_PREFIX
from tests.support.agents import BOUNDARY_AGENT
from tests.support.clients import RecordingClient

pytestmark = pytest.mark.slow  # each test starts the agent, the ACP SDK with it

TIMEOUT = 8.0
EVERYTHING = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
)


class EditorClient(RecordingClient):
    """An editor that serves files and terminals, allows every tool call, and records the
    requests it was sent (method, params as the SDK read them)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:  # fmt: skip
        self.calls.append(("fs/read_text_file", {"path": path}))
        return ReadTextFileResponse(content=f"content of {path}")

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        self.calls.append(("fs/write_text_file", {"path": path, "content": content}))
        return WriteTextFileResponse()

    async def create_terminal(
        self, session_id: str, command: str, args: list[str] | None = None,
        env: list[EnvVariable] | None = None, cwd: str | None = None,
        output_byte_limit: int | None = None, **kwargs: Any,
    ) -> CreateTerminalResponse:  # fmt: skip
        self.calls.append(("terminal/create", {"command": command, "cwd": cwd}))
        return CreateTerminalResponse(terminal_id="term-1")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        return WaitForTerminalExitResponse(exit_code=0)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        return TerminalOutputResponse(output="/the/editor/cwd\n", truncated=False)

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        return ReleaseTerminalResponse()

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:  # fmt: skip
        self.calls.append(("session/request_permission", {"toolCall": tool_call}))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id)
        )

    def raw(self, method: str) -> list[dict[str, Any]]:
        """The params of every raw message of ``method`` the agent sent."""
        return [m["params"] for m in self.incoming if m.get("method") == method]

    def report(self) -> dict[str, Any]:
        """The agent's last report."""
        texts = [
            u["update"]["content"].get("text", "")
            for u in self.raw("session/update")
            if u["update"]["sessionUpdate"] == "agent_message_chunk"
        ]
        reports = [t for t in texts if t.startswith(REPORT_PREFIX)]
        assert reports, "the agent sent no report"
        loaded: dict[str, Any] = json.loads(reports[-1][len(REPORT_PREFIX) :])
        return loaded


@asynccontextmanager
async def boundary_agent(
    tmp_path: Path, *flags: str
) -> AsyncIterator[tuple[ClientSideConnection, EditorClient]]:
    """Start the agent in tmp_path with the SDK's client on its stdio."""
    client = EditorClient()
    program, *args = BOUNDARY_AGENT
    async with (
        asyncio.timeout(TIMEOUT),
        spawn(client, program, *args, *flags, cwd=tmp_path) as conn,
    ):
        yield conn, client


ROOT = str(Path(__file__).resolve().parents[2])


@asynccontextmanager
async def spawn(
    client: EditorClient, program: str, *args: str, cwd: Path
) -> AsyncIterator[ClientSideConnection]:
    async with spawn_agent_process(
        client, program, *args, cwd=cwd, env={"PYTHONPATH": ROOT}, observers=[client.observe]
    ) as (conn, process):
        yield conn
    assert process.returncode == 0


async def test_every_row_is_exercised_with_box_paths(tmp_path: Path) -> None:
    """Offered fs and terminal, one prompt reads, writes, runs, sends tool calls, asks
    permission and echoes links: each with the session's cwd as it received it."""
    cwd, notes = str(tmp_path), str(tmp_path / "notes.txt")
    async with boundary_agent(tmp_path) as (conn, client):
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=EVERYTHING)
        sid = (await conn.new_session(cwd=cwd, mcp_servers=[])).session_id
        link = resource_link_block("a.py", f"file://{cwd}/a.py")
        embedded = resource_block(TextResourceContents(uri=f"file://{cwd}/b.md", text="# b"))
        response = await conn.prompt(session_id=sid, prompt=[text_block("go"), link, embedded])
        assert response.stop_reason == "end_turn"

    assert client.calls[0][0] == "session/request_permission"
    assert client.calls[1:] == [
        ("fs/read_text_file", {"path": notes}),
        ("fs/read_text_file", {"path": OUTSIDE}),
        ("fs/write_text_file", {"path": notes, "content": NEW_TEXT}),
        ("terminal/create", {"command": "pwd", "cwd": cwd}),
    ]
    updates = [u["update"] for u in client.raw("session/update")]
    calls = [u for u in updates if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert [u["sessionUpdate"] for u in calls] == ["tool_call", "tool_call_update"]
    for update in calls:
        assert update["locations"] == [{"path": notes, "line": 1}, {"path": OUTSIDE}]
        assert update["content"][0] == {
            "type": "diff", "path": notes, "oldText": "old\n", "newText": NEW_TEXT,
        }  # fmt: skip
    assert calls[0]["content"][1]["content"]["uri"] == f"file://{notes}"
    assert calls[0]["content"][2]["content"]["resource"]["uri"] == f"file://{notes}"
    assert calls[0]["rawInput"] == {"path": notes}
    [permission] = client.raw("session/request_permission")
    assert permission["toolCall"]["locations"][0] == {"path": notes, "line": 1}
    assert [
        c.get("path") or c["content"].get("uri") or c["content"]["resource"]["uri"]
        for c in permission["toolCall"]["content"]
    ] == [notes, *[f"file://{notes}"] * 2]
    chunks = [u["content"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    echoed = [content for content in chunks if content["type"] != "text"]
    sent = [
        block.model_dump(mode="json", by_alias=True, exclude_none=True)
        for block in (link, embedded)
    ]
    assert echoed == sent
    report = client.report()
    assert report["cwd"] == cwd
    assert report["offered"]["fs"] == {"readTextFile": True, "writeTextFile": True}
    assert report["offered"]["terminal"] is True
    assert report["read"][notes] == {"content": f"content of {notes}"}
    assert report["read"]["by"] == report["write"]["by"] == "client"
    assert report["terminal"] == {
        "by": "client", "cwd": cwd, "exit": 0, "output": "/the/editor/cwd\n",
    }  # fmt: skip
    assert report["permission"] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    assert report["links"] == [f"file://{cwd}/a.py", f"file://{cwd}/b.md"]


@pytest.mark.parametrize(("flags", "asked"), [((), False), (("--ignore-capabilities",), True)])
async def test_fs_and_terminal_follow_the_offer(
    tmp_path: Path, flags: tuple[str, ...], asked: bool
) -> None:
    """Without fs and terminal offered the agent does not ask, unless told to ignore the offer
    (as a relay under --files box must be ready for): it reads, writes and runs on its own."""
    notes = tmp_path / "notes.txt"
    notes.write_text("the agent's own copy\n")
    async with boundary_agent(tmp_path, *flags) as (conn, client):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("read write terminal")])
    methods = {method for method, _ in client.calls}
    report = client.report()
    if asked:
        assert methods == {"fs/read_text_file", "fs/write_text_file", "terminal/create"}
        assert notes.read_text() == "the agent's own copy\n"
    else:
        assert methods == set()
        assert report["read"]["by"] == report["write"]["by"] == "agent"
        assert report["read"][str(notes)] == {"content": "the agent's own copy\n"}
        assert report["terminal"] == {
            "by": "agent", "cwd": str(tmp_path), "exit": 0, "output": f"{tmp_path}\n",
        }  # fmt: skip
        assert notes.read_text() == NEW_TEXT
    assert report["steps"] == ["read", "write", "terminal"]


async def test_sessions_are_listed_and_loaded_under_their_cwd(tmp_path: Path) -> None:
    """session/list filters by the exact cwd it stored; session/load replays the prompt's
    blocks as user_message_chunk, links as received."""
    other = tmp_path / "other"
    async with boundary_agent(tmp_path) as (conn, client):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        first = await conn.new_session(
            cwd=str(tmp_path), additional_directories=[str(other)], mcp_servers=[]
        )
        await conn.new_session(cwd=str(other), mcp_servers=[])
        link = resource_link_block("a.py", f"file://{tmp_path}/a.py")
        await conn.prompt(session_id=first.session_id, prompt=[text_block("links"), link])
        listed = await conn.list_sessions(cwd=str(tmp_path))
        everything = await conn.list_sessions()
        await conn.load_session(cwd=str(tmp_path), session_id=first.session_id, mcp_servers=[])
    assert [(s.session_id, s.cwd, s.additional_directories) for s in listed.sessions] == [
        (first.session_id, str(tmp_path), [str(other)])
    ]
    assert len(everything.sessions) == 2
    replayed = [
        u["update"]["content"]
        for u in client.raw("session/update")
        if u["update"]["sessionUpdate"] == "user_message_chunk"
    ]
    assert replayed[1]["uri"] == f"file://{tmp_path}/a.py"


def test_the_agent_is_a_program_of_the_suite() -> None:
    """BOUNDARY_AGENT runs this file with this Python."""
    assert (sys.executable, str(Path(__file__).with_name("boundary.py"))) == BOUNDARY_AGENT
