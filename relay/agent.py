"""The agent process: started in its own process group, stopped with its children.

One :class:`AgentProcess` per WebSocket. Stopping follows the order real agents need:
close stdin, wait, SIGTERM the process group, wait, SIGKILL the group, reap. Some
agents never exit on stdin EOF; they and their children are still gone within
twice the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from relay.framing import DroppedLine, Line, LineSplitter

PIPE_LIMIT = 1 << 18  # StreamReader pauses the pipe above 2 x this many buffered bytes
STDERR_LINE_BYTES = 8192  # a longer stderr line is logged by its size only
_GROUP_POLL = 0.02


class AgentStartError(Exception):
    """The agent command could not be started; the message says why."""


@dataclass(frozen=True)
class Exit:
    """How the agent ended, as a WebSocket close code and reason."""

    returncode: int

    @property
    def close_code(self) -> int:
        return 1000 if self.returncode == 0 else 1011

    @property
    def reason(self) -> str:
        if self.returncode == 0:
            return "agent exited"
        if self.returncode < 0:
            return f"agent killed by {signal_name(-self.returncode)}"
        return f"agent exited with status {self.returncode}"


def signal_name(number: int) -> str:
    """SIGTERM for 15, and so on; the number when the signal has no name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _AgentProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Stream protocol that reports the agent's exit at once.

    ``Process.wait()`` also waits for every pipe to close, which never happens while a
    child of the agent still holds one; the exit itself is what the relay needs.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[int] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # uvloop's process transport has the same API but is not a subclass.
        self.process = cast(asyncio.SubprocessTransport, transport)

    def process_exited(self) -> None:
        returncode = self.process.get_returncode()
        super().process_exited()  # may drop the transport: read the status first
        if not self.exited.done() and returncode is not None:
            self.exited.set_result(returncode)


class AgentProcess:
    """A running agent: its pipes, its pid, and how to stop it with its children."""

    def __init__(self, proc: asyncio.subprocess.Process, exited: asyncio.Future[int]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._exited = exited
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        self.stdin = proc.stdin
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    @classmethod
    async def start(cls, argv: Sequence[str], *, cwd: str, env: dict[str, str]) -> AgentProcess:
        """Start ``argv`` (never through a shell) in a new process group."""
        loop = asyncio.get_running_loop()
        pipe = asyncio.subprocess.PIPE
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _AgentProtocol(PIPE_LIMIT, loop),
                *argv,
                stdin=pipe,
                stdout=pipe,
                stderr=pipe,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise AgentStartError(describe_start_error(argv, cwd, exc)) from exc
        return cls(asyncio.subprocess.Process(transport, protocol, loop), protocol.exited)

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> Exit:
        """Wait for the agent itself to exit (its children may still hold its pipes)."""
        return Exit(await asyncio.shield(self._exited))

    async def stop(self, grace: float, *, eof_first: bool = True) -> Exit:
        """Close stdin, wait ``grace``, SIGTERM the group, wait ``grace``, SIGKILL; reap.

        With ``eof_first=False`` (relay shutting down) SIGTERM follows stdin EOF at once.
        """
        self.close_stdin()
        if eof_first and await self._exited_within(grace):
            await self.stop_children(grace)
            return await self.wait()
        self._signal_group(signal.SIGTERM)
        if not await self._exited_within(grace):
            self._signal_group(signal.SIGKILL)
        exit_ = await self.wait()
        await self.stop_children(grace)
        return exit_

    async def stop_children(self, grace: float) -> None:
        """After the agent exited: SIGTERM what is left of its group, SIGKILL after ``grace``."""
        if not self._group_alive():
            return
        self._signal_group(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        # No event tells when the last member of a process group is gone: poll.
        while self._group_alive() and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_GROUP_POLL)
        if self._group_alive():
            self._signal_group(signal.SIGKILL)

    def kill_group(self) -> None:
        """SIGKILL the agent's whole process group at once."""
        self._signal_group(signal.SIGKILL)

    def close_stdin(self) -> None:
        """Send EOF to the agent (idempotent)."""
        if not self.stdin.is_closing():
            self.stdin.close()

    async def _exited_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), seconds)
        except TimeoutError:
            return False
        return True

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True


def describe_start_error(argv: Sequence[str], cwd: str, exc: OSError) -> str:
    """Why the agent did not start, in words that say what to fix."""
    program = argv[0] if argv else "(empty command)"
    if isinstance(exc, FileNotFoundError):
        if not os.path.isdir(cwd):
            return f"workspace {cwd} does not exist (check --workspace)"
        return f"{program}: command not found (check --agent and PATH)"
    if isinstance(exc, PermissionError):
        return f"{program}: permission denied (is it executable?)"
    return f"{program}: {exc.strerror or exc}"


async def drain_stderr(stream: asyncio.StreamReader, log: Any) -> None:
    """Log each stderr line of the agent; a line over the size cap is logged by size only."""
    splitter = LineSplitter(STDERR_LINE_BYTES)
    while chunk := await stream.read(65536):
        for line in splitter.feed(chunk):
            _log_stderr(log, line)
    last = splitter.finish()
    if last is not None:
        _log_stderr(log, last)


def _log_stderr(log: Any, line: Line) -> None:
    if isinstance(line, DroppedLine):
        text = f"[{line.size} bytes, over {STDERR_LINE_BYTES}: not shown]"
    else:
        text = line.decode("utf-8", "replace")
    log.info("agent stderr", line=text)
