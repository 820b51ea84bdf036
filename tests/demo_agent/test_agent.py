"""The demo agent as a real subprocess, driven by the ACP SDK's client side."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, image_block, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    HttpMcpServer,
    McpServerStdio,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
)

from relay import __version__
from relay.demo_agent.reports import AGENT_NAME, HANG_TEXT, ContentBlock
from tests.support.clients import RecordingClient

pytestmark = pytest.mark.slow  # each test starts the demo agent, the ACP SDK with it

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 8.0


@dataclass
class Running:
    conn: ClientSideConnection
    process: asyncio.subprocess.Process
    client: RecordingClient
    launched_in: Path

    @property
    def cwd(self) -> str:
        """The agent process's working directory as os.getcwd() reports it."""
        return os.path.realpath(self.launched_in)

    def result(self, key: str, value: Any) -> tuple[int, dict[str, Any]]:
        """Return (position, result) of the first raw response whose result has key == value."""
        for index, message in enumerate(self.client.incoming):
            result = message.get("result")
            if isinstance(result, dict) and result.get(key) == value:
                return index, result
        raise AssertionError(f"no response with {key}={value!r}")

    def position(self, session_id: str, text: str) -> int:
        """Return the position of the raw session/update carrying this text."""
        for index, message in enumerate(self.client.incoming):
            params = message.get("params") or {}
            if (
                message.get("method") == "session/update"
                and params.get("sessionId") == session_id
                and params["update"]["content"].get("text") == text
            ):
                return index
        raise AssertionError(f"no update {text!r}")


@asynccontextmanager
async def demo_agent(
    tmp_path: Path, *flags: str, permission: RequestPermissionResponse | None = None
) -> AsyncIterator[Running]:
    """Launch `python -m relay.demo_agent` in tmp_path and connect the SDK client to it
    (answering permission requests with ``permission``, when given)."""
    client = RecordingClient(permission)
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    async with spawn_agent_process(
        client,
        sys.executable,
        "-m",
        "relay.demo_agent",
        *flags,
        env={"PYTHONPATH": pythonpath},
        cwd=tmp_path,
        observers=[client.observe],
    ) as (conn, process):
        yield Running(conn, process, client, tmp_path)


async def test_initialize_declares_defaults(tmp_path: Path) -> None:
    """Initialize answers version, agentInfo and the default capabilities; EOF exits 0."""
    async with asyncio.timeout(TIMEOUT):
        async with demo_agent(tmp_path) as agent:
            response = await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
            assert response.protocol_version == PROTOCOL_VERSION
            assert response.agent_info is not None
            assert (response.agent_info.name, response.agent_info.version) == (
                AGENT_NAME,
                __version__,
            )
            _, raw = agent.result("protocolVersion", PROTOCOL_VERSION)
            assert raw["agentCapabilities"] == {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
                "mcpCapabilities": {"http": True, "sse": False},
                "sessionCapabilities": {"additionalDirectories": {}, "fork": {}, "resume": {}},
            }
            with pytest.raises(RequestError) as unknown:
                await agent.conn.ext_method("demo/unknown", {})
            assert unknown.value.code == -32601
        assert agent.process.returncode == 0


async def test_flags_change_declared_capabilities(tmp_path: Path) -> None:
    """--no-mcp-http, --mcp-sse, --no-load-session, --no-additional-directories change the reply."""
    flags = ("--no-mcp-http", "--mcp-sse", "--no-load-session", "--no-additional-directories")
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path, *flags) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        _, raw = agent.result("protocolVersion", PROTOCOL_VERSION)
        capabilities = raw["agentCapabilities"]
        assert capabilities["mcpCapabilities"] == {"http": False, "sse": True}
        assert capabilities["loadSession"] is False
        assert capabilities["sessionCapabilities"] == {"fork": {}, "resume": {}}


async def test_new_session_reports_what_arrived(tmp_path: Path) -> None:
    """session/new reports cwd, directories and MCP server names in _meta, then in an update."""
    work = tmp_path / "work"
    work.mkdir()
    servers: list[Any] = [
        McpServerStdio(name="files", command="/bin/true", args=[], env=[]),
        HttpMcpServer(type="http", name="web", url="http://127.0.0.1:9/mcp", headers=[]),
    ]
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        response = await agent.conn.new_session(
            cwd=str(work), additional_directories=["/srv/extra"], mcp_servers=servers
        )
        sid = response.session_id
        assert len(sid) == 32
        assert response.field_meta == {
            "demo": {
                "method": "session/new",
                "sessionId": sid,
                "cwd": str(work),
                "cwdExists": True,
                "additionalDirectories": ["/srv/extra"],
                "mcpServers": ["files", "web"],
                "agentCwd": agent.cwd,
            }
        }
        text = f"session started in {work} with MCP servers: files, web\n"
        await agent.client.wait_for(lambda: agent.client.texts(sid) == [text])
        answered, _ = agent.result("sessionId", sid)
        assert answered < agent.position(sid, text)

        missing = str(tmp_path / "missing")
        other = await agent.conn.new_session(cwd=missing, mcp_servers=[])
        assert other.session_id != sid
        assert other.field_meta is not None
        report = other.field_meta["demo"]
        assert (report["cwdExists"], report["additionalDirectories"], report["mcpServers"]) == (
            False,
            [],
            [],
        )
        text = f"session started in {missing} with MCP servers: (none)\n"
        await agent.client.wait_for(lambda: agent.client.texts(other.session_id) == [text])


