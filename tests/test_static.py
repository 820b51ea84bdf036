"""The code stays lint-clean (ruff) and type-clean (mypy --strict), checked in every test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # whole-tree ruff and mypy: run by CI and the full run

ROOT = Path(__file__).resolve().parent.parent


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_check() -> None:
    """ruff finds nothing to complain about in relay/ and tests/."""
    result = run("ruff", "check", "relay", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    """Every file is formatted as ruff format would."""
    result = run("ruff", "format", "--check", "relay", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    """mypy --strict (configured in pyproject.toml) passes on relay/ and tests/."""
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
