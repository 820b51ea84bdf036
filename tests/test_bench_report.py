"""Tests for tests/bench/report.py: the benchmark's ratios and verdicts, pair by pair."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.report import (
    Check,
    fastest_peer,
    figures_table,
    markdown,
    relay_table,
    targets_table,
    verdict,
)

MACHINE = {"date": "today", "cpu": "cpu", "cores": 2, "python": "3.11", "kernel": "6"}
PLAN = {"stream_updates": 20000, "aggregate_sockets": 50, "aggregate_updates": 2000}


def figures(relay_rate: float, wsd_rate: float, overhead_ms: float) -> dict[str, Any]:
    return {
        "acp-relay": {
            "rate_200B_x1": {"rate": relay_rate, "p50_ms": 0.2},
            "rate_200B_x64": {"rate": relay_rate * 10, "p50_ms": 1.0},
            "stream": {"rate": 90_000.0, "cpu_ms_per_1000": 8.0},
            "aggregate": {"rate": 120_000.0, "cpu_ms_per_1000": 9.0},
            "bulk_1MiB_x4": {"mb_per_s": 270.0, "cpu_s_per_gb": 1.3},
            "bulk_16MiB_x2": {"mb_per_s": 170.0},
            "idle_1000": {"kib_per_connection": 40.0},
            "first_byte": {"p50_ms": 1.0 + overhead_ms},
            "resume_off_200B_x64": {"rate": 10_000.0, "p50_ms": 2.0},
            "resume_on_200B_x64": {"rate": 8_500.0, "p50_ms": 2.1},
            "resume_gap": {"resume_max_ms": 40.0, "back_to_first_p50_ms": 300.0},
            "scrape_off_200B_x64": {"rate": 10_000.0},
            "scrape_on_200B_x64": {"rate": 9_900.0, "scrapes": 12},
        },
        "websocketd": {
            "rate_200B_x1": {"rate": wsd_rate, "p50_ms": 0.1},
            "rate_200B_x64": {"rate": wsd_rate * 10, "p50_ms": 0.5},
            "stream": {"rate": 60_000.0},
            "aggregate": {"rate": 150_000.0},
            "bulk_1MiB_x4": {"error": "timeout after 30 s", "received": 1},
        },
        "websocat": {
            "rate_200B_x1": {"rate": wsd_rate / 2, "p50_ms": 0.05},
            "rate_200B_x64": {"rate": wsd_rate * 20, "p50_ms": 0.4},
            "stream": {"rate": 100_000.0},
            "bulk_1MiB_x4": {"error": "message of 1048576 B came back as 65536 B"},
        },
        "ceiling": {"bulk_1MiB_x4": {"mb_per_s": 300.0}},
        "agent": {"own_start": {"p50_ms": 1.0}},
    }


def row(lines: list[str], name: str) -> list[str]:
    [found] = [line for line in lines if line.startswith(f"| {name} |")]
    return [cell.strip() for cell in found.strip("|").split("|")]


def test_throughput_is_judged_against_the_fastest_peer_of_each_row() -> None:
    """Each throughput ratio divides the relay's figure by the best peer's in that row."""
    lines = targets_table(figures(relay_rate=1200, wsd_rate=1000, overhead_ms=1.5))
    assert row(lines, "throughput 200 B x1 vs the fastest peer")[1:] == [
        "1.20 (websocketd)",
        ">= 1.0x",
        "met",
    ]
    assert row(lines, "throughput 200 B x64 vs the fastest peer")[1:] == [
        "0.60 (websocat)",
        ">= 1.0x",
        "**not met**",
    ]
    assert row(lines, "streaming, 1 socket, vs the fastest peer")[1] == "0.90 (websocat)"
    assert row(lines, "streaming, all sockets at once, vs the fastest peer")[1] == (
        "0.80 (websocketd)"
    )


def test_round_trip_is_judged_against_the_lowest_peer() -> None:
    """For a latency the fastest peer is the one with the smallest figure."""
    lines = targets_table(figures(relay_rate=1200, wsd_rate=1000, overhead_ms=1.5))
    assert row(lines, "p50 round trip x1 vs the fastest peer")[1:] == [
        "4.00 (websocat)",
        "<= 1.25x",
        "**not met**",
    ]
    lowest = fastest_peer(figures(1, 1, 1), "rate_200B_x1", "p50_ms", higher_is_better=False)
    assert lowest == ("websocat", 0.05)


def test_relay_only_targets_compare_the_relay_with_itself() -> None:
    """Resume on/off and scrape on/off are ratios of two relay figures; the rest as before."""
    lines = targets_table(figures(relay_rate=1200, wsd_rate=1000, overhead_ms=1.5))
    assert row(lines, "resume profile on vs off, 200 B x64 throughput")[1:] == [
        "0.85",
        ">= 0.9x",
        "**not met**",
    ]
    assert row(lines, "resume profile on vs off, 200 B x64 p50 round trip")[1:] == [
        "1.05",
        "<= 1.1x",
        "met",
    ]
    assert row(lines, "/metrics scraped vs not, 200 B x64 throughput")[1:] == [
        "0.99",
        ">= 0.95x",
        "met",
    ]
    assert row(lines, "resume: connect's next attempt -> first replayed message, worst (ms)")[
        1:
    ] == ["40.00", "<= 100", "met"]
    assert row(lines, "1 MiB MB/s vs ceiling (4 in flight)")[1:] == ["0.90", ">= 0.9x", "met"]
    assert row(lines, "ticket check + spawn over agent start (ms)")[1] == "1.50"
    assert row(lines, "16 MiB lines carried both ways")[1:] == ["yes", "yes", "met"]


def test_failures_and_missing_figures_are_shown_not_hidden() -> None:
    """A peer's failure shows as 'fails (why)'; a peer not installed says so; a missing
    figure is 'not measured'."""
    found = figures(900, 1000, 6.0)
    found["acp-relay"]["idle_1000"] = {"error": "HTTP 503", "kib_per_connection": 1044.0}
    payload = {
        "machine": MACHINE,
        "plan": PLAN,
        "figures": found,
        "missing": {"acpremote": "could not install"},
    }
    text = markdown(payload)
    assert (
        "| CPU s per GB relayed (1 MiB, 4 in flight) | 1.30 | fails (timeout after 30 s) | "
        "fails (message of 1048576 B came back as 65536 B) | not installed | — |" in text
    )
    assert "| KiB per idle connection | — | <= 64 | not measured |" in text
    assert "| ticket check + spawn over agent start (ms) | 6.00 | <= 5 | **not met** |" in text
    assert "Not in this run: acpremote: could not install" in text
    assert "20,000 `session/update` notifications" in text


def test_relay_table_shows_resume_and_scrape_figures_side_by_side() -> None:
    """The relay-only table pairs off/on figures; a failed measurement says why."""
    found = figures(1000, 1000, 1.0)
    found["acp-relay"]["resume_gap"] = {"error": "TimeoutError: no replay"}
    lines = relay_table(found)
    assert row(lines, "messages/s, 200 B x64, resume profile off / on")[1:] == ["10,000", "8,500"]
    assert row(lines, "network back -> first replayed message ms, p50 / worst")[1:] == [
        "fails (TimeoutError: no replay)",
        "fails (TimeoutError: no replay)",
    ]
    assert relay_table({}) == []


def test_the_ticket_commands_exec_to_exit_is_a_start_up_row() -> None:
    """tests/bench/startup.py's rows reach the figures table: ``acp-relay ticket``'s exec to
    exit among them, by its median."""
    found = {"acp-relay": {"ticket_exec_to_exit": {"median_ms": 61.27, "min_ms": 58.0}}}
    lines = figures_table({"machine": MACHINE, "plan": PLAN, "figures": found})
    assert row(lines, "ticket: exec to exit ms (median)")[1:] == ["61.3", "—", "—", "—", "—"]


def test_rate_rows_show_every_servers_cpu_per_message() -> None:
    """The 200 B rows carry the CPU µs per message of each server that has it measured."""
    found = figures(1000, 1000, 1.0)
    found["acp-relay"]["rate_200B_x1"]["cpu_us_per_message"] = 31.25
    found["websocketd"]["rate_200B_x1"]["cpu_us_per_message"] = 12.5
    found["websocat"]["rate_200B_x64"]["cpu_us_per_message"] = 2.0
    lines = figures_table({"machine": MACHINE, "plan": PLAN, "figures": found})
    assert row(lines, "server CPU µs per message, 200 B, 1 in flight")[1:] == [
        "31.2", "12.5", "—", "—", "—"
    ]  # fmt: skip
    assert row(lines, "server CPU µs per message, 200 B, 64 in flight")[1:] == [
        "—", "—", "2.0", "—", "—"
    ]  # fmt: skip


def features(watched: float, history: float) -> dict[str, Any]:
    """The figures of tests/bench/features.py, ``watched`` the rate with 4 watchers."""
    return {
        "paths_text": {"rate": 60_000.0, "cpu_us_per_message": 6.5, "size": 320},
        "paths_tool": {"rate": 5_000.0, "cpu_us_per_message": 140.0, "size": 320},
        "watchers_0": {"rate": 100_000.0, "cpu_us_per_message": 6.0,
                       "clients_cpu_us_per_message": 6.0},
        "watchers_4": {"rate": watched, "cpu_us_per_message": 8.5,
                       "clients_cpu_us_per_message": 14.0},
        "watcher_memory_100": {"kib_per_watcher": 19.7},
        "history_off": {"peak_growth_kib": 388, "history_bytes": 0.0,
                        "rounds": [{"mb": 100.0}]},
        "history_on": {"peak_growth_kib": 2052, "history_bytes": history,
                       "rounds": [{"mb": 100.0}]},
    }  # fmt: skip


def test_feature_rows_pair_each_feature_off_and_on() -> None:
    """The paths, watchers, memory per watcher and flood rows reach the relay-only table,
    named by their counts and sizes; the memory per watcher is a row of one figure."""
    lines = relay_table({"acp-relay": features(watched=70_000.0, history=1_048_391.0)})
    assert row(lines, "streamed messages/s, 320 B, text / tool-call locations translated")[1:] == [
        "60,000",
        "5,000",
    ]
    assert row(lines, "relay CPU µs per controller message, no watcher / 4 watchers")[1:] == [
        "6.0",
        "8.5",
    ]
    assert row(lines, "KiB RSS per watcher (100 reading one connection)")[1:] == ["19.7", ""]
    assert row(lines, "relay RSS growth KiB at the peak of a 100 MB flood, sharing off / on")[
        1:
    ] == ["388", "2,052"]
    assert row(lines, "history bytes kept after the flood, sharing off / on")[1:] == [
        "0",
        "1,048,391",
    ]


@pytest.mark.parametrize(
    ("watched", "history", "verdicts"),
    [
        (80_000.0, 1_048_576.0, ["met", "met"]),
        (79_000.0, 1_048_577.0, ["**not met**", "**not met**"]),
    ],
)
def test_watchers_and_history_targets(watched: float, history: float, verdicts: list[str]) -> None:
    """4 watchers must leave the controller 0.8x its rate; the history kept stays within
    --watch-history (1 MiB): both met at the bound, not past it."""
    lines = targets_table({"acp-relay": features(watched, history)})
    assert row(lines, "controller's streaming rate, 4 watchers vs none")[3] == verdicts[0]
    assert (
        row(lines, "history kept under a flood, over --watch-history (1 MiB)")[3] == (verdicts[1])
    )


@pytest.mark.parametrize(
    ("name", "relay", "peer", "ratio"),
    [
        ("server CPU per streamed message, 1 socket, vs websocat", 8.0, 4.0, "2.00"),
        ("server CPU per message, 200 B x64, vs websocketd", 6.0, 6.0, "1.00"),
        ("server CPU per message, 200 B x64, vs websocat", 6.0, 3.0, "2.00"),
    ],
)
def test_cpu_targets_compare_the_relay_with_one_peer(
    name: str, relay: float, peer: float, ratio: str
) -> None:
    """The CPU targets of issue 30 divide the relay's CPU per message by one named peer's
    in the same run; met at the bound."""
    figures: dict[str, Any] = {
        "acp-relay": {"stream": {"cpu_ms_per_1000": relay},
                      "rate_200B_x64": {"cpu_us_per_message": relay}},
        "websocat": {"stream": {"cpu_ms_per_1000": peer},
                     "rate_200B_x64": {"cpu_us_per_message": peer}},
        "websocketd": {"rate_200B_x64": {"cpu_us_per_message": peer}},
    }  # fmt: skip
    got = row(targets_table(figures), name)
    bound = 2.0 if name.endswith("websocat") and "x64" in name else 1.0
    assert got[1] == ratio
    assert got[3] == ("met" if float(ratio) <= bound else "**not met**")


@pytest.mark.parametrize(("tool", "verdict"), [(26.0, "met"), (26.1, "**not met**")])
def test_a_translated_tool_call_may_cost_four_text_chunks(tool: float, verdict: str) -> None:
    """The relay's CPU per translated tool_call_update may be 4x a text chunk's (6.5 µs
    here): met at the bound, not past it."""
    figures = features(80_000.0, 1_048_576.0)
    figures["paths_tool"]["cpu_us_per_message"] = tool
    lines = targets_table({"acp-relay": figures})
    name = "relay CPU per streamed message, tool-call locations translated vs text"
    assert row(lines, name)[3] == verdict


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        (Check("a", 1.0, ">= 1", 1.0, True), "met"),
        (Check("a", 0.99, ">= 1", 1.0, True), "**not met**"),
        (Check("a", 1.25, "<= 1.25", 1.25, False), "met"),
        (Check("a", None, "<= 1", 1.0, False), "not measured"),
    ],
)
def test_verdict_is_met_at_the_bound(check: Check, expected: str) -> None:
    """A figure equal to its bound meets it, either way; no figure is 'not measured'."""
    assert verdict(check.value, check.bound, check.higher_is_better) == expected


@pytest.mark.parametrize(("cpu", "verdict"), [(7.5, "met"), (7.6, "**not met**")])
def test_the_relays_share_of_the_watchers_goal(cpu: float, verdict: str) -> None:
    """The relay's CPU per controller message with 4 watchers may be 1.25x its CPU without
    (6.0 µs here): met at the bound, not past it."""
    figures = features(80_000.0, 1_048_576.0)
    figures["watchers_4"]["cpu_us_per_message"] = cpu
    lines = targets_table({"acp-relay": figures})
    assert row(lines, "relay CPU per controller message, 4 watchers vs none")[3] == verdict
