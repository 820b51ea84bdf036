"""Tests for tests/bench/spread.py: several runs as ranges, a target met only in every run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.spread import (
    cpu_table,
    markdown,
    peers_table,
    relay_table,
    runs_table,
    span,
    targets_table,
)

MACHINE = {"date": "today", "cpu": "AMD EPYC", "cores": 2, "python": "3.11", "kernel": "6"}


def run(relay_rate: float, websocat_rate: float, *, load: float | None = None) -> dict[str, Any]:
    """One run's payload: the relay and websocat at 200 B x1, with CPU per message."""
    figures = {
        "acp-relay": {
            "rate_200B_x1": {"rate": relay_rate, "p50_ms": 0.2, "cpu_us_per_message": 30.0},
            "watchers_0": {"rate": 100.0, "cpu_us_per_message": 6.0},
            "watchers_4": {"rate": relay_rate / 10, "cpu_us_per_message": 9.0},
        },
        "websocat": {
            "rate_200B_x1": {"rate": websocat_rate, "p50_ms": 0.1, "cpu_us_per_message": 5.0}
        },
        "websocketd": {"rate_200B_x1": {"error": "timeout after 15 s"}},
    }
    payload: dict[str, Any] = {"machine": MACHINE, "figures": figures}
    if load is not None:
        payload["load"] = {"at_start": load}
    return payload


def row(lines: list[str], name: str) -> list[str]:
    [found] = [line for line in lines if line.startswith(f"| {name} |")]
    return [cell.strip() for cell in found.strip("|").split("|")]


@pytest.mark.parametrize(
    ("values", "digits", "expected"),
    [
        ([1.0, 3.5, 2.0], 2, "1.00 to 3.50"),
        ([5680.0, 6154.4], 0, "5,680 to 6,154"),
        ([0.821, 0.824], 2, "0.82"),
        ([1.0, None], 1, "1.0 (1 failed)"),
        ([None, None], 1, "—"),
    ],
)
def test_span_is_lowest_to_highest(values: list[float | None], digits: int, expected: str) -> None:
    """A range from the lowest to the highest figure; one figure when they agree at the
    digits shown; the runs without a figure counted, not hidden."""
    assert span(values, digits) == expected


def test_ratios_to_the_fastest_peer_are_taken_run_by_run() -> None:
    """Each run's ratio divides the relay by the fastest peer of that run; the range names
    the peers that were fastest; a latency's fastest peer is the lowest."""
    sides = {"before": [run(800, 1000), run(900, 1000)], "after": [run(1100, 1000)]}
    lines = peers_table(sides)
    assert row(lines, "messages/s, 200 B, 1 in flight")[1:] == [
        "800 to 900", "0.80 to 0.90 (websocat)", "1,100", "1.10 (websocat)"
    ]  # fmt: skip
    assert row(lines, "round trip p50 ms, 1 in flight")[2] == "2.00 (websocat)"


def test_cpu_per_message_for_every_server() -> None:
    """CPU per message: the relay per side, each peer over every run of both sides; a peer
    that failed in every run shows the failures."""
    sides = {"before": [run(800, 1000)], "after": [run(1100, 1000), run(1000, 1000)]}
    lines = cpu_table(sides)
    cells = row(lines, "server CPU µs per message, 200 B, 1 in flight")[1:]
    assert cells[:2] == ["30.0", "30.0"]  # the relay, before and after
    assert cells[2:5] == ["fails (timeout after 15 s)", "5.0", "—"]  # websocketd, websocat, ...


def test_a_target_is_met_only_when_every_run_meets_it() -> None:
    """A target one run meets and another misses is not met, with the count of runs."""
    sides = {"before": [run(800, 1000), run(900, 1000)], "after": [run(1100, 1000), run(990, 1000)]}
    lines = targets_table(sides)
    cells = row(lines, "throughput 200 B x1 vs the fastest peer")
    assert cells[1:] == [
        ">= 1.0x", "0.80 to 0.90", "**not met** (no run)", "0.99 to 1.10",
        "**not met** (1 of 2 runs)",
    ]  # fmt: skip
    every = targets_table({"after": [run(1100, 1000), run(1200, 1000)]})
    assert row(every, "throughput 200 B x1 vs the fastest peer")[3] == "met in every run"


def test_relay_rows_and_runs_are_listed_per_side() -> None:
    """The relay-alone rows pair their two figures as ranges; each run is listed with the
    load it started at."""
    sides = {"before": [run(800, 1000, load=0.42)], "after": [run(1000, 1000)]}
    lines = relay_table(sides)
    assert row(lines, "controller's streamed messages/s, no watcher / 4 watchers")[1:] == [
        "100 / 80", "100 / 100"
    ]  # fmt: skip
    assert row(runs_table(sides), "before")[1:] == ["1", "today", "0.42"]
    assert row(runs_table(sides), "after")[1:] == ["1", "today", "—"]
    assert markdown(sides).startswith("Runs (1 before, 1 after) on AMD EPYC, 2 cores")
