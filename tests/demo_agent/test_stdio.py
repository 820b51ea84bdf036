"""Tests for relay.demo_agent.stdio: the demo agent run with files as its stdin or stdout,
as a person replays a trace into it (``< replay.ndjson``, ``> answers.ndjson``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION

from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 15.0


def request(request_id: int, method: str, **params: Any) -> bytes:
    """One JSON-RPC request line."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return json.dumps(message).encode() + b"\n"


def answered(path: Path) -> list[int]:
    """The ids of the answers (results) in an NDJSON file written so far."""
    lines = path.read_bytes().splitlines(keepends=True)
    whole = [json.loads(line) for line in lines if line.endswith(b"\n")]
    return [message["id"] for message in whole if "result" in message]


def env() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


async def test_a_file_as_stdin_and_stdout(tmp_path: Path) -> None:
    """Requests read from a file are answered into a file, and the end of the file is the
    end of stdin: exit 0."""
    replay, answers = tmp_path / "replay.ndjson", tmp_path / "answers.ndjson"
    replay.write_bytes(
        request(1, "initialize", protocolVersion=PROTOCOL_VERSION)
        + request(2, "session/new", cwd=str(tmp_path), mcpServers=[])
    )
    with replay.open("rb") as stdin, answers.open("wb") as stdout:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay.demo_agent", env=env(), cwd=tmp_path,
            stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(TIMEOUT):
            _, stderr = await process.communicate()
    assert (process.returncode, stderr) == (0, b"")
    assert answered(answers) == [1, 2]


async def test_a_file_as_stdout_while_stdin_stays_open(tmp_path: Path) -> None:
    """With a pipe as stdin and a file as stdout, a whole prompt streams into the file, each
    message as it is written; stdin's end then ends the agent with 0."""
    answers = tmp_path / "answers.ndjson"
    with answers.open("wb") as stdout:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay.demo_agent", env=env(), cwd=tmp_path,
            stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.PIPE,
        )  # fmt: skip
    assert process.stdin is not None
    try:
        process.stdin.write(request(1, "initialize", protocolVersion=PROTOCOL_VERSION))
        process.stdin.write(request(2, "session/new", cwd=str(tmp_path), mcpServers=[]))
        await until(lambda: answered(answers) == [1, 2], "the session's answers in the file")
        session = json.loads(answers.read_bytes().splitlines()[1])["result"]["sessionId"]
        words = [{"type": "text", "text": "one two three"}]
        process.stdin.write(request(3, "session/prompt", sessionId=session, prompt=words))
        await until(lambda: answered(answers) == [1, 2, 3], "the prompt's answer in the file")
        process.stdin.close()
        async with asyncio.timeout(TIMEOUT):
            _, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert (process.returncode, stderr) == (0, b"")
    chunks = [
        json.loads(line)["params"]["update"]["content"]["text"]
        for line in answers.read_bytes().splitlines()
        if b"agent_message_chunk" in line
    ]
    assert "".join(chunks[-3:]) == "one two three"
