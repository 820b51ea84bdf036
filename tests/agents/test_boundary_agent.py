"""The boundary test agent (tests/agents/boundary.py) run directly, driven by the SDK's client."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from acp import (
    PROTOCOL_VERSION,
    resource_block,
    resource_link_block,
    spawn_agent_process,
    text_block,
)
from acp.client.connection import ClientSideConnection
from acp.schema import TextResourceContents

from tests.agents.boundary import NEW_TEXT, OUTSIDE, last_report
from tests.support.agents import BOUNDARY_AGENT
from tests.support.clients import EDITOR_CAPABILITIES, FolderEditor

pytestmark = pytest.mark.slow  # each test starts the agent, the ACP SDK with it

TIMEOUT = 8.0
EDITOR_COPY = "the editor's copy\n"


@asynccontextmanager
async def boundary_agent(
    tmp_path: Path, *flags: str
) -> AsyncIterator[tuple[ClientSideConnection, FolderEditor]]:
    """Start the agent in tmp_path with the SDK's client on its stdio: an editor of that same
    folder (no relay between them, so both see the same files)."""
    client = FolderEditor(tmp_path)
    program, *args = BOUNDARY_AGENT
    async with (
        asyncio.timeout(TIMEOUT),
        spawn(client, program, *args, *flags, cwd=tmp_path) as conn,
    ):
        yield conn, client


ROOT = str(Path(__file__).resolve().parents[2])


@asynccontextmanager
async def spawn(
    client: FolderEditor, program: str, *args: str, cwd: Path
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
    (tmp_path / "notes.txt").write_text(EDITOR_COPY)
    async with boundary_agent(tmp_path) as (conn, client):
        await conn.initialize(
            protocol_version=PROTOCOL_VERSION, client_capabilities=EDITOR_CAPABILITIES
        )
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
    report = last_report(client.texts(sid))
    assert report["cwd"] == cwd
    assert report["offered"]["fs"] == {"readTextFile": True, "writeTextFile": True}
    assert report["offered"]["terminal"] is True
    assert report["read"][notes] == {"content": EDITOR_COPY}
    assert report["read"][OUTSIDE]["error"]["code"] == -32002  # not in the editor's folder
    assert report["read"]["by"] == report["write"]["by"] == "client"
    assert report["terminal"] == {
        "by": "client", "cwd": cwd, "exit": 0, "output": f"{cwd}\n",
    }  # fmt: skip
    assert report["permission"] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    assert report["links"] == [f"file://{cwd}/a.py", f"file://{cwd}/b.md"]


@pytest.mark.parametrize(("flags", "asked"), [((), False), (("--ignore-capabilities",), True)])
async def test_fs_and_terminal_follow_the_offer(
    tmp_path: Path, flags: tuple[str, ...], asked: bool
) -> None:
    """Without fs and terminal offered the agent does not ask but reads, writes and runs on
    its own, unless told to ignore the offer (as a relay under --files box must be ready
    for)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("the only copy\n")
    async with boundary_agent(tmp_path, *flags) as (conn, client):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("read write terminal")])
    methods = {method for method, _ in client.calls}
    report = last_report(client.texts(sid))
    by = "client" if asked else "agent"
    everything = {"fs/read_text_file", "fs/write_text_file", "terminal/create"}
    assert methods == (everything if asked else set())
    assert (report["read"]["by"], report["write"]["by"], report["terminal"]["by"]) == (by,) * 3
    assert report["read"][str(notes)] == {"content": "the only copy\n"}
    assert report["terminal"] == {
        "by": by, "cwd": str(tmp_path), "exit": 0, "output": f"{tmp_path}\n",
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


async def test_named_steps_go_to_the_client_even_when_not_offered(tmp_path: Path) -> None:
    """read:NAME, write:NAME and terminal:NAME ask the client for <cwd>/NAME, offered or not,
    and only those steps run."""
    (tmp_path / "notes.txt").write_text(EDITOR_COPY)
    (tmp_path / "sub").mkdir()
    async with boundary_agent(tmp_path) as (conn, client):
        await conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        words = "read:notes.txt write:sub/new.txt terminal:sub read:missing.txt"
        await conn.prompt(session_id=sid, prompt=[text_block(words)])
    report = last_report(client.texts(sid))
    assert report["steps"] == []
    assert report["read:notes.txt"] == {"content": EDITOR_COPY}
    assert report["write:sub/new.txt"] == {"written": NEW_TEXT}
    assert report["terminal:sub"] == {"created": True}
    assert report["read:missing.txt"]["error"]["code"] == -32002
    assert (tmp_path / "sub" / "new.txt").read_text() == NEW_TEXT
    assert [call[0] for call in client.calls] == [
        "fs/read_text_file", "fs/write_text_file", "terminal/create", "fs/read_text_file",
    ]  # fmt: skip