async def test_load_resume_and_fork_report(tmp_path: Path) -> None:
    """session/load, session/resume and session/fork report like session/new."""
    server = McpServerStdio(name="files", command="/bin/true", args=[], env=[])
    cwd = str(tmp_path)
    text = f"session started in {cwd} with MCP servers: files\n"
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        loaded = await agent.conn.load_session(cwd=cwd, session_id="old-1", mcp_servers=[server])
        assert loaded.field_meta is not None
        assert loaded.field_meta["demo"]["method"] == "session/load"
        assert loaded.field_meta["demo"]["sessionId"] == "old-1"
        assert loaded.field_meta["demo"]["mcpServers"] == ["files"]
        await agent.client.wait_for(lambda: agent.client.texts("old-1") == [text])

        resumed = await agent.conn.resume_session(
            session_id="old-2", cwd=cwd, additional_directories=["/d"], mcp_servers=[server]
        )
        assert resumed.field_meta is not None
        assert resumed.field_meta["demo"]["method"] == "session/resume"
        assert resumed.field_meta["demo"]["additionalDirectories"] == ["/d"]
        await agent.client.wait_for(lambda: agent.client.texts("old-2") == [text])

        forked = await agent.conn.fork_session(session_id="old-2", cwd=cwd, mcp_servers=[server])
        assert forked.field_meta is not None
        assert forked.field_meta["demo"]["sessionId"] == forked.session_id
        assert forked.field_meta["demo"]["forkedFrom"] == "old-2"
        await agent.client.wait_for(lambda: agent.client.texts(forked.session_id) == [text])


async def test_prompt_streams_words_back(tmp_path: Path) -> None:
    """A prompt comes back as one chunk per word that join to the text; stopReason end_turn."""
    prompt = "Hello,  relay!\n\tThis is   the demo agent. "
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await agent.client.wait_for(lambda: len(agent.client.texts(sid)) == 1)
        del agent.client.updates[:]

        response = await agent.conn.prompt(session_id=sid, prompt=[text_block(prompt)])
        assert response.stop_reason == "end_turn"
        chunks = agent.client.texts(sid)
        assert "".join(chunks) == prompt
        assert len(chunks) == len(prompt.split())

        del agent.client.updates[:]
        mixed: list[ContentBlock] = [text_block("look: "), image_block("AAAA", "image/png")]
        response = await agent.conn.prompt(session_id=sid, prompt=mixed)
        assert response.stop_reason == "end_turn"
        assert "".join(agent.client.texts(sid)) == "look: [image]"


async def test_cancel_ends_prompt_cancelled(tmp_path: Path) -> None:
    """session/cancel makes the running prompt (/hang) return stopReason cancelled."""
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        prompting = asyncio.create_task(
            agent.conn.prompt(session_id="s", prompt=[text_block("/hang")])
        )
        await agent.client.wait_for(lambda: agent.client.texts("s") == [HANG_TEXT])
        await agent.conn.cancel(session_id="s")
        assert (await prompting).stop_reason == "cancelled"


