"""The benchmark's markdown report: figures side by side, ratios pair by pair, targets.

Pure: takes the run's JSON payload, returns text. "The fastest peer" of a row is the
best of websocketd, websocat and acpremote in that row of the same run (the ceiling is
the load generator's, not a peer). A peer that failed at a row shows ``fails (why)``;
one that could not be installed, ``not installed``; a figure not measured, ``—``.

``tests/bench/startup.py`` (written apart) may add rows and targets: its ``ROWS``
(``(title, key, field, digits)`` like :data:`ROWS`) and ``targets(figures)`` (a list of
:class:`Check`) are picked up by :func:`startup_rows` when the module is there.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

RELAY = "acp-relay"
MIB = 1 << 20
PEERS = ("websocketd", "websocat", "acpremote")
SERVERS = (RELAY, *PEERS, "ceiling")

Row = tuple[str, str, str, int]  # title, figure key, field, digits


@dataclass(frozen=True)
class Check:
    """One target: the measured value, the goal as shown, the bound, which way is better."""

    name: str
    value: float | None
    goal: str
    bound: float
    higher_is_better: bool
    shown: str | None = None  # the measured cell, when more than the number


def _get(figures: dict[str, Any], server: str, key: str, field: str) -> float | None:
    """A figure, or None: not measured, or its measurement failed."""
    value = figures.get(server, {}).get(key, {})
    got = value.get(field) if isinstance(value, dict) and not value.get("error") else None
    return float(got) if isinstance(got, int | float) else None


def _cell(payload: dict[str, Any], server: str, key: str, field: str, digits: int) -> str:
    figures = payload["figures"]
    if server in payload.get("missing", {}):
        return "not installed"
    value = figures.get(server, {}).get(key)
    if value is None:
        start = figures.get(server, {}).get("start")
        return f"fails ({start['error']})" if isinstance(start, dict) else "—"
    if isinstance(value, dict) and value.get("error"):
        return f"fails ({value['error']})"
    number = _get(figures, server, key, field)
    return "—" if number is None else f"{number:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def verdict(value: float | None, bound: float, higher_is_better: bool) -> str:
    if value is None:
        return "not measured"
    met = value >= bound if higher_is_better else value <= bound
    return "met" if met else "**not met**"


ROWS: tuple[Row, ...] = (
    ("messages/s, 200 B, 1 in flight", "rate_200B_x1", "rate", 0),
    ("messages/s, 200 B, 64 in flight", "rate_200B_x64", "rate", 0),
    ("round trip p50 ms, 1 in flight", "rate_200B_x1", "p50_ms", 3),
    ("round trip p99 ms, 1 in flight", "rate_200B_x1", "p99_ms", 3),
    ("round trip p50 ms, 64 in flight", "rate_200B_x64", "p50_ms", 3),
    ("server CPU µs per message, 200 B, 1 in flight", "rate_200B_x1", "cpu_us_per_message", 1),
    ("server CPU µs per message, 200 B, 64 in flight", "rate_200B_x64", "cpu_us_per_message", 1),
    ("streamed messages/s, 1 socket", "stream", "rate", 0),
    ("server CPU ms per 1,000 streamed messages, 1 socket", "stream", "cpu_ms_per_1000", 1),
    ("streamed messages/s, all sockets at once", "aggregate", "rate", 0),
    ("server CPU ms per 1,000 streamed messages, all at once", "aggregate", "cpu_ms_per_1000", 1),
    ("MB/s, 32 KiB messages, 1 in flight", "bulk_32KiB_x1", "mb_per_s", 1),
    ("MB/s, 32 KiB messages, 8 in flight", "bulk_32KiB_x8", "mb_per_s", 1),
    ("MB/s, 1 MiB messages, 1 in flight", "bulk_1MiB_x1", "mb_per_s", 1),
    ("MB/s, 1 MiB messages, 4 in flight", "bulk_1MiB_x4", "mb_per_s", 1),
    ("MB/s, 16 MiB messages, 1 in flight", "bulk_16MiB_x1", "mb_per_s", 1),
    ("MB/s, 16 MiB messages, 2 in flight", "bulk_16MiB_x2", "mb_per_s", 1),
    ("CPU s per GB relayed (1 MiB, 4 in flight)", "bulk_1MiB_x4", "cpu_s_per_gb", 2),
    ("connect to first agent byte p50 ms", "first_byte", "p50_ms", 2),
)


def startup_rows() -> tuple[Sequence[Row], Callable[[dict[str, Any]], list[Check]]]:
    """The rows and targets of tests/bench/startup.py, when it is there."""
    try:
        startup = importlib.import_module("tests.bench.startup")
    except ModuleNotFoundError as exc:
        if exc.name != "tests.bench.startup":
            raise
        return (), lambda _figures: []
    return getattr(startup, "ROWS", ()), getattr(startup, "targets", lambda _figures: [])


def _numbered_key(figures: dict[str, Any], prefix: str, skip: str = "") -> str | None:
    """The relay's first figure named ``prefix`` and a count (``idle_1000``), ``skip`` aside."""
    keys = [
        k for k in figures.get(RELAY, {})
        if k.startswith(prefix) and k.removeprefix(prefix).isdigit() and k != skip
    ]  # fmt: skip
    return keys[0] if keys else None


