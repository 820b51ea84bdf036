"""The files the commands read at start-up (config, secrets, MCP servers, tickets, CA bundles):
read within bounds, or refused with the flag, the path and the problem.

What a file must be is decided by the pure :mod:`relay.config.textfiles`; this module
only looks and reads: the path's kind before opening it (a device is never opened), the
opened file's kind and size again (the path may have changed meanwhile), then at most
the limit's bytes. Opening never waits: a FIFO that slipped in is opened without
blocking and refused.
"""

from __future__ import annotations

import os

from relay.config.errors import UsageError
from relay.config.textfiles import MAX_FILE_BYTES, FileRefused, checked_file, text_of

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 64 * 1024


def read_text(path: str, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes; FileRefused
    (with the OS's words when it cannot be opened) otherwise."""
    try:
        info = os.stat(path)
        checked_file(info.st_mode, info.st_size, limit)
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise FileRefused(exc.strerror or str(exc)) from None
    try:
        info = os.fstat(fd)
        checked_file(info.st_mode, info.st_size, limit)
        data = _read_at_most(fd, limit + 1)
    except OSError as exc:
        raise FileRefused(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    checked_file(info.st_mode, len(data), limit)  # it grew since fstat
    return text_of(data)


def read_named(path: str, flag: str, limit: int = MAX_FILE_BYTES) -> str:
    """The text of the file ``flag`` names; a UsageError naming both and the problem
    otherwise (exit status 2)."""
    try:
        return read_text(path, limit)
    except FileRefused as exc:
        raise UsageError(f"cannot read {flag} {path}: {exc}") from None


def _read_at_most(fd: int, count: int) -> bytes:
    chunks: list[bytes] = []
    left = count
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
