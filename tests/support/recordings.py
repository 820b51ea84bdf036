"""Recorded sessions of real agents: what an editor and an agent said, line by line.

The conversation model's tests (and each renderer's, fed the same session) read these
from ``tests/recorded/``. ``python -m tests.support.recordings`` records them again:
gemini-cli from its pinned npm package (:data:`tests.support.npmagents.GEMINI_CLI`)
against the loopback stand-in of the Gemini API, driven by the ACP SDK's client, one turn
that answers and one that writes a file after asking permission. The temporary folder's
name is replaced by :data:`FOLDER` so that a recording reads the same on every machine.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.connection import StreamDirection, StreamEvent

from tests.support.clients import EDITOR_CAPABILITIES, FolderEditor
from tests.support.geminiapi import gemini_api
from tests.support.npmagents import GEMINI_CLI, installed

RECORDED = Path(__file__).resolve().parent.parent / "recorded"
GEMINI_SESSION = RECORDED / "gemini-cli.jsonl"
FOLDER = "/Users/alice/src"
NOTES = "notes.txt"
WRITE_NOTES = {"name": "write_file", "args": {"file_path": NOTES, "content": "written\n"}}


def recorded(path: Path) -> Iterator[tuple[str, bytes]]:
    """Each line of a recording: who wrote it ("client" or "agent") and the line."""
    for text in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(text)
        yield entry["from"], json.dumps(entry["message"], separators=(",", ":")).encode()


async def record_gemini() -> str:
    """One gemini-cli session, two turns: a reply, then a file written with permission:
    the recording's text."""
    gemini = await asyncio.to_thread(installed, GEMINI_CLI)
    said: list[dict[str, Any]] = []

    def observe(event: StreamEvent) -> None:
        side = "agent" if event.direction is StreamDirection.INCOMING else "client"
        said.append({"from": side, "message": event.message})

    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder) / "project"
        project.mkdir()
        (project / NOTES).write_text("before\n")
        env = {"HOME": folder, "GEMINI_API_KEY": "recorded", "PATH": "/usr/bin:/bin"}
        async with gemini_api(tool_call=WRITE_NOTES) as api:
            env["GOOGLE_GEMINI_BASE_URL"] = api.url
            command = [str(gemini), "--acp", "--model", "gemini-2.5-flash"]
            editor = FolderEditor(Path(folder))
            async with spawn_agent_process(editor, *command, env=env, observers=[observe]) as (
                conn,
                _process,
            ):
                await conn.initialize(
                    protocol_version=PROTOCOL_VERSION, client_capabilities=EDITOR_CAPABILITIES
                )
                session = await conn.new_session(cwd=str(project), mcp_servers=[])
                for words in ("hi", "write the notes"):
                    await conn.prompt(session_id=session.session_id, prompt=[text_block(words)])
        text = "".join(json.dumps(entry) + "\n" for entry in said)
        return text.replace(folder, FOLDER)


if __name__ == "__main__":
    RECORDED.mkdir(exist_ok=True)
    GEMINI_SESSION.write_text(asyncio.run(asyncio.wait_for(record_gemini(), 300)), "utf-8")
