"""Tests for relay.config.textfiles: what a file the commands read must be, as a table."""

from __future__ import annotations

import stat

import pytest

from relay.config.textfiles import (
    MIB,
    REGULAR_ONLY,
    FileRefused,
    checked_file,
    kind_problem,
    not_regular,
    size_problem,
    size_text,
    text_of,
)


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        (stat.S_IFREG, None),
        (stat.S_IFDIR, "it is a directory, not a file"),
        (stat.S_IFIFO, f"it is a named pipe (FIFO), not a regular file; {REGULAR_ONLY}"),
        (stat.S_IFCHR, f"it is a character device, not a regular file; {REGULAR_ONLY}"),
        (stat.S_IFBLK, f"it is a block device, not a regular file; {REGULAR_ONLY}"),
        (stat.S_IFSOCK, f"it is a socket, not a regular file; {REGULAR_ONLY}"),
    ],
    ids=["regular", "directory", "fifo", "character device", "block device", "socket"],
)
def test_only_a_regular_file_is_read(kind: int, problem: str | None) -> None:
    """A regular file is read; a directory, a pipe, a device or a socket is refused, saying
    what it is."""
    assert kind_problem(kind | 0o644) == problem
    assert (not_regular(kind | 0o644) is None) == (problem is None)


@pytest.mark.parametrize(
    ("size", "limit", "problem"),
    [
        (0, MIB, None),
        (MIB, MIB, None),
        (
            MIB + 1,
            MIB,
            "it is over 1 MiB (1048577 bytes), more than the relay reads of such a file",
        ),
        (65, 64, "it is over 64 bytes (65 bytes), more than the relay reads of such a file"),
    ],
)
def test_a_file_over_its_limit_is_refused(size: int, limit: int, problem: str | None) -> None:
    """A file up to its limit is read; one byte more is refused, naming the limit."""
    assert size_problem(size, limit) == problem


def test_checked_file_refuses_the_kind_before_the_size() -> None:
    """A device of any size is refused as a device; a regular file over the limit for its
    size; a regular file within it passes."""
    with pytest.raises(FileRefused, match="character device"):
        checked_file(stat.S_IFCHR | 0o666, 0, MIB)
    with pytest.raises(FileRefused, match="over 1 MiB"):
        checked_file(stat.S_IFREG | 0o600, 2 * MIB, MIB)
    checked_file(stat.S_IFREG | 0o600, MIB, MIB)


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"listen = '127.0.0.1:8765'\n", "listen = '127.0.0.1:8765'\n"),
        ("café\n".encode(), "café\n"),
        (b"", ""),
    ],
)
def test_utf8_text_is_read_as_it_is(data: bytes, text: str) -> None:
    """UTF-8 bytes give their text."""
    assert text_of(data) == text


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b"\xff\xfe", "byte 0xff at offset 0"),
        (b"key = 'caf\xe9'\n", "byte 0xe9 at offset 10"),
        (b"ok\n\xc3", "byte 0xc3 at offset 3"),
    ],
)
def test_bytes_that_are_not_utf8_are_refused_saying_where(data: bytes, where: str) -> None:
    """Latin-1, UTF-16 or a cut sequence is refused, naming the first bad byte and its
    offset."""
    with pytest.raises(FileRefused) as refused:
        text_of(data)
    assert str(refused.value) == f"it is not UTF-8 text ({where})"


@pytest.mark.parametrize(
    ("size", "shown"),
    [(MIB, "1 MiB"), (4 * MIB, "4 MiB"), (64 * 1024, "64 KiB"), (1000, "1000 bytes")],
)
def test_sizes_are_shown_as_a_person_writes_them(size: int, shown: str) -> None:
    """Whole MiB and KiB by their unit, anything else in bytes."""
    assert size_text(size) == shown
