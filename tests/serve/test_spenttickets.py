"""Tests for relay.serve.spenttickets: spent ticket ids on disk, read back across a restart,
bounded."""

from __future__ import annotations

import stat
from pathlib import Path

from relay.core.tickets import ReplayGuard
from relay.serve.spenttickets import FILE_NAME, SpentTickets

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