def _idle_key(figures: dict[str, Any]) -> str | None:
    return _numbered_key(figures, "idle_")


def _watched_key(figures: dict[str, Any]) -> str:
    """The watchers row with watchers attached (``watchers_4``)."""
    return _numbered_key(figures, "watchers_", skip="watchers_0") or "watchers_4"


def _memory_key(figures: dict[str, Any]) -> str:
    return _numbered_key(figures, "watcher_memory_") or "watcher_memory"


def figures_table(payload: dict[str, Any]) -> list[str]:
    figures = payload["figures"]
    lines = ["| figure | " + " | ".join(SERVERS) + " |", "|---" * (len(SERVERS) + 1) + "|"]
    rows = [*ROWS, *startup_rows()[0]]
    idle = _idle_key(figures)
    if idle:
        count = idle.removeprefix("idle_")
        rows.append((f"KiB RSS per idle connection ({count} open)", idle, "kib_per_connection", 1))
    for title, key, field, digits in rows:
        cells = [_cell(payload, s, key, field, digits) for s in SERVERS]
        if set(cells) != {"—"}:
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return lines


def fastest_peer(
    figures: dict[str, Any], key: str, field: str, higher_is_better: bool = True
) -> tuple[str, float] | None:
    """The peer with the best figure in this row, and the figure."""
    found = [(p, v) for p in PEERS if (v := _get(figures, p, key, field)) is not None]
    if not found:
        return None
    pick = max if higher_is_better else min
    return pick(found, key=lambda pair: pair[1])


def _vs_fastest(
    figures: dict[str, Any], name: str, key: str, field: str, goal: str, bound: float,
    higher_is_better: bool = True,
) -> Check:  # fmt: skip
    best = fastest_peer(figures, key, field, higher_is_better)
    mine = _get(figures, RELAY, key, field)
    if best is None:
        return Check(name, None, goal, bound, higher_is_better)
    value = _ratio(mine, best[1])
    shown = None if value is None else f"{value:.2f} ({best[0]})"
    return Check(name, value, goal, bound, higher_is_better, shown)


def _cpu_vs(
    figures: dict[str, Any], name: str, key: str, field: str, peer: str, goal: str,
    bound: float,
) -> Check:  # fmt: skip
    """The relay's CPU per message in a row over ``peer``'s in the same run (lower is better)."""
    return Check(name, _ratio(_get(figures, RELAY, key, field), _get(figures, peer, key, field)),
                 goal, bound, False)  # fmt: skip


def _count_in(key: str) -> str:
    """The count a numbered key ends with (``watchers_4``: ``4``)."""
    return key.rsplit("_", 1)[-1]