@pytest.mark.parametrize(
    ("outcome", "status", "said", "stop"),
    [
        (AllowedOutcome(outcome="selected", option_id="allow"), "completed", "allow", "end_turn"),
        (AllowedOutcome(outcome="selected", option_id="reject"), "failed", "reject", "end_turn"),
        (DeniedOutcome(outcome="cancelled"), "failed", "cancelled", "cancelled"),
        (None, "failed", "error -32601 Method not found", "end_turn"),
    ],
    ids=["allow", "reject", "cancelled", "error"],
)
async def test_ask_asks_permission_and_reports_the_answer(
    tmp_path: Path,
    outcome: AllowedOutcome | DeniedOutcome | None,
    status: str,
    said: str,
    stop: str,
) -> None:
    """/ask announces a pending edit of notes.md in the session's cwd, asks permission for it
    with Allow and Reject, then marks the tool call completed or failed and says the answer."""
    permission = None if outcome is None else RequestPermissionResponse(outcome=outcome)
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path, permission=permission) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        sid = (await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        await agent.client.wait_for(lambda: len(agent.client.texts(sid)) == 1)
        response = await agent.conn.prompt(session_id=sid, prompt=[text_block(" /ask ")])
        assert response.stop_reason == stop
        await agent.client.wait_for(lambda: len(agent.client.texts(sid)) == 2)
        assert agent.client.texts(sid)[1] == f"permission: {said}"
        calls = [
            u
            for s, u in agent.client.updates
            if s == sid and u.session_update != "agent_message_chunk"
        ]
        start, done = calls
        assert isinstance(start, ToolCallStart)
        assert isinstance(done, ToolCallProgress)
        assert (start.tool_call_id, start.title, start.kind, start.status) == (
            "ask-1", "Write notes.md", "edit", "pending",
        )  # fmt: skip
        assert [where.path for where in start.locations or []] == [str(tmp_path / "notes.md")]
        assert (done.tool_call_id, done.status) == ("ask-1", status)
        asked = [
            m for m in agent.client.incoming if m.get("method") == "session/request_permission"
        ]
        assert len(asked) == 1
        params = asked[0]["params"]
        assert params["toolCall"]["toolCallId"] == "ask-1"
        assert params["toolCall"]["locations"] == [{"path": str(tmp_path / "notes.md")}]
        assert [(o["optionId"], o["name"], o["kind"]) for o in params["options"]] == [
            ("allow", "Allow", "allow_once"),
            ("reject", "Reject", "reject_once"),
        ]
        assert not (tmp_path / "notes.md").exists()  # a pretend edit


async def test_word_delay_streams_slowly_enough_to_cancel_midway(tmp_path: Path) -> None:
    """With --word-delay a long prompt is still streaming after its first chunk: a cancel then
    ends it cancelled, with the words sent so far in order."""
    words = [f"w{i} " for i in range(200)]
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path, "--word-delay", "0.05") as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        prompting = asyncio.create_task(
            agent.conn.prompt(session_id="s", prompt=[text_block("".join(words))])
        )
        await agent.client.wait_for(lambda: len(agent.client.texts("s")) >= 2)
        await agent.conn.cancel(session_id="s")
        assert (await prompting).stop_reason == "cancelled"
        chunks = agent.client.texts("s")
        assert 2 <= len(chunks) < len(words)
        assert chunks == words[: len(chunks)]


async def test_stderr_command_writes_stderr_and_echoes(tmp_path: Path) -> None:
    """/stderr TEXT writes TEXT to stderr and echoes the prompt as usual."""
    prompt = "/stderr hello from the demo"
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        response = await agent.conn.prompt(session_id="s", prompt=[text_block(prompt)])
        assert response.stop_reason == "end_turn"
        assert "".join(agent.client.texts("s")) == prompt
        assert agent.process.stderr is not None
        while (line := await agent.process.stderr.readline()) != b"hello from the demo\n":
            assert line, "stderr closed without the text"


async def test_exit_command_exits_with_status(tmp_path: Path) -> None:
    """/exit 3 makes the agent process exit with status 3 without answering."""
    async with asyncio.timeout(TIMEOUT), demo_agent(tmp_path) as agent:
        await agent.conn.initialize(protocol_version=PROTOCOL_VERSION)
        with pytest.raises(ConnectionError):
            await agent.conn.prompt(session_id="s", prompt=[text_block("/exit 3")])
        assert await agent.process.wait() == 3


async def test_a_client_leaving_mid_prompt_is_one_line_on_stderr(tmp_path: Path) -> None:
    """Stdin closing while a prompt streams (the relay's client left) gets one stderr line
    saying so, not the SDK's traceback, and the agent exits 0."""
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "relay.demo_agent",
        env={"PYTHONPATH": pythonpath}, cwd=tmp_path,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdin, stdout, stderr_pipe = process.stdin, process.stdout, process.stderr
    assert stdin is not None
    assert stdout is not None
    assert stderr_pipe is not None

    async def ask(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        stdin.write(json.dumps(message).encode() + b"\n")
        answer: dict[str, Any] = {}
        while answer.get("id") != request_id:
            answer = json.loads(await stdout.readline())
        return answer

    async with asyncio.timeout(TIMEOUT):
        await ask(1, "initialize", {"protocolVersion": PROTOCOL_VERSION})
        session = await ask(2, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = session["result"]["sessionId"]
        words = [{"type": "text", "text": "word " * 100_000}]
        message = {"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                   "params": {"sessionId": sid, "prompt": words}}  # fmt: skip
        stdin.write(json.dumps(message).encode() + b"\n")
        while b"agent_message_chunk" not in await stdout.readline():
            pass  # the prompt is streaming
        stdin.close()
        _, stderr = await asyncio.gather(stdout.read(), stderr_pipe.read())
        assert await process.wait() == 0
    assert stderr.decode().splitlines() == [
        f"relay.demo_agent: WARNING: the client left during a prompt of session {sid}: stopping it"
    ]
