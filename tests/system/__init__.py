"""System packages for tests that need them (Debian's chromium, caddy, prometheus, jq,
websocketd)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

INSTALLER = Path(__file__).with_name("install-packages")
ANNOUNCED = "install-packages: installing"
# What the installer said it installed during this run, for the run's summary (conftest.py).
INSTALLED: list[str] = []
_TERMINAL: list[pytest.Config] = []  # the run's configuration, once conftest.py gives it


def use_terminal(config: pytest.Config) -> None:
    """Where :func:`announce` writes: the terminal of the run ``config`` belongs to."""
    _TERMINAL[:] = [config]


def announce(line: str) -> None:
    """Say ``line`` on the terminal pytest runs on, at once, through its output capture
    (a first-use install takes minutes: it is said before it starts), and keep it for the
    run's summary."""
    INSTALLED.append(line)
    config = _TERMINAL[0] if _TERMINAL else None
    reporter = config and config.pluginmanager.get_plugin("terminalreporter")
    capture = config and config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line, file=sys.__stderr__, flush=True)
        return
    with capture.global_and_fixture_disabled():
        reporter.ensure_newline()
        reporter.write_line(line, yellow=True)


def require_packages(*packages: str, commands: tuple[str, ...] = ()) -> None:
    """Install Debian ``packages`` if missing (as root), or skip saying how to install them."""
    if commands and all(shutil.which(c) for c in commands):
        return
    check = [str(INSTALLER), "--check", *packages]
    result = subprocess.run(check, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode == 4:  # some are missing and will be installed: say so first
        announce(result.stderr.strip())
    result = subprocess.run(
        [str(INSTALLER), *packages], capture_output=True, text=True, timeout=900, check=False
    )
    if result.returncode == 3:
        pytest.skip(result.stderr.strip())
    if result.returncode != 0:
        pytest.fail(f"installing {' '.join(packages)} failed:\n{result.stderr[-2000:]}")
