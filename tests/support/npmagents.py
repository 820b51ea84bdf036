"""Real ACP agents from the npm registry, installed once into a cache directory for tests.

Each agent is pinned to one version. :func:`installed` runs ``npm install`` into
``$XDG_CACHE_HOME/acp-relay-tests/npm/<name>-<version>`` (``~/.cache`` by default) the
first time, and skips the test with the reason when Node.js or npm is missing, too old,
or the registry cannot be reached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.system import announce

INSTALL_TIMEOUT = 300.0  # seconds npm has to install one agent


@dataclass(frozen=True)
class NpmAgent:
    """An agent published on npm: its package, pinned version, command and Node.js needs."""

    package: str
    version: str
    command: str
    node_major: int  # the package's engines.node minimum

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.]+", "-", self.spec).strip("-")


GEMINI_CLI = NpmAgent("@google/gemini-cli", "0.61.0", "gemini", 20)
CODEX_ACP = NpmAgent("@zed-industries/codex-acp", "0.16.0", "codex-acp", 18)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "acp-relay-tests" / "npm"


def node_major() -> int | None:
    """The major version of the ``node`` on PATH, None without one."""
    node = shutil.which("node")
    if node is None:
        return None
    result = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    match = re.match(r"v(\d+)\.", result.stdout)
    return int(match.group(1)) if match else None


def installed(agent: NpmAgent) -> Path:
    """The agent's command, installed from npm on first use; skips the test if it cannot be."""
    node = node_major()
    if node is None or shutil.which("npm") is None:
        pytest.skip(f"needs Node.js and npm to install {agent.spec}")
    if node < agent.node_major:
        pytest.skip(f"{agent.spec} needs Node.js {agent.node_major} or newer; this is {node}")
    target = cache_root() / agent.slug
    command = target / "node_modules" / ".bin" / agent.command
    if command.exists():
        return command
    target.parent.mkdir(parents=True, exist_ok=True)
    announce(f"npmagents: installing {agent.spec} from npm (first use) into {target}")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{agent.slug}-") as scratch:
        try:
            result = subprocess.run(
                ["npm", "install", "--prefix", scratch, "--no-audit", "--no-fund",
                 "--loglevel=error", agent.spec],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm did not install {agent.spec} within {INSTALL_TIMEOUT:g} s")
        if result.returncode != 0:
            said = [line for line in result.stderr.splitlines() if "complete log" not in line]
            why = "; ".join(said[:3]) or f"exit status {result.returncode}"
            pytest.skip(f"cannot install {agent.spec} from npm: {why}")
        if not target.exists():
            os.rename(scratch, target)
            os.mkdir(scratch)  # for TemporaryDirectory's clean-up
    return command
