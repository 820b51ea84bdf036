"""Tests for tests/bench/alternate.py: waiting for a quiet machine, numbering the runs."""

from __future__ import annotations

from pathlib import Path

from tests.bench.alternate import next_number, wait_for_quiet


def test_waits_until_the_load_falls_under_the_bound() -> None:
    """Polls every ``poll`` seconds until the load is at most the bound; records the load it
    started at and how long it waited."""
    readings = [2.1, 1.3, 0.7]
    slept: list[float] = []
    got = wait_for_quiet(0.8, 1200, 30, load=lambda: readings.pop(0), sleep=slept.append)
    assert got == {"at_first_look": 2.1, "at_start": 0.7, "waited_s": 60, "gave_up": False}
    assert slept == [30, 30]


def test_gives_up_after_the_longest_wait() -> None:
    """A machine that stays busy is waited for at most ``max_wait`` seconds, then the run
    starts anyway, saying so."""
    slept: list[float] = []
    got = wait_for_quiet(0.8, 90, 30, load=lambda: 1.5, sleep=slept.append)
    assert got == {"at_first_look": 1.5, "at_start": 1.5, "waited_s": 90, "gave_up": True}
    assert slept == [30, 30, 30]


def test_a_quiet_machine_is_not_waited_for() -> None:
    """No sleep at all when the load is already under the bound."""
    slept: list[float] = []
    got = wait_for_quiet(0.8, 1200, 30, load=lambda: 0.3, sleep=slept.append)
    assert got["waited_s"] == 0
    assert not slept


def test_runs_are_numbered_after_those_kept(tmp_path: Path) -> None:
    """A side's next run takes the first number not yet in the results folder."""
    assert next_number(tmp_path, "after") == 1
    (tmp_path / "after-1.raw.json").write_text("{}")
    (tmp_path / "after-2.raw.json").write_text("{}")
    (tmp_path / "before-1.raw.json").write_text("{}")
    assert next_number(tmp_path, "after") == 3
    assert next_number(tmp_path, "before") == 2
