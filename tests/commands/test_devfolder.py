"""relay.commands.devfolder: a --dev run's private folder, and the sweep of those whose relay
is gone."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from relay.commands.devfolder import PID_FILE, PREFIX, DevFolder, remove_stale, stale_folders
from tests.support.accounts import NOBODY, is_root


def gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def folder_of(pid: int | None, where: Path, name: str) -> Path:
    """A dev folder named ``PREFIX + name`` in ``where``, owned by the relay ``pid`` (none
    without a pid file)."""
    folder = where / f"{PREFIX}{name}"
    folder.mkdir(mode=0o700)
    (folder / "secret").write_text("s3cret\n")
    if pid is not None:
        (folder / PID_FILE).write_text(f"{pid}\n")
    return folder


def test_a_folder_is_private_names_its_relay_and_goes_whole(tmp_path: Path) -> None:
    """The folder is 0700 in the given temp dir, names this process, and remove() takes it
    with its workspace and secret."""
    dev = DevFolder.create(str(tmp_path))
    assert dev.path.parent == tmp_path
    assert dev.path.name.startswith(PREFIX)
    assert stat.S_IMODE(dev.path.stat().st_mode) == 0o700
    assert (dev.path / PID_FILE).read_text() == f"{os.getpid()}\n"
    workspace = dev.make_workspace()
    assert workspace == str(dev.path / "workspace")
    assert stat.S_IMODE(os.stat(workspace).st_mode) == 0o700
    assert os.listdir(workspace) == []
    dev.secret.write_text("s3cret\n")
    dev.remove()
    assert list(tmp_path.iterdir()) == []


def test_only_folders_whose_relay_is_gone_are_stale(tmp_path: Path) -> None:
    """A folder whose relay pid is gone is stale; one whose relay runs, one without a pid
    file, a file and a link of the same prefix are not."""
    gone = folder_of(gone_pid(), tmp_path, "gone")
    folder_of(os.getpid(), tmp_path, "running")
    folder_of(None, tmp_path, "older")
    (tmp_path / f"{PREFIX}file").write_text(f"{gone_pid()}\n")
    (tmp_path / f"{PREFIX}link").symlink_to(gone)
    folder_of(gone_pid(), tmp_path, "junk").joinpath(PID_FILE).write_text("not a pid\n")
    assert stale_folders(str(tmp_path)) == [gone]
    assert remove_stale(str(tmp_path)) == [str(gone)]
    assert not gone.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"{PREFIX}{name}" for name in ("file", "junk", "link", "older", "running")
    ]


def test_a_pid_file_that_is_no_file_is_left_alone_without_waiting(tmp_path: Path) -> None:
    """A folder whose relay.pid is a FIFO (never opened to wait for a writer), a directory or
    too long for a pid is not judged stale."""
    os.mkfifo(folder_of(None, tmp_path, "fifo") / PID_FILE)
    (folder_of(None, tmp_path, "dir") / PID_FILE).mkdir()
    (folder_of(None, tmp_path, "long") / PID_FILE).write_text("0" * 100 + f"{gone_pid()}\n")
    assert stale_folders(str(tmp_path)) == []


@pytest.mark.skipif(not is_root(), reason="needs root: to give a folder to another user")
def test_another_users_folder_is_never_stale(tmp_path: Path) -> None:
    """A folder of another user is left alone, whatever its pid file says."""
    theirs = folder_of(gone_pid(), tmp_path, "theirs")
    os.chown(theirs, NOBODY.uid, NOBODY.gid)
    assert stale_folders(str(tmp_path)) == []


def test_a_missing_temp_dir_has_nothing_stale(tmp_path: Path) -> None:
    """A temp dir that does not exist holds no stale folder (and is not an error)."""
    assert remove_stale(str(tmp_path / "nowhere")) == []
