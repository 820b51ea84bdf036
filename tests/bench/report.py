"""The benchmark's markdown report: figures side by side, ratios pair by pair, targets.

Pure: takes the run's JSON payload, returns text.
"""

from __future__ import annotations

from typing import Any

SERVERS = ("acp-relay", "websocketd", "ceiling")


def _get(figures: dict[str, Any], server: str, key: str, field: str) -> float | None:
    value = figures.get(server, {}).get(key, {})
    got = value.get(field) if isinstance(value, dict) else None
    return float(got) if isinstance(got, int | float) else None


def _cell(figures: dict[str, Any], server: str, key: str, field: str, digits: int) -> str:
    value = figures.get(server, {}).get(key)
    if value is None:
        return "—"
    if isinstance(value, dict) and value.get("error"):
        return f"fails ({value['error']})"
    number = _get(figures, server, key, field)
    return "—" if number is None else f"{number:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _verdict(value: float | None, target: float, higher_is_better: bool) -> str:
    if value is None:
        return "not measured"
    met = value >= target if higher_is_better else value <= target
    return "met" if met else "**not met**"


ROWS = (
    ("messages/s, 200 B, 1 in flight", "rate_200B_x1", "rate", 0),
    ("messages/s, 200 B, 64 in flight", "rate_200B_x64", "rate", 0),
    ("round trip p50 ms, 1 in flight", "rate_200B_x1", "p50_ms", 3),
    ("round trip p99 ms, 1 in flight", "rate_200B_x1", "p99_ms", 3),
    ("round trip p50 ms, 64 in flight", "rate_200B_x64", "p50_ms", 3),
    ("MB/s, 32 KiB messages, 1 in flight", "bulk_32KiB_x1", "mb_per_s", 1),
    ("MB/s, 32 KiB messages, 8 in flight", "bulk_32KiB_x8", "mb_per_s", 1),
    ("MB/s, 1 MiB messages, 1 in flight", "bulk_1MiB_x1", "mb_per_s", 1),
    ("MB/s, 1 MiB messages, 4 in flight", "bulk_1MiB_x4", "mb_per_s", 1),
    ("MB/s, 16 MiB messages, 1 in flight", "bulk_16MiB_x1", "mb_per_s", 1),
    ("MB/s, 16 MiB messages, 2 in flight", "bulk_16MiB_x2", "mb_per_s", 1),
    ("CPU s per GB relayed (1 MiB, 4 in flight)", "bulk_1MiB_x4", "cpu_s_per_gb", 2),
    ("connect to first agent byte p50 ms", "first_byte", "p50_ms", 2),
)


def _idle_key(figures: dict[str, Any]) -> str | None:
    keys = [k for k in figures.get("acp-relay", {}) if k.startswith("idle_")]
    return keys[0] if keys else None


def figures_table(figures: dict[str, Any]) -> list[str]:
    lines = ["| figure | " + " | ".join(SERVERS) + " |", "|---" * (len(SERVERS) + 1) + "|"]
    rows = list(ROWS)
    idle = _idle_key(figures)
    if idle:
        count = idle.removeprefix("idle_")
        rows.append((f"KiB RSS per idle connection ({count} open)", idle, "kib_per_connection", 1))
    for title, key, field, digits in rows:
        cells = [_cell(figures, s, key, field, digits) for s in SERVERS]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return lines


def targets_table(figures: dict[str, Any]) -> list[str]:
    relay = "acp-relay"

    def ratio(key: str, field: str, other: str) -> float | None:
        return _ratio(_get(figures, relay, key, field), _get(figures, other, key, field))

    own = _get(figures, "agent", "own_start", "p50_ms")
    first = _get(figures, relay, "first_byte", "p50_ms")
    overhead = None if own is None or first is None else first - own
    idle = _idle_key(figures) or "idle"
    checks = [
        ("throughput 200 B x1 vs websocketd", ratio("rate_200B_x1", "rate", "websocketd"),
         ">= 1.0x", 1.0, True),
        ("throughput 200 B x64 vs websocketd", ratio("rate_200B_x64", "rate", "websocketd"),
         ">= 1.0x", 1.0, True),
        ("p50 round trip vs websocketd", ratio("rate_200B_x1", "p50_ms", "websocketd"),
         "<= 1.25x", 1.25, False),
        ("1 MiB MB/s vs ceiling (4 in flight)", ratio("bulk_1MiB_x4", "mb_per_s", "ceiling"),
         ">= 0.9x", 0.9, True),
        ("KiB per idle connection", _get(figures, relay, idle, "kib_per_connection"),
         "<= 64", 64.0, False),
        ("ticket check + spawn over agent start (ms)", overhead, "<= 5", 5.0, False),
    ]  # fmt: skip
    lines = ["| target | measured | goal | verdict |", "|---|---|---|---|"]
    for name, value, goal, target, higher in checks:
        shown = "—" if value is None else f"{value:.2f}"
        lines.append(f"| {name} | {shown} | {goal} | {_verdict(value, target, higher)} |")
    carried = "error" not in figures.get(relay, {}).get("bulk_16MiB_x2", {"error": "missing"})
    lines.append(f"| 16 MiB lines carried both ways | {'yes' if carried else 'no'} | yes | "
                 f"{'met' if carried else '**not met**'} |")  # fmt: skip
    return lines


def markdown(payload: dict[str, Any]) -> str:
    """The whole report."""
    machine = payload["machine"]
    head = (
        f"Measured {machine['date']} on {machine['cpu']}, {machine['cores']} cores, "
        f"Python {machine['python']}, Linux {machine['kernel']}. Agent: `cat`."
    )
    figures = payload["figures"]
    own = _get(figures, "agent", "own_start", "p50_ms")
    note = f"The agent alone starts and prints its first line in {own:.2f} ms (p50)." if own else ""
    parts = [head, "", *figures_table(figures), "", note, "", *targets_table(figures), ""]
    return "\n".join(parts)
