"""``acp-relay connect`` as its editor runs it: a subprocess on pipes, or the ACP SDK's client.

The editor's side of connect's stdio (:class:`Editor`, raw lines), and what an SDK
editor sees when connect cannot reach the agent (:func:`sdk_refused`).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process

from relay.config.defaults import OPEN_TIMEOUT
from tests.support.clients import RecordingClient
from tests.support.live import SECRET

CONNECT = (sys.executable, "-m", "relay", "connect")
# For --ticket-command: a fresh ticket signed with the tests' secret at each run (the resume
# profile needs one per socket).
TICKET_COMMAND = shlex.join(
    [
        sys.executable,
        "-c",
        "from relay.commands.ticket import fresh_ticket; "
        f"print(fresh_ticket({SECRET!r}, subject='tester'))",
    ]
)
TIMEOUT = 15.0  # seconds an editor waits for connect's answer
MiB = 1024 * 1024


def request(request_id: int | str, method: str = "x", **params: Any) -> dict[str, Any]:
    """A JSON-RPC request."""
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def notification(n: int | str, method: str = "x") -> dict[str, Any]:
    """A JSON-RPC notification numbered ``n`` in its params: an echo agent's line owes nothing.

    Tests that close connect's stdin after an echo use these: an echoed request is the
    agent asking, not answering, so connect would wait for an answer that never comes.
    """
    return {"jsonrpc": "2.0", "method": method, "params": {"n": n}}


# -- the editor's side, raw ----------------------------------------------------------------


@dataclass
class Editor:
    """A running ``acp-relay connect`` as its editor sees it: stdin, stdout, stderr."""

    proc: asyncio.subprocess.Process
    stderr: bytearray

    async def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        await self.proc.stdin.drain()

    async def receive_line(self) -> bytes:
        assert self.proc.stdout is not None
        async with asyncio.timeout(TIMEOUT):
            line = await self.proc.stdout.readline()
        assert line.endswith(b"\n"), f"stdout ended: {self.stderr.decode()}"
        return line[:-1]

    async def receive(self) -> dict[str, Any]:
        message = json.loads(await self.receive_line())
        assert isinstance(message, dict)
        return message

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await self.proc.stdin.wait_closed()

    async def exit_status(self, seconds: float = 10) -> int:
        async with asyncio.timeout(seconds):
            return await self.proc.wait()

    async def rest_of_stdout(self) -> bytes:
        assert self.proc.stdout is not None
        async with asyncio.timeout(TIMEOUT):
            return await self.proc.stdout.read()


async def ask_then_leave(ed: Editor, *requests: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """Send each request and read one answer for it, then close stdin: the answers, and
    connect's exit status."""
    answers = []
    for message in requests:
        await ed.send(message)
        answers.append(await ed.receive())
    await ed.close_stdin()
    return answers, await ed.exit_status()


def closed_by_connect(url: str, message: str, code: int, reason: str) -> dict[str, Any]:
    """The JSON-RPC error of a socket connect closed for what a broken relay sent."""
    data = {"url": url, "cause": "protocol", "closedBy": "connect", "closeCode": code,
            "closeReason": reason}  # fmt: skip
    return {"code": -32603, "message": message, "data": data}


def failures_logged(ed: Editor) -> list[str]:
    """The reasons of connect's ``relay connection failed`` lines (its stderr must be JSON
    log lines only: a traceback fails here)."""
    return [r["reason"] for r in log_records(bytes(ed.stderr))
            if r["event"] == "relay connection failed"]  # fmt: skip


async def piped_connect(url: str, stdin: bytes, env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """``printf STDIN | acp-relay connect URL``: its exit status, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        *CONNECT,
        url,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(TIMEOUT):
        out, err = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out, err


def editor(url: str, *args: str, env: dict[str, str]) -> AbstractAsyncContextManager[Editor]:
    """Run ``acp-relay connect URL ARGS`` with its stdio on pipes for the block."""
    return launched([*CONNECT, url, *args], env=env)


@asynccontextmanager
async def launched(argv: Sequence[str], *, env: dict[str, str]) -> AsyncIterator[Editor]:
    """Run ``argv`` (a connect command, as an editor would launch it) on pipes for the block."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=64 * MiB,
    )
    stderr = bytearray()

    async def collect() -> None:
        assert proc.stderr is not None
        while chunk := await proc.stderr.read(65536):
            stderr.extend(chunk)

    collecting = asyncio.create_task(collect())
    try:
        yield Editor(proc, stderr)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        async with asyncio.timeout(5):
            await collecting


def log_records(stderr: bytes | str) -> list[dict[str, Any]]:
    """Connect's stderr, which must be JSON log lines only."""
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    records = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(r, dict) and "event" in r for r in records), text
    return records


# -- the editor's side, the ACP SDK ---------------------------------------------------------


@dataclass
class Refused:
    """What an SDK editor saw when connect could not reach the agent."""

    error: RequestError
    later: RequestError
    exit_status: int | None
    stderr: str


async def sdk_refused(url: str, *args: str, env: dict[str, str], stderr_file: Path) -> Refused:
    """Launch connect from the SDK, send initialize and then session/new; both must fail."""
    with stderr_file.open("wb") as err:
        async with spawn_agent_process(
            RecordingClient(),
            *CONNECT,
            url,
            *args,
            env=env,
            transport_kwargs={"stderr": err.fileno()},
        ) as (conn, proc):
            async with asyncio.timeout(TIMEOUT):
                with pytest.raises(RequestError) as first:
                    await conn.initialize(protocol_version=PROTOCOL_VERSION)
                with pytest.raises(RequestError) as later:
                    await conn.new_session(cwd="/tmp", mcp_servers=[])
    stderr = await asyncio.to_thread(stderr_file.read_text)
    return Refused(first.value, later.value, proc.returncode, stderr)


async def refused_at_once(url: str, *, env: dict[str, str], stderr_file: Path) -> Refused:
    """:func:`sdk_refused` with ``--open-timeout 60``, waited for no longer than the default
    open timeout: a refusal that only the timeout would give fails the test."""
    async with asyncio.timeout(OPEN_TIMEOUT):
        return await sdk_refused(url, "--open-timeout", "60", env=env, stderr_file=stderr_file)


def check_refused(refused: Refused, message: str, data: dict[str, Any], secret: str) -> None:
    """The exact error on both requests, stderr saying it too, exit 1, no ticket anywhere."""
    for error in (refused.error, refused.later):
        assert (error.code, str(error), error.data) == (-32603, message, data)
    assert refused.exit_status == 1
    failed = [r for r in log_records(refused.stderr) if r["event"] == "relay connection failed"]
    assert [r["reason"] for r in failed] == [message]
    assert secret not in refused.stderr
    assert secret not in message + json.dumps(data)


# A share's watcher tickets, and an editor's answers as a test waits for them.
WATCH_TICKETS = shlex.join([sys.executable, "-m", "relay", "ticket", "--may-answer", "--watch"])


async def answer_to(ed: Editor, request_id: int) -> list[dict[str, Any]]:
    """What the editor read until the answer to ``request_id``, that answer last."""
    seen = []
    while True:
        message = await ed.receive()
        seen.append(message)
        if message.get("id") == request_id and "method" not in message:
            return seen


async def permission_request(ed: Editor) -> dict[str, Any]:
    while True:
        message = await ed.receive()
        if message.get("method") == "session/request_permission":
            return message
