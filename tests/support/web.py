"""The Node.js side of the browser-facing tests: tests/web's npm packages and its programs.

``tests/web/package.json`` pins the ACP TypeScript SDK, ``ws`` and ``zod``;
:func:`require_node_packages` installs them with ``npm ci`` (from the lock file) on first
use, and skips the test with the reason when Node.js, npm or the registry is out of
reach. :func:`node_client` runs ``tests/web/node-client.mjs`` and reads its JSON lines.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import until
from tests.system import require_packages

WEB = Path(__file__).resolve().parent.parent / "web"
NODE_MODULES = WEB / "node_modules"
RESUME_MODULE = Path(str(resources.files("relay.server.http") / "web" / "acp-relay-resume.js"))
NPM_TIMEOUT = 300


def require_node_packages() -> Path:
    """tests/web/node_modules, installed by ``npm ci`` if missing; skip saying why if it cannot."""
    require_packages("nodejs", "npm", commands=("node", "npm"))
    if installed_as_pinned():
        return NODE_MODULES
    npm = shutil.which("npm")
    assert npm is not None
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--prefix", str(WEB)],
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm ci in {WEB} took over {NPM_TIMEOUT} s (no registry?); run it by hand")
    if done.returncode != 0:
        pytest.skip(f"npm ci in {WEB} failed (no registry?); run it by hand:\n{done.stderr[-800:]}")
    return NODE_MODULES


def installed_as_pinned() -> bool:
    """Whether node_modules holds each dependency of tests/web/package.json at its version."""
    pinned: dict[str, str] = json.loads((WEB / "package.json").read_text())["dependencies"]
    for name, version in pinned.items():
        manifest = NODE_MODULES / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text())["version"] != version:
            return False
    return True


def ticket_command(secret_file: Path) -> list[str]:
    """The argv that prints a fresh ticket signed with the secret in ``secret_file``."""
    return [sys.executable, "-m", "relay", "ticket", "--secret-file", str(secret_file)]


class NodeClient:
    """A running ``node-client.mjs`` and the JSON records it printed so far."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.records: list[dict[str, Any]] = []
        self.stderr = b""
        assert proc.stdout is not None
        self._reader = asyncio.create_task(self._read(proc.stdout))

    async def _read(self, stdout: asyncio.StreamReader) -> None:
        async for line in stdout:
            with suppress(ValueError):
                self.records.append(json.loads(line))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == name]

    def chunks(self) -> int:
        """How many agent_message_chunk updates the SDK has handed over so far."""
        return max((r["chunks"] for r in self.events("chunk")), default=0)

    async def wait_for(self, test: Callable[[], bool], what: str, seconds: float = 20) -> None:
        def check() -> bool:
            if self.proc.returncode is not None and not test():
                raise AssertionError(f"node exited before {what}: {self.records}")
            return test()

        await until(check, seconds=seconds, what=lambda: f"{what} in {self.records[-3:]}")

    async def result(self, seconds: float = 30) -> dict[str, Any]:
        """The session's result, once node-client.mjs is done."""
        async with asyncio.timeout(seconds):
            await self.proc.wait()
            await self._reader
        assert self.proc.stderr is not None
        self.stderr = await self.proc.stderr.read()
        done = self.events("done")
        assert done, f"{self.records}\n{self.stderr.decode(errors='replace')}"
        result: dict[str, Any] = done[0]["result"]
        return result


@asynccontextmanager
async def node_client(args: dict[str, Any]) -> AsyncIterator[NodeClient]:
    """Run ``node tests/web/node-client.mjs ARGS`` for the block (killed if still running)."""
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(WEB / "node-client.mjs"),
        json.dumps(args),
        cwd=WEB,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    client = NodeClient(proc)
    try:
        yield client
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        client._reader.cancel()


def words(count: int) -> tuple[str, Sequence[str]]:
    """A prompt of ``count`` numbered words, and the chunks the demo agent streams back."""
    chunks = [f"word{i:04d} " for i in range(count)]
    return "".join(chunks), chunks
