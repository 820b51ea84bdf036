"""Tests for relay.observe.stats: the counting behind /metrics, its label classes and histograms."""

from __future__ import annotations

import pytest

from relay.observe.stats import (
    CLOSE_CLASSES,
    EXIT_CLASSES,
    Histogram,
    RelayStats,
    close_class,
    exit_class,
)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (1000, "normal"),
        (1001, "going_away"),
        (1011, "error"),
        (1002, "protocol"),
        (1009, "protocol"),
        (4001, "relay"),
        (4404, "relay"),
        (1006, "none"),
        (None, "none"),
    ],
)
def test_close_codes_fall_in_few_classes(code: int | None, expected: str) -> None:
    """Every close code maps to one of a handful of classes: labels stay bounded."""
    assert close_class(code) == expected
    assert expected in CLOSE_CLASSES


@pytest.mark.parametrize(
    ("returncode", "expected"), [(0, "zero"), (3, "nonzero"), (-9, "signal"), (None, "not_started")]
)
def test_exit_statuses_fall_in_few_classes(returncode: int | None, expected: str) -> None:
    """An agent's exit status is zero, nonzero, a signal, or there was no agent."""
    assert exit_class(returncode) == expected
    assert expected in EXIT_CLASSES


def test_histogram_buckets_are_cumulative() -> None:
    """Observations land in the first bucket that holds them; the exposition is cumulative."""
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        histogram.observe(value)
    assert histogram.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert (histogram.observed, round(histogram.total, 2)) == (4, 3.65)


class Live:
    """A connection's carried counters, as an observer would report them."""

    def __init__(self, carried: tuple[int, int, int, int]) -> None:
        self.figures = carried

    def carried(self) -> tuple[int, int, int, int]:
        return self.figures


def test_carried_totals_count_live_and_ended_connections_once() -> None:
    """Messages and bytes are read from live connections, and kept when they end."""
    stats = RelayStats()
    first, second = Live((1, 10, 2, 20)), Live((3, 30, 4, 40))
    stats.opened_connection(first)
    stats.opened_connection(second)
    assert stats.carried() == [4, 40, 6, 60]
    stats.ended_connection(first, 1000, 0, 1.5)
    assert stats.carried() == [4, 40, 6, 60]
    assert stats.ended == {("normal", "zero"): 1}
    assert stats.opened == 2
