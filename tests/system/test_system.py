"""Tests for tests.system: a first-use install is said on pytest's terminal before it
starts, through the run's output capture, and again in the run's summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SAID = "fake-install: installing something slow into somewhere"

INNER = f"""
from tests.system import announce


def test_a_long_install() -> None:
    announce({SAID!r})
    print("captured: the test's own output")
"""

CONFTEST = """
from tests.system import INSTALLED, use_terminal


def pytest_configure(config):
    use_terminal(config)


def pytest_terminal_summary(terminalreporter):
    for line in INSTALLED:
        terminalreporter.write_line("summary: " + line)
"""


def test_an_install_is_said_on_the_terminal_before_it_starts(tmp_path: Path) -> None:
    """announce() reaches the terminal of a capturing run during the test, and its summary."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER)
    run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    where = ["--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [*run, *where],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "captured: the test's own output" not in out  # capture was on
    assert out.index(SAID) < out.index("summary: " + SAID) < out.index("1 passed")
