"""The ``acp-relay`` command as a subprocess: run to completion, or serving for a block.

A relay started by :func:`serve` runs as ``python -m relay serve`` with its logs on a pipe
(so JSON lines on stderr); :class:`RelayRun` learns its port from the "listening" line
and keeps everything it printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

from tests.support.http import busy, http_get
from tests.support.live import make_ticket
from tests.support.processes import child_states, children_of, pid_alive
from tests.support.waiting import until, until_async

ACP_RELAY = (sys.executable, "-m", "relay")


def run_cli(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m relay ARGS`` to completion (at most 20 s)."""
    return subprocess.run(
        [*ACP_RELAY, *args],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


async def run_async(argv: Sequence[str], *, env: Mapping[str, str]) -> tuple[int, str, str]:
    """Run a command from async code: exit status, stdout, stderr (at most 20 s)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(20):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def parse_json_lines(lines: Sequence[str]) -> list[dict[str, Any]]:
    """The lines that are JSON objects, parsed; the others skipped."""
    records = []
    for line in lines:
        with suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                records.append(record)
    return records


class RelayRun:
    """A running ``acp-relay serve`` and everything it wrote so far."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.url = ""
        self.port = 0
        self.watchdog_pid = 0  # the agents' watchdog, a child of the relay but no agent
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._readers = [
            asyncio.create_task(_collect(proc.stdout, self.stdout)),
            asyncio.create_task(_collect(proc.stderr, self.stderr)),
        ]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ticket_url(self, ticket: str | None = None) -> str:
        """The endpoint URL with ``?ticket=`` (a fresh ticket signed with SECRET by default)."""
        return f"{self.url}?ticket={ticket or make_ticket()}"

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in parse_json_lines(self.stderr) if r.get("event") == name]

    async def wait_event(
        self, name: str, count: int = 1, seconds: float = 10
    ) -> list[dict[str, Any]]:
        """The first ``count`` log records named ``name``, once there are that many."""

        def found() -> list[dict[str, Any]] | None:
            records = self.events(name)
            if len(records) >= count:
                return records
            if self.proc.returncode is not None and all(r.done() for r in self._readers):
                raise AssertionError(f"relay exited before {count} x {name!r}: {self.stderr}")
            return None

        return await until(
            found, seconds=seconds, what=lambda: f"{count} x {name!r} in {self.stderr}"
        )

    def agent_states(self) -> dict[int, str]:
        """The relay's child processes but its watchdog (zombies included), by state."""
        states = child_states(self.pid)
        states.pop(self.watchdog_pid, None)
        return states

    def agents(self) -> list[int]:
        """The relay's live agents: its live children but the watchdog."""
        return [pid for pid, state in self.agent_states().items() if state not in ("Z", "X")]

    async def until_idle(self, seconds: float = 10) -> None:
        """Until the relay reports no connection and has no agent process left, zombies
        included."""

        async def idle() -> bool:
            return not (await busy(self.port))["connections"] and not self.agent_states()

        await until_async(idle, seconds=seconds, what=lambda: f"relay {self.pid} idle")

    async def started_on(self, port: int) -> None:
        """Until the relay answers /healthz on ``port`` (for logs without "listening")."""

        async def answers() -> bool:
            with suppress(OSError):
                return (await http_get(port, "/healthz")).status == 200
            if self.proc.returncode is not None:
                raise AssertionError(f"relay exited: {self.stderr}")
            return False

        await until_async(answers, what=f"/healthz on port {port}")
        self.port = port
        self.url = f"ws://127.0.0.1:{port}/acp"

    async def started(self) -> None:
        listening = (await self.wait_event("listening"))[0]
        self.watchdog_pid = listening.get("watchdog_pid", 0)
        match = re.fullmatch(r"ws://(127\.0\.0\.1|localhost):(\d+)/acp", listening["url"])
        assert match, listening["url"]
        self.port = int(match[2])
        self.url = f"ws://127.0.0.1:{self.port}/acp"

    async def finished(self, seconds: float = 10) -> int:
        """Wait for the relay to exit and for its output to be read; its exit status."""
        async with asyncio.timeout(seconds):
            status = await self.proc.wait()
            await asyncio.gather(*self._readers)
        return status

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return await self.finished()

    async def cleanup(self) -> None:
        """Kill whatever is left: the relay, then its agents' process groups."""
        agents = {r["agent_pid"] for r in self.events("connection opened")}
        if self.proc.returncode is None:
            agents.update(children_of(self.pid))
            self.proc.kill()
        try:
            async with asyncio.timeout(5):
                await self.proc.wait()
                await asyncio.gather(*self._readers)
        except TimeoutError:
            for reader in self._readers:
                reader.cancel()
        for pid in agents:  # each agent leads its own process group
            if pid_alive(pid):
                with suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)


async def _collect(stream: asyncio.StreamReader, into: list[str]) -> None:
    async for raw in stream:
        into.append(raw.decode("utf-8", "replace").rstrip("\n"))


@asynccontextmanager
async def serve(
    *args: str,
    env: Mapping[str, str],
    listen: bool = True,
    command: Sequence[str] = ACP_RELAY,
    port: int | None = None,
) -> AsyncIterator[RelayRun]:
    """Run ``acp-relay serve ARGS`` (on 127.0.0.1:0 unless ``listen`` is False) for the block,
    ``command`` being ``acp-relay``; on ``port`` if given, found up by /healthz rather than
    by its "listening" line (which --log-level warning hides)."""
    where = ("--listen", f"127.0.0.1:{port or 0}") if listen else ()
    proc = await asyncio.create_subprocess_exec(
        *command,
        "serve",
        *where,
        *args,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        limit=1 << 20,
    )
    run = RelayRun(proc)
    try:
        await (run.started() if port is None else run.started_on(port))
        yield run
    finally:
        await run.cleanup()


async def dev_banner(relay: RelayRun) -> tuple[str, str]:
    """The banner's single-use WebSocket URL and its "More tickets" command."""

    def parse() -> tuple[str, str] | None:
        text = "\n".join(relay.stdout)
        url = re.search(r"WebSocket URL \(single use\):\n +(\S+)\n", text)
        more = re.search(r"More tickets:\n +(.+)\n", text)
        return (url[1], more[1]) if url and more else None

    return await until(parse, what=lambda: f"a banner on stdout: {relay.stdout}")


async def dev_workspace(relay: RelayRun) -> str:
    """The folder the --dev banner's "Workspace" line names, where its agents run."""

    def parse() -> str | None:
        found = re.search(r"\n  Workspace: ([^ ,\n]+)", "\n".join(relay.stdout))
        return found[1] if found else None

    return await until(parse, what=lambda: f"a Workspace line on stdout: {relay.stdout}")