def _relay_ratio(figures: dict[str, Any], key: str, other: str, field: str) -> float | None:
    return _ratio(_get(figures, RELAY, key, field), _get(figures, RELAY, other, field))


def checks(figures: dict[str, Any]) -> list[Check]:
    """Every target of the run, in the order of the report."""
    own = _get(figures, "agent", "own_start", "p50_ms")
    first = _get(figures, RELAY, "first_byte", "p50_ms")
    idle = _idle_key(figures) or "idle"
    return [
        _vs_fastest(figures, "throughput 200 B x1 vs the fastest peer", "rate_200B_x1", "rate",
                    ">= 1.0x", 1.0),
        _vs_fastest(figures, "throughput 200 B x64 vs the fastest peer", "rate_200B_x64",
                    "rate", ">= 1.0x", 1.0),
        _vs_fastest(figures, "streaming, 1 socket, vs the fastest peer", "stream", "rate",
                    ">= 1.0x", 1.0),
        _vs_fastest(figures, "streaming, all sockets at once, vs the fastest peer",
                    "aggregate", "rate", ">= 1.0x", 1.0),
        _vs_fastest(figures, "p50 round trip x1 vs the fastest peer", "rate_200B_x1", "p50_ms",
                    "<= 1.25x", 1.25, higher_is_better=False),
        # Issue 30: what the relay costs per message, against peers in the same run.
        _cpu_vs(figures, "server CPU per streamed message, 1 socket, vs websocat", "stream",
                "cpu_ms_per_1000", "websocat", "<= 1.0x", 1.0),
        _cpu_vs(figures, "server CPU per streamed message, all sockets, vs websocat",
                "aggregate", "cpu_ms_per_1000", "websocat", "<= 1.0x", 1.0),
        _cpu_vs(figures, "server CPU per message, 200 B x64, vs websocketd", "rate_200B_x64",
                "cpu_us_per_message", "websocketd", "<= 1.0x", 1.0),
        _cpu_vs(figures, "server CPU per message, 200 B x64, vs websocat", "rate_200B_x64",
                "cpu_us_per_message", "websocat", "<= 2.0x", 2.0),
        Check("relay CPU per streamed message, tool-call locations translated vs text",
              _relay_ratio(figures, "paths_tool", "paths_text", "cpu_us_per_message"),
              "<= 4.0x", 4.0, False),
        Check("1 MiB MB/s vs ceiling (4 in flight)",
              _ratio(_get(figures, RELAY, "bulk_1MiB_x4", "mb_per_s"),
                     _get(figures, "ceiling", "bulk_1MiB_x4", "mb_per_s")), ">= 0.9x", 0.9, True),
        Check("KiB per idle connection", _get(figures, RELAY, idle, "kib_per_connection"),
              "<= 64", 64.0, False),
        Check("ticket check + spawn over agent start (ms)",
              None if own is None or first is None else first - own, "<= 5", 5.0, False),
        Check("resume profile on vs off, 200 B x64 throughput",
              _relay_ratio(figures, "resume_on_200B_x64", "resume_off_200B_x64", "rate"),
              ">= 0.9x", 0.9, True),
        Check("resume profile on vs off, 200 B x64 p50 round trip",
              _relay_ratio(figures, "resume_on_200B_x64", "resume_off_200B_x64", "p50_ms"),
              "<= 1.1x", 1.1, False),
        Check("resume: connect's next attempt -> first replayed message, worst (ms)",
              _get(figures, RELAY, "resume_gap", "resume_max_ms"), "<= 100", 100.0, False),
        Check("/metrics scraped vs not, 200 B x64 throughput",
              _relay_ratio(figures, "scrape_on_200B_x64", "scrape_off_200B_x64", "rate"),
              ">= 0.95x", 0.95, True),
        Check(f"controller's streaming rate, {_count_in(_watched_key(figures))} watchers vs "
              "none", _relay_ratio(figures, _watched_key(figures), "watchers_0", "rate"),
              ">= 0.8x", 0.8, True),
        # The relay's own share of the goal above: with a core to itself, its rate would
        # fall by no more than its CPU per message rose (clients share the cores here).
        Check(f"relay CPU per controller message, {_count_in(_watched_key(figures))} "
              "watchers vs none", _relay_ratio(figures, _watched_key(figures), "watchers_0",
                                                "cpu_us_per_message"), "<= 1.25x", 1.25, False),
        Check("history kept under a flood, over --watch-history (1 MiB)",
              _ratio(_get(figures, RELAY, "history_on", "history_bytes"), float(MIB)),
              "<= 1.0x", 1.0, False),
        *startup_rows()[1](figures),
    ]  # fmt: skip


