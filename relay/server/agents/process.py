"""The agent process: started in its own process group, stopped with its children.

One :class:`AgentProcess` per WebSocket. Stopping follows the order real agents need:
close stdin, wait, SIGTERM the process group, wait, SIGKILL the group, reap. Some
agents never exit on stdin EOF; they and their children are still gone within
twice the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import subprocess
from asyncio.streams import FlowControlMixin
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Protocol

from relay.config.account import Account
from relay.core.exits import Exit
from relay.core.framing import NEWLINE, is_blank

if TYPE_CHECKING:  # the configuration's types only: the agent process needs none of it
    from relay.config.resolved import RelayConfig

PIPE_LIMIT = 1 << 18  # StreamReader pauses the pipe above 2 x this many buffered bytes
STDERR_LINE_BYTES = 8192  # a longer stderr line is logged by its start, with its size
_GROUP_POLL = 0.02


class Guard(Protocol):
    """What stops the agents if the relay dies (:class:`relay.server.agents.watchdog.Watchdog`)."""

    def watch(self, pgid: int) -> None: ...

    def forget(self, pgid: int) -> None: ...


def spawn_arguments(
    argv: Sequence[str], account: Account | None
) -> tuple[list[str], dict[str, Any]]:
    """The argv to start and Popen's extra arguments, to run ``argv`` as ``account``."""
    if account is None:
        return list(argv), {}
    if account.setpriv is None:
        return list(argv), {
            "user": account.uid,
            "group": account.gid,
            "extra_groups": list(account.groups),
        }
    groups = ",".join(str(g) for g in account.groups)
    switch = [f"--reuid={account.uid}", f"--regid={account.gid}"]
    switch.append(f"--groups={groups}" if groups else "--clear-groups")
    return [account.setpriv, *switch, "--", *argv], {}


class AgentStartError(Exception):
    """The agent command could not be started; the message says why."""


class AgentProcess:
    """A running agent: its pipes, its pid, and how to stop it with its children.

    Started with :class:`subprocess.Popen` (vfork and exec: about 1.5 ms faster than the
    event loop's fork-based spawn in a process of the relay's size) and watched through a
    pidfd, so the agent's exit is seen at once even while its children hold its pipes.
    """

    def __init__(
        self, popen: subprocess.Popen[bytes], pipes: _Pipes, guard: Guard | None = None
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.stdin, self.stdout, self.stderr = pipes.stdin, pipes.stdout, pipes.stderr
        self._pipes = pipes
        self._guard = guard
        self._signalled = False  # the relay signalled the group while the agent ran
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        _watch_exit(popen, self._exited)

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str],
        guard: Guard | None = None,
        account: Account | None = None,
    ) -> AgentProcess:
        """Start ``argv`` (never through a shell) in a new process group, as ``account``
        if given, watched by ``guard`` (if any) until :meth:`release`."""
        command, switch = spawn_arguments(argv, account)
        try:
            # vfork + exec blocks the loop briefly: cheaper than the loop's own fork-based
            # spawn (docs/performance.md, "Starting an agent").
            popen = subprocess.Popen(  # noqa: ASYNC220
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,
                **switch,
            )
        except OSError as exc:
            raise AgentStartError(describe_start_error(argv, cwd, exc)) from exc
        if guard is not None:
            guard.watch(popen.pid)
        try:
            pipes = await _connect_pipes(popen)
        except BaseException:
            _kill_and_reap(popen)
            for pipe in (popen.stdin, popen.stdout, popen.stderr):
                if pipe is not None:
                    pipe.close()
            if guard is not None:
                guard.forget(popen.pid)
            raise
        return cls(popen, pipes, guard)

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> Exit:
        """Wait for the agent itself to exit (its children may still hold its pipes)."""
        returncode = await asyncio.shield(self._exited)
        return Exit(returncode, stopped=self._signalled)

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

    def release(self) -> None:
        """The relay is done with the agent, stopped: close the relay's ends of the pipes
        (uvloop keeps them open past EOF) and take it off the guard's list."""
        for transport in self._pipes.transports:
            transport.close()
        if self._guard is not None:
            self._guard.forget(self.pid)
            self._guard = None

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
        if not self._exited.done():
            self._signalled = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True


@dataclass
class _Pipes:
    """The agent's pipes as asyncio streams, and the transports to close at the end."""

    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    transports: list[asyncio.BaseTransport]


