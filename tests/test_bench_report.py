"""Tests for tests/bench/report.py: the benchmark's ratios and verdicts, pair by pair."""

from __future__ import annotations

from typing import Any

from tests.bench.report import markdown, targets_table

MACHINE = {"date": "today", "cpu": "cpu", "cores": 2, "python": "3.11", "kernel": "6"}


def figures(relay_rate: float, wsd_rate: float, overhead_ms: float) -> dict[str, Any]:
    return {
        "acp-relay": {
            "rate_200B_x1": {"rate": relay_rate, "p50_ms": 0.2},
            "rate_200B_x64": {"rate": relay_rate * 10, "p50_ms": 1.0},
            "bulk_1MiB_x4": {"mb_per_s": 270.0, "cpu_s_per_gb": 1.3},
            "bulk_16MiB_x2": {"mb_per_s": 170.0},
            "idle_1000": {"kib_per_connection": 40.0},
            "first_byte": {"p50_ms": 1.0 + overhead_ms},
        },
        "websocketd": {
            "rate_200B_x1": {"rate": wsd_rate, "p50_ms": 0.1},
            "rate_200B_x64": {"rate": wsd_rate * 10, "p50_ms": 0.5},
            "bulk_1MiB_x4": {"error": "timeout after 30 s", "received": 1},
        },
        "ceiling": {"bulk_1MiB_x4": {"mb_per_s": 300.0}},
        "agent": {"own_start": {"p50_ms": 1.0}},
    }


def row(lines: list[str], name: str) -> list[str]:
    [found] = [line for line in lines if line.startswith(f"| {name} |")]
    return [cell.strip() for cell in found.strip("|").split("|")]


def test_ratios_are_relay_over_peer_within_the_run() -> None:
    """Throughput and latency ratios divide the relay's figure by websocketd's."""
    lines = targets_table(figures(relay_rate=1200, wsd_rate=1000, overhead_ms=1.5))
    assert row(lines, "throughput 200 B x1 vs websocketd")[1:] == ["1.20", ">= 1.0x", "met"]
    assert row(lines, "p50 round trip vs websocketd")[1:] == ["2.00", "<= 1.25x", "**not met**"]
    assert row(lines, "1 MiB MB/s vs ceiling (4 in flight)")[1:] == ["0.90", ">= 0.9x", "met"]
    assert row(lines, "ticket check + spawn over agent start (ms)")[1] == "1.50"
    assert row(lines, "16 MiB lines carried both ways")[1:] == ["yes", "yes", "met"]


def test_failures_and_missing_figures_are_shown_not_hidden() -> None:
    """A peer's failure shows as 'fails (why)'; a missing figure is 'not measured'."""
    payload = {"machine": MACHINE, "figures": figures(900, 1000, 6.0)}
    del payload["figures"]["acp-relay"]["idle_1000"]
    text = markdown(payload)
    assert (
        "| CPU s per GB relayed (1 MiB, 4 in flight) | 1.30 | fails (timeout after 30 s) |" in text
    )
    assert "| KiB per idle connection | — | <= 64 | not measured |" in text
    assert "| ticket check + spawn over agent start (ms) | 6.00 | <= 5 | **not met** |" in text
