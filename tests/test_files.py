"""Tests for relay.cli.files: the files and folders flags name, checked at start-up."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from relay.cli.files import load_secrets, private_directory, read_named
from relay.errors import UsageError


def test_a_private_directory_is_made_with_mode_0700(tmp_path: Path) -> None:
    """A missing folder is created, readable by the relay's user only."""
    made = private_directory(str(tmp_path / "state"), "--state-dir")
    assert made == str(tmp_path / "state")
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert private_directory(None, "--state-dir") is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_directory_is_refused(tmp_path: Path) -> None:
    """A folder the relay cannot write is refused at start-up, naming the flag."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UsageError, match=r"cannot use --trace-dir .*not writable"):
        private_directory(str(locked), "--trace-dir")


def test_a_file_is_no_directory(tmp_path: Path) -> None:
    """A path that is a file cannot be a state or trace directory: the flag is named."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="cannot use --state-dir"):
        private_directory(str(tmp_path / "file"), "--state-dir")


def test_an_unreadable_file_names_its_flag(tmp_path: Path) -> None:
    """A file that cannot be read is a UsageError naming the flag and the path."""
    with pytest.raises(UsageError, match=r"cannot read --config .*missing\.toml"):
        read_named(str(tmp_path / "missing.toml"), "--config")


def test_secrets_come_from_the_file_before_the_environment(tmp_path: Path) -> None:
    """The secret file wins over ACP_RELAY_SECRET; with neither, the error says how."""
    (tmp_path / "secret").write_text("# comment\nfirst-secret-0123456789\nold-secret-0123456789\n")
    assert load_secrets(str(tmp_path / "secret"), "env-secret") == (
        "first-secret-0123456789",
        "old-secret-0123456789",
    )
    assert load_secrets(None, "env-secret") == ("env-secret",)
    with pytest.raises(UsageError, match="no secret"):
        load_secrets(None, None)