def targets_table(figures: dict[str, Any]) -> list[str]:
    lines = ["| target | measured | goal | verdict |", "|---|---|---|---|"]
    for check in checks(figures):
        shown = check.shown or ("—" if check.value is None else f"{check.value:.2f}")
        lines.append(f"| {check.name} | {shown} | {check.goal} | "
                     f"{verdict(check.value, check.bound, check.higher_is_better)} |")  # fmt: skip
    carried = "error" not in figures.get(RELAY, {}).get("bulk_16MiB_x2", {"error": "missing"})
    lines.append(f"| 16 MiB lines carried both ways | {'yes' if carried else 'no'} | yes | "
                 f"{'met' if carried else '**not met**'} |")  # fmt: skip
    return lines


def _ms(figures: dict[str, Any], key: str, field: str, digits: int = 1) -> str:
    value = figures.get(RELAY, {}).get(key)
    if isinstance(value, dict) and value.get("error"):
        return f"fails ({value['error']})"
    number = _get(figures, RELAY, key, field)
    return "—" if number is None else f"{number:,.{digits}f}"


# The rows only the relay has: (title, (key, field) of the left cell, of the right or None
# for a row of one figure, digits).
RelayRow = tuple[str, tuple[str, str], tuple[str, str] | None, int]
RELAY_ROWS: tuple[RelayRow, ...] = (
    ("messages/s, 200 B x64, resume profile off / on",
     ("resume_off_200B_x64", "rate"), ("resume_on_200B_x64", "rate"), 0),
    ("round trip p50 ms, 200 B x64, resume profile off / on",
     ("resume_off_200B_x64", "p50_ms"), ("resume_on_200B_x64", "p50_ms"), 3),
    ("relay CPU µs per message, 200 B x64, resume profile off / on",
     ("resume_off_200B_x64", "cpu_us_per_message"),
     ("resume_on_200B_x64", "cpu_us_per_message"), 1),
    ("round trip p50 ms, 200 B x1, resume profile off / on",
     ("resume_off_200B_x1", "p50_ms"), ("resume_on_200B_x1", "p50_ms"), 3),
    ("network back -> first replayed message ms, p50 / worst",
     ("resume_gap", "back_to_first_p50_ms"), ("resume_gap", "back_to_first_max_ms"), 1),
    ("of which connect's backoff wait ms, p50 / worst",
     ("resume_gap", "backoff_wait_p50_ms"), ("resume_gap", "backoff_wait_max_ms"), 1),
    ("of which the resume itself ms, p50 / worst",
     ("resume_gap", "resume_p50_ms"), ("resume_gap", "resume_max_ms"), 1),
    ("messages/s, 200 B x64, without / with a /metrics scrape loop",
     ("scrape_off_200B_x64", "rate"), ("scrape_on_200B_x64", "rate"), 0),
    ("relay CPU µs per message, 200 B x64, without / with the scrape loop",
     ("scrape_off_200B_x64", "cpu_us_per_message"),
     ("scrape_on_200B_x64", "cpu_us_per_message"), 1),
)  # fmt: skip