async def _connect_pipes(popen: subprocess.Popen[bytes]) -> _Pipes:
    """Asyncio streams over the agent's three pipes."""
    loop = asyncio.get_running_loop()
    assert popen.stdin is not None
    assert popen.stdout is not None
    assert popen.stderr is not None
    transports: list[asyncio.BaseTransport] = []
    stdout = await _reader(loop, popen.stdout, transports)
    stderr = await _reader(loop, popen.stderr, transports)
    transport, protocol = await loop.connect_write_pipe(FlowControlMixin, popen.stdin)
    transports.append(transport)
    stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    return _Pipes(stdin, stdout, stderr, transports)


async def _reader(
    loop: asyncio.AbstractEventLoop, pipe: IO[bytes], transports: list[asyncio.BaseTransport]
) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=PIPE_LIMIT, loop=loop)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    transports.append(transport)
    return reader


def _watch_exit(popen: subprocess.Popen[bytes], exited: asyncio.Future[int]) -> None:
    """Resolve ``exited`` with the status when the agent exits, reaping it."""
    loop = asyncio.get_running_loop()
    try:
        pidfd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): a waiting thread
        waiting = loop.run_in_executor(None, popen.wait)
        waiting.add_done_callback(lambda done: _settle(exited, done.result()))
        return

    def reap() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        _settle(exited, popen.wait())

    loop.add_reader(pidfd, reap)


def _settle(exited: asyncio.Future[int], returncode: int) -> None:
    if not exited.done():
        exited.set_result(returncode)


def _kill_and_reap(popen: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()


async def launch_agent(config: RelayConfig, guard: Guard | None = None) -> AgentProcess:
    """Start the configured agent (watched by ``guard``, as ``--agent-user`` if given): a
    connection's own (cold) start, and each warm agent's."""
    return await AgentProcess.start(
        config.agent_argv,
        cwd=config.workspace,
        env=config.agent_env,
        guard=guard,
        account=config.agent_account,
    )


def describe_start_error(argv: Sequence[str], cwd: str, exc: OSError) -> str:
    """Why the agent did not start, in words that say what to fix."""
    program = argv[0] if argv else "(empty command)"
    if isinstance(exc, FileNotFoundError):
        if not os.path.isdir(cwd):
            return f"workspace {cwd} does not exist (check --workspace)"
        found = program if os.sep in program else shutil.which(program)
        if found is not None and os.path.isfile(os.path.join(cwd, found)):
            return f"{program}: its interpreter was not found (check its #! line)"
        return f"{program}: command not found (check --agent and PATH)"
    if isinstance(exc, PermissionError):
        return f"{program}: permission denied (is it executable?)"
    if exc.errno == errno.ENOEXEC:
        return f"{program}: not a program this system can run (a script without a #! line?)"
    return f"{program}: {exc.strerror or exc}"


async def drain_stderr(stream: asyncio.StreamReader, on_line: Callable[[str], None]) -> None:
    """Hand each stderr line of the agent to ``on_line`` until EOF: blank lines skipped, a line
    over ``STDERR_LINE_BYTES`` cut to its start with a note of its size.

    Cancelled, it leaves the unfinished line in ``stream``: a warm agent's stderr is read
    while it waits, then by the connection that takes it, which reads the line whole.
    """
    start = b""  # the start of a line over the stream's limit, kept while the rest is read
    dropped = 0  # bytes of such a line read and not kept
    while True:
        try:
            line = await stream.readuntil(NEWLINE)
        except asyncio.IncompleteReadError as exc:  # EOF
            _hand_on(start + exc.partial, dropped, on_line)
            return
        except asyncio.LimitOverrunError as exc:
            part = await stream.readexactly(exc.consumed)  # buffered: no wait
            kept = part[: STDERR_LINE_BYTES - len(start)]
            start += kept
            dropped += len(part) - len(kept)
            continue
        _hand_on(start + line.removesuffix(NEWLINE), dropped, on_line)
        start, dropped = b"", 0


def _hand_on(line: bytes, dropped: int, on_line: Callable[[str], None]) -> None:
    """One line on: whole, or its first ``STDERR_LINE_BYTES`` and a note of its size."""
    line = line.removesuffix(b"\r")
    size = len(line) + dropped
    if size > STDERR_LINE_BYTES:
        on_line(stderr_line_cut(line[:STDERR_LINE_BYTES].decode("utf-8", "ignore"), size))
    elif not is_blank(line):
        on_line(line.decode("utf-8", "replace"))


def stderr_line_cut(start: str, size: int) -> str:
    """What is logged for a stderr line over ``STDERR_LINE_BYTES``: its start, and its size."""
    return f"{start}…[{size} bytes, cut at {STDERR_LINE_BYTES}]"
