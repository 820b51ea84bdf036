"""Tests for relay.server.http.spenttickets: spent ticket ids on disk, read back across a restart,
bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from relay.config.errors import UsageError
from relay.core.tickets import ReplayGuard
from relay.server.http.spenttickets import FILE_NAME, SpentTickets, StateDirectoryInUse

NOW = 1_000_000.0


def test_a_spent_ticket_stays_spent_across_a_restart(tmp_path: Path) -> None:
    """What one relay spent, the next one (same directory) refuses until it expires."""
    first = SpentTickets(str(tmp_path), ReplayGuard(), NOW)
    first.spent("jti-a", NOW + 60, NOW)
    first.spent("jti-b", NOW + 5, NOW)
    first.close()
    guard = ReplayGuard()
    second = SpentTickets(str(tmp_path), guard, NOW + 10)
    assert guard.is_replay("jti-a", NOW + 10)
    assert not guard.is_replay("jti-b", NOW + 10)  # expired meanwhile: dropped at load
    assert (tmp_path / FILE_NAME).read_text() == f"{int(NOW + 60)} jti-a\n"
    second.close()


def test_a_first_boot_has_nothing_spent(tmp_path: Path) -> None:
    """With no file yet (a box booted for a ticket minted before it), every ticket is new."""
    guard = ReplayGuard()
    store = SpentTickets(str(tmp_path), guard, NOW)
    assert len(guard) == 0
    assert stat.S_IMODE((tmp_path / FILE_NAME).stat().st_mode) == 0o600
    store.close()


def test_the_file_is_compacted_so_it_stays_bounded(tmp_path: Path) -> None:
    """Lines of expired ids are dropped by a rewrite once the file holds twice the live ids."""
    guard = ReplayGuard()
    store = SpentTickets(str(tmp_path), guard, NOW)
    for i in range(5000):
        now = NOW + i
        guard.remember(f"j{i}", now + 2, now)
        store.spent(f"j{i}", now + 2, now)
    lines = (tmp_path / FILE_NAME).read_text().splitlines()
    assert len(lines) <= 2 * len(guard) + 1024 + 1
    store.close()


def test_lines_that_are_not_ids_are_skipped(tmp_path: Path) -> None:
    """A damaged file loses its damaged lines only."""
    (tmp_path / FILE_NAME).write_text(f"garbage\n{int(NOW + 60)} ok-1\n12 has space x\n\n")
    guard = ReplayGuard()
    SpentTickets(str(tmp_path), guard, NOW).close()
    assert [jti for jti, _ in guard.entries(NOW)] == ["ok-1"]


def test_undecodable_and_junk_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    """Invalid UTF-8, NUL bytes and an overlong line are skipped and counted, not fatal."""
    good = f"{int(NOW + 60)} ok-1\n".encode()
    (tmp_path / FILE_NAME).write_bytes(
        b"\xff\xfe garbage\n" + good + b"1 \x00\x00\n" + b"9" * 100_000 + b" long\n\n"
    )
    guard = ReplayGuard()
    store = SpentTickets(str(tmp_path), guard, NOW)
    assert [jti for jti, _ in guard.entries(NOW)] == ["ok-1"]
    assert store.skipped == 3
    store.close()


def test_a_second_store_on_one_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """While one relay holds the directory another is refused, saying who holds it; once
    the first closes, the directory is free again."""
    first = SpentTickets(str(tmp_path), ReplayGuard(), NOW)
    with pytest.raises(
        StateDirectoryInUse, match=rf"in use by another relay \(pid {os.getpid()}\)"
    ):
        SpentTickets(str(tmp_path), ReplayGuard(), NOW)
    first.close()
    SpentTickets(str(tmp_path), ReplayGuard(), NOW).close()


def test_a_planted_scratch_link_is_not_followed(tmp_path: Path) -> None:
    """A symbolic link at the compaction's scratch name leaves the file it names untouched."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    state = tmp_path / "state"
    state.mkdir()
    (state / f"{FILE_NAME}.tmp").symlink_to(victim)
    guard = ReplayGuard()
    guard.remember("jti-a", NOW + 60, NOW)
    SpentTickets(str(state), guard, NOW).close()  # compacts at start-up
    assert victim.read_text() == "precious\n"
    assert (state / FILE_NAME).read_text() == f"{int(NOW + 60)} jti-a\n"
    assert not (state / FILE_NAME).is_symlink()


def test_a_spent_tickets_link_is_refused(tmp_path: Path) -> None:
    """The spent tickets file as a symbolic link stops start-up saying so; its target is
    neither read nor written."""
    victim = tmp_path / "victim"
    victim.write_text(f"{int(NOW + 60)} planted\n")
    state = tmp_path / "state"
    state.mkdir()
    (state / FILE_NAME).symlink_to(victim)
    with pytest.raises(UsageError, match="is a symbolic link, which the relay does not follow"):
        SpentTickets(str(state), ReplayGuard(), NOW)
    assert victim.read_text() == f"{int(NOW + 60)} planted\n"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_spent_tickets_path_that_is_no_file_is_refused(tmp_path: Path, kind: str) -> None:
    """A FIFO at the spent tickets' path stops start-up at once saying what it is (never
    waiting for a writer), as a directory does; the lock is let go."""
    state = tmp_path / "state"
    state.mkdir()
    if kind == "fifo":
        os.mkfifo(state / FILE_NAME)
        said = "is a named pipe (FIFO), not the relay's file: remove it"
    else:
        (state / FILE_NAME).mkdir()
        said = "is a directory, not the relay's file: remove it"
    with pytest.raises(UsageError) as refused:
        SpentTickets(str(state), ReplayGuard(), NOW)
    assert str(refused.value) == f"cannot use --state-dir {state}: {state / FILE_NAME} {said}"
    (state / FILE_NAME).unlink() if kind == "fifo" else (state / FILE_NAME).rmdir()
    SpentTickets(str(state), ReplayGuard(), NOW).close()  # the lock was let go
