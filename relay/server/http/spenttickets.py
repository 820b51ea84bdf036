"""Spent ticket ids kept on disk (``--state-dir``), so a used ticket stays used across restarts.

Without it, the relay's memory of used tickets (:class:`relay.core.tickets.ReplayGuard`) goes
with the process: within its lifetime a ticket used before a restart would work once
more after it. With a state directory, each admitted ticket's id and expiry are appended
to ``DIR/spent-tickets`` (one ``EXPIRY JTI`` line, written before the socket opens) and
read back at start-up, expired ones dropped. The file is rewritten compactly when it
holds twice as many lines as live ids, so its size stays bounded by the guard's capacity.
A first boot has no file, so a ticket minted before the relay existed still works.

One relay per directory: each holds an exclusive ``flock`` on ``DIR/lock`` for its life
(the kernel drops it when the process dies, SIGKILL included), since two relays sharing
the file would drop each other's ids at compaction. No file is opened through a symbolic
link, and the compaction's scratch file must be new (``O_EXCL``): a link planted in the
directory cannot make the relay truncate or append to the file it points to.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import re
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO

from relay.config.errors import UsageError
from relay.config.textfiles import not_regular
from relay.core.tickets import ReplayGuard

FILE_NAME = "spent-tickets"
LOCK_NAME = "lock"
FILE_MODE = 0o600
_LINE = re.compile(rb"(\d+(?:\.\d+)?) ([A-Za-z0-9_.~-]{1,128})")
_LINE_MAX = 256  # bytes: a line longer than any valid one is junk, read no further
_COMPACT_SLACK = 1024  # lines allowed past twice the live ids before a rewrite
_NO_LINKS = os.O_NOFOLLOW | os.O_CLOEXEC


class StateDirectoryInUse(UsageError):
    """Another relay holds the directory's lock."""


class NotAFile(Exception):
    """The spent tickets' path is no regular file (a FIFO, a directory, a device)."""


class SpentTickets:
    """The on-disk record of spent ticket ids for one relay."""

    def __init__(self, directory: str, guard: ReplayGuard, now: float) -> None:
        self.path = Path(directory) / FILE_NAME
        self.guard = guard
        self.lines = 0
        self.skipped = 0  # lines of the file read at start-up that were not entries
        try:
            self._lock = hold_lock(Path(directory))
        except OSError as exc:
            raise unusable(directory, exc) from exc
        try:
            self._load(now)
            self._rewrite(now)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | _NO_LINKS)
        except NotAFile as exc:
            os.close(self._lock)
            raise UsageError(f"cannot use --state-dir {directory}: {exc}") from None
        except OSError as exc:
            os.close(self._lock)
            raise unusable(directory, exc) from exc
        if self.skipped:
            from relay.observe.logs import get_logger

            get_logger("relay").warning(
                "spent tickets: lines skipped", path=str(self.path), skipped=self.skipped
            )

    def _load(self, now: float) -> None:
        try:  # never waiting: a FIFO put there would block start-up for ever
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | _NO_LINKS)
        except FileNotFoundError:
            return
        what = not_regular(os.fstat(fd).st_mode)
        if what is not None:
            os.close(fd)
            raise NotAFile(f"{self.path} is {what}, not the relay's file: remove it")
        with os.fdopen(fd, "rb") as file:
            for line in bounded_lines(file):
                found = _LINE.fullmatch(line) if line is not None else None
                if found is not None:
                    self.guard.remember(found[2].decode("ascii"), float(found[1]), now)
                elif line != b"":
                    self.skipped += 1

    def _rewrite(self, now: float) -> None:
        entries = self.guard.entries(now)
        scratch = self.path.with_suffix(".tmp")
        with suppress(FileNotFoundError):  # left by a crash mid-rewrite
            scratch.unlink()  # a link itself, never its target
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINKS, FILE_MODE)
        try:
            os.write(fd, "".join(_line(jti, expiry) for jti, expiry in entries).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(scratch, self.path)
        self.lines = len(entries)

    def spent(self, jti: str, expires_at: float, now: float) -> None:
        """Record that ``jti`` was used; it stays refused until ``expires_at``."""
        os.write(self._fd, _line(jti, expires_at).encode())
        self.lines += 1
        if self.lines > 2 * len(self.guard) + _COMPACT_SLACK:
            os.close(self._fd)
            self._rewrite(now)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | _NO_LINKS)

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._lock)  # the lock goes with it


def hold_lock(directory: Path) -> int:
    """The descriptor of ``DIR/lock``, exclusively locked; StateDirectoryInUse, naming the
    holder, when another relay has it."""
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | _NO_LINKS, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip()
        os.close(fd)
        by = f"another relay (pid {holder})" if holder.isdigit() else "another relay"
        raise StateDirectoryInUse(
            f"--state-dir {directory} is in use by {by}: give each relay a --state-dir of "
            "its own, or stop the other one"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unusable(directory: str, exc: OSError) -> UsageError:
    """The start-up error for a state directory whose files cannot be opened."""
    where = exc.filename or directory
    if exc.errno == errno.ELOOP:
        why = f"{where} is a symbolic link, which the relay does not follow: remove it"
    else:
        why = f"{where}: {exc.strerror or exc}"
    return UsageError(f"cannot use --state-dir {directory}: {why}")


def bounded_lines(file: BinaryIO) -> Iterator[bytes | None]:
    """Each line of ``file`` without its newline, or None for one longer than any entry
    (skipped without being held in memory)."""
    while True:
        line = file.readline(_LINE_MAX + 1)
        if not line:
            return
        if line.endswith(b"\n"):
            yield line[:-1]
            continue
        if len(line) <= _LINE_MAX:
            yield line  # the last line, without a newline
            return
        while line and not line.endswith(b"\n"):
            line = file.readline(1 << 16)
        yield None


def _line(jti: str, expires_at: float) -> str:
    return f"{math.ceil(expires_at)} {jti}\n"  # rounded up: never expires early
