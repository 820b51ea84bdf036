"""What a file the commands read at start-up must be: a regular file, within a size, UTF-8 text.

Pure: the file's mode, size and bytes come in as values (:mod:`relay.streams.filereader` reads
them). Every problem is a :class:`FileRefused` whose message says what the file is and what it
should be; the caller adds the flag and the path. A pipe, a device or a directory is refused
before a byte is read: reading one could block start-up for ever (a FIFO with no writer) or
never end (``/dev/zero``)."""

from __future__ import annotations

import stat

KIB = 1024
MIB = 1024 * KIB
MAX_FILE_BYTES = 1 * MIB  # a config, MCP servers, secret or ticket file
MAX_CACERT_BYTES = 4 * MIB  # a CA bundle (a system's whole bundle is a fraction of this)

_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
REGULAR_ONLY = "the relay reads regular files only: write what it should read to a file"


class FileRefused(ValueError):
    """The file is not one the relay reads; the message says why, without the path."""


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` (``st_mode``) is when it is no regular file ("a named pipe
    (FIFO)", "a directory"), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((said for test, said in _NOT_REGULAR if test(mode)), "a special file")


def kind_problem(mode: int) -> str | None:
    """Why a file of ``mode`` is not read, or None for a regular file."""
    what = not_regular(mode)
    if what is None:
        return None
    if stat.S_ISDIR(mode):
        return f"it is {what}, not a file"
    return f"it is {what}, not a regular file; {REGULAR_ONLY}"


def size_problem(size: int, limit: int) -> str | None:
    """Why a file of ``size`` bytes is not read (over ``limit``), or None."""
    if size <= limit:
        return None
    return f"it is over {size_text(limit)} ({size} bytes), more than the relay reads of such a file"


def checked_file(mode: int, size: int, limit: int) -> None:
    """FileRefused unless a file of ``mode`` and ``size`` may be read (under ``limit``)."""
    problem = kind_problem(mode) or size_problem(size, limit)
    if problem is not None:
        raise FileRefused(problem)


def text_of(data: bytes) -> str:
    """``data`` as UTF-8 text; FileRefused saying where it is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(
            f"it is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def size_text(size: int) -> str:
    """``size`` bytes as a person writes it: 1 MiB, 64 KiB, 100 bytes."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"
