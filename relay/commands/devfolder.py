"""The private folder of one ``serve --dev`` run: its throwaway secret and its fresh workspace.

Made in the temporary directory (``$TMPDIR``, else ``/tmp``) as ``acp-relay-dev-XXXXXXXX``,
mode 0700, with ``relay.pid`` naming the relay that owns it. The relay removes it on
every exit it sees (a normal stop, SIGTERM, SIGINT, SIGHUP, a start-up error); a relay
that is SIGKILLed or crashes cannot, so each ``serve --dev`` first removes the folders
of this user whose relay is gone (and says which). A folder without ``relay.pid`` (made
by an older relay, or being made) is left alone: nothing tells whether its relay runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from relay.streams.filereader import read_text

PREFIX = "acp-relay-dev-"
PID_FILE = "relay.pid"
SECRET_FILE = "secret"
WORKSPACE = "workspace"
PRIVATE = 0o700
PID_FILE_MAX_BYTES = 64  # a pid and a newline


@dataclass(frozen=True)
class DevFolder:
    """One run's folder; :meth:`remove` deletes it with everything in it."""

    path: Path

    @classmethod
    def create(cls, temp_dir: str | None = None) -> DevFolder:
        """A new folder (mode 0700) in ``temp_dir`` (the system's by default), with this
        process's pid in its ``relay.pid``."""
        folder = cls(Path(tempfile.mkdtemp(prefix=PREFIX, dir=temp_dir)))
        (folder.path / PID_FILE).write_text(f"{os.getpid()}\n")
        return folder

    @property
    def secret(self) -> Path:
        return self.path / SECRET_FILE

    @property
    def workspace(self) -> Path:
        return self.path / WORKSPACE

    def make_workspace(self) -> str:
        """Create the fresh workspace (mode 0700); its path."""
        self.workspace.mkdir(mode=PRIVATE, exist_ok=True)
        return str(self.workspace)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def stale_folders(temp_dir: str | None = None) -> list[Path]:
    """This user's dev folders in ``temp_dir`` whose relay is gone, oldest name first."""
    where = Path(temp_dir or tempfile.gettempdir())
    try:
        names = sorted(entry.name for entry in os.scandir(where) if entry.name.startswith(PREFIX))
    except OSError:
        return []
    return [where / name for name in names if _relay_gone(where / name)]


def remove_stale(temp_dir: str | None = None) -> list[str]:
    """Remove the folders :func:`stale_folders` finds; their paths."""
    found = stale_folders(temp_dir)
    for folder in found:
        shutil.rmtree(folder, ignore_errors=True)
    return [str(folder) for folder in found]


def _relay_gone(folder: Path) -> bool:
    """Whether ``folder`` is a dev folder of this user whose relay no longer runs."""
    try:
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return False
        pid = int(read_text(str(folder / PID_FILE), PID_FILE_MAX_BYTES).strip())
    except (OSError, ValueError):  # FileRefused too: a FIFO there must not block start-up
        return False
    return pid > 0 and not _running(pid)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True
