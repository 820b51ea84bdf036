"""System packages for tests that need them (Debian's chromium, caddy, prometheus, jq,
websocketd)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

INSTALLER = Path(__file__).with_name("install-packages")
ANNOUNCED = "install-packages: installing"
# What the installer said it installed during this run, for the run's summary (conftest.py).
INSTALLED: list[str] = []


def require_packages(*packages: str, commands: tuple[str, ...] = ()) -> None:
    """Install Debian ``packages`` if missing (as root), or skip saying how to install them."""
    if commands and all(shutil.which(c) for c in commands):
        return
    result = subprocess.run(
        [str(INSTALLER), *packages], capture_output=True, text=True, timeout=900, check=False
    )
    INSTALLED.extend(line for line in result.stderr.splitlines() if line.startswith(ANNOUNCED))
    if result.returncode == 3:
        pytest.skip(result.stderr.strip())
    if result.returncode != 0:
        pytest.fail(f"installing {' '.join(packages)} failed:\n{result.stderr[-2000:]}")