def feature_rows(figures: dict[str, Any]) -> tuple[RelayRow, ...]:
    """The rows of tests/bench/features.py: tool-call locations translated, watchers, the
    memory per watcher and the history under a flood (keys named by their counts)."""
    watched, memory = _watched_key(figures), _memory_key(figures)
    count, held = _count_in(watched), _count_in(memory)
    text = figures.get(RELAY, {}).get("paths_text", {})
    size = text.get("size", "?") if isinstance(text, dict) else "?"
    flood = figures.get(RELAY, {}).get("history_on", {})
    rounds = flood.get("rounds") if isinstance(flood, dict) else None
    flooded = rounds[0].get("mb") if rounds and isinstance(rounds[0], dict) else None
    mb = f"{flooded:,.0f} MB" if isinstance(flooded, int | float) else "lines"
    return (
        (f"streamed messages/s, {size} B, text / tool-call locations translated",
         ("paths_text", "rate"), ("paths_tool", "rate"), 0),
        ("relay CPU µs per streamed message, text / tool-call locations translated",
         ("paths_text", "cpu_us_per_message"), ("paths_tool", "cpu_us_per_message"), 1),
        (f"controller's streamed messages/s, no watcher / {count} watchers",
         ("watchers_0", "rate"), (watched, "rate"), 0),
        (f"relay CPU µs per controller message, no watcher / {count} watchers",
         ("watchers_0", "cpu_us_per_message"), (watched, "cpu_us_per_message"), 1),
        (f"load generator CPU µs per controller message, no watcher / {count} watchers",
         ("watchers_0", "clients_cpu_us_per_message"),
         (watched, "clients_cpu_us_per_message"), 1),
        (f"KiB RSS per watcher ({held} reading one connection)",
         (memory, "kib_per_watcher"), None, 1),
        (f"relay RSS growth KiB at the peak of a {mb} flood, sharing off / on",
         ("history_off", "peak_growth_kib"), ("history_on", "peak_growth_kib"), 0),
        ("history bytes kept after the flood, sharing off / on",
         ("history_off", "history_bytes"), ("history_on", "history_bytes"), 0),
    )  # fmt: skip


def relay_table(figures: dict[str, Any]) -> list[str]:
    """The figures only the relay has: the resume profile, the /metrics scrape loop, and
    the features' rows (:func:`feature_rows`)."""
    rows = [
        (title, _ms(figures, *left, digits),
         "" if right is None else _ms(figures, *right, digits))
        for title, left, right, digits in (*RELAY_ROWS, *feature_rows(figures))
    ]  # fmt: skip
    lines = ["| acp-relay alone | | |", "|---|---|---|"]
    for title, a, b in rows:
        if a != "—" or b not in ("—", ""):
            lines.append(f"| {title} | {a} | {b} |")
    return lines if len(lines) > 2 else []


def _count(plan: dict[str, Any], key: str) -> str:
    value = plan.get(key)
    return f"{value:,}" if isinstance(value, int) else "?"


def markdown(payload: dict[str, Any]) -> str:
    """The whole report."""
    machine = payload["machine"]
    plan = payload.get("plan", {})
    head = (
        f"Measured {machine['date']} on {machine['cpu']}, {machine['cores']} cores, "
        f"Python {machine['python']}, Linux {machine['kernel']}. Agent: `cat`; for the "
        f"streaming rows `streamer.py`, one prompt answered by "
        f"{_count(plan, 'stream_updates')} `session/update` notifications of 200 B "
        f"(all at once: {_count(plan, 'aggregate_sockets')} sockets, "
        f"{_count(plan, 'aggregate_updates')} each)."
    )
    figures = payload["figures"]
    own = _get(figures, "agent", "own_start", "p50_ms")
    parts = [head, "", *figures_table(payload), ""]
    if own:
        parts += [f"The agent alone starts and prints its first line in {own:.2f} ms (p50).", ""]
    missing = payload.get("missing", {})
    if missing:
        parts += ["Not in this run: " + "; ".join(f"{k}: {v}" for k, v in missing.items()), ""]
    relay_only = relay_table(figures)
    if relay_only:
        parts += [*relay_only, ""]
    parts += [*targets_table(figures), ""]
    return "\n".join(parts)
