"""Tests for relay.streams.stdio: connect's stdin and stdout, whatever the editor made them.

A real ``python -m relay connect`` runs with its stdio on a pipe, a regular file or a
terminal (a pty). The relay it is given refuses or never answers, so what comes out on
stdout is connect's own answers; the descriptors are checked from this side.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.support.connect import CONNECT, TIMEOUT, request
from tests.support.env import connect_env
from tests.support.live import make_ticket
from tests.support.servers import loopback_server, never_answer

REFUSED = "ws://127.0.0.1:9/acp"
REQUESTS = [request(1, "initialize"), {"jsonrpc": "2.0", "method": "n"}, request("two")]


def requests_bytes() -> bytes:
    return b"".join(json.dumps(message).encode() + b"\n" for message in REQUESTS)


def answered_ids(stdout: bytes) -> list[object]:
    """The ids of the error responses on ``stdout``, each of which must be one."""
    answers = [json.loads(line) for line in stdout.splitlines()]
    assert all(answer["error"]["data"]["cause"] == "refused" for answer in answers), answers
    return [answer["id"] for answer in answers]


async def run_connect(url: str, stdin: int, stdout: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *CONNECT,
        url,
        env=connect_env(make_ticket()),
        stdin=stdin,
        stdout=stdout,
        stderr=asyncio.subprocess.PIPE,
    )


async def exit_status(proc: asyncio.subprocess.Process) -> int:
    async with asyncio.timeout(TIMEOUT):
        await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode


async def test_files_go_through_copier_threads_and_every_answer_is_flushed(
    tmp_path: Path,
) -> None:
    """Stdin and stdout on regular files: every request's answer is in the file at exit."""
    stdin_file, stdout_file = tmp_path / "in", tmp_path / "out"
    stdin_file.write_bytes(requests_bytes())
    with stdin_file.open("rb") as stdin, stdout_file.open("wb") as stdout:
        proc = await run_connect(REFUSED, stdin.fileno(), stdout.fileno())
        assert await exit_status(proc) == 1
    assert answered_ids(stdout_file.read_bytes()) == [1, "two"]


async def test_pipes_are_left_blocking_as_they_were() -> None:
    """Stdin and stdout on pipes are made non-blocking while connect runs, and put back."""
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    try:
        proc = await run_connect(REFUSED, stdin_read, stdout_write)
        os.write(stdin_write, requests_bytes())
        os.close(stdin_write)
        stdin_write = -1
        assert await exit_status(proc) == 1
        assert os.get_blocking(stdin_read)
        assert os.get_blocking(stdout_write)
        os.close(stdout_write)
        stdout_write = -1
        async with asyncio.timeout(TIMEOUT):
            stdout = await asyncio.to_thread(read_to_end, stdout_read)
        assert answered_ids(stdout) == [1, "two"]
    finally:
        for fd in (stdin_read, stdin_write, stdout_read, stdout_write):
            if fd >= 0:
                os.close(fd)


def read_to_end(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


@asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """A TCP server on 127.0.0.1 that accepts and never answers; a ws:// URL to it."""
    async with loopback_server(never_answer) as port:
        yield f"ws://127.0.0.1:{port}/acp"


async def test_a_terminal_is_never_made_non_blocking() -> None:
    """With stdin and stdout on a terminal (shared with stderr), connect leaves it blocking."""
    master, terminal = pty.openpty()
    try:
        async with silent_server() as url:
            proc = await run_connect(url, terminal, terminal)
            assert proc.stderr is not None
            line = b""
            async with asyncio.timeout(TIMEOUT):
                while b'"connecting"' not in line:
                    line = await proc.stderr.readline()
                    assert line, "connect ended before it was connecting"
            assert os.get_blocking(terminal)  # stdio is open, the handshake under way
            proc.send_signal(signal.SIGTERM)
            assert await exit_status(proc) == 0
        assert os.get_blocking(terminal)
        assert select.select([master], [], [], 0)[0] == []  # nothing was written to it
    finally:
        os.close(master)
        os.close(terminal)
