"""Spent ticket ids kept on disk (``--state-dir``), so a used ticket stays used across restarts.

Without it, the relay's memory of used tickets (:class:`relay.core.tickets.ReplayGuard`) goes
with the process: within its lifetime a ticket used before a restart would work once
more after it. With a state directory, each admitted ticket's id and expiry are appended
to ``DIR/spent-tickets`` (one ``EXPIRY JTI`` line, written before the socket opens) and
read back at start-up, expired ones dropped. The file is rewritten compactly when it
holds twice as many lines as live ids, so its size stays bounded by the guard's capacity.
A first boot has no file, so a ticket minted before the relay existed still works.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from relay.core.tickets import ReplayGuard

FILE_NAME = "spent-tickets"
FILE_MODE = 0o600
_LINE = re.compile(r"(\d+(?:\.\d+)?) ([A-Za-z0-9_.~-]{1,128})")
_COMPACT_SLACK = 1024  # lines allowed past twice the live ids before a rewrite


class SpentTickets:
    """The on-disk record of spent ticket ids for one relay."""

    def __init__(self, directory: str, guard: ReplayGuard, now: float) -> None:
        self.path = Path(directory) / FILE_NAME
        self.guard = guard
        self.lines = 0
        self._load(now)
        self._rewrite(now)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def _load(self, now: float) -> None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        for line in text.splitlines():
            found = _LINE.fullmatch(line)
            if found is not None:
                self.guard.remember(found[2], float(found[1]), now)

    def _rewrite(self, now: float) -> None:
        entries = self.guard.entries(now)
        scratch = self.path.with_suffix(".tmp")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
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
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self._fd)


def _line(jti: str, expires_at: float) -> str:
    return f"{math.ceil(expires_at)} {jti}\n"  # rounded up: never expires early
