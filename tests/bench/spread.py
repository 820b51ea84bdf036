"""Several runs of the benchmark as ranges: per row and side (before and after a change, say)
the relay's figure, its ratio to the fastest peer of the same run, CPU per message for
every server, and each target judged in every run.

On a shared, noisy machine one run's verdict means little: a target is met only when
every run of a side meets it. Pure but for :func:`main`, which reads the runs' JSON
(``tests/bench/run.py``'s ``latest.json``, kept under other names):

    .venv/bin/python -m tests.bench.spread --side before B1.json B2.json B3.json \\
        --side after A1.json A2.json A3.json

A run may carry ``load`` (the 1-minute load average it started at,
:mod:`tests.bench.alternate` adds it); it is shown beside the run's date.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.bench.report import (
    RELAY,
    RELAY_ROWS,
    ROWS,
    SERVERS,
    RelayRow,
    Row,
    _get,
    _ratio,
    checks,
    fastest_peer,
    feature_rows,
    startup_rows,
)

Payload = dict[str, Any]
Sides = dict[str, list[Payload]]

# Rows where the smaller figure is the better one (for the ratio to the fastest peer).
LOWER_IS_BETTER = ("p50_ms", "p99_ms", "cpu_us_per_message", "cpu_ms_per_1000", "cpu_s_per_gb",
                   "median_ms", "kib_per_connection")  # fmt: skip
CPU_FIELDS = ("cpu_us_per_message", "cpu_ms_per_1000", "cpu_s_per_gb")


def span(values: Sequence[float | None], digits: int) -> str:
    """``low to high`` of the values measured (``—`` for none; one value when they agree at
    ``digits``), with how many runs failed to give one."""
    got = sorted(v for v in values if v is not None)
    missing = len(values) - len(got)
    if not got:
        return "—"
    low, high = f"{got[0]:,.{digits}f}", f"{got[-1]:,.{digits}f}"
    text = low if low == high else f"{low} to {high}"
    return f"{text} ({missing} failed)" if missing else text


def figure_span(runs: Sequence[Payload], server: str, key: str, field: str, digits: int) -> str:
    """:func:`span` of one server's figure over the runs; ``fails (why)`` when it failed in
    every run."""
    text = span([_get(run["figures"], server, key, field) for run in runs], digits)
    if text != "—":
        return text
    errors = [run["figures"].get(server, {}).get(key) for run in runs]
    whys = [got["error"] for got in errors if isinstance(got, dict) and got.get("error")]
    return f"fails ({whys[0]})" if whys else text


def ratio_to_fastest(figures: dict[str, Any], key: str, field: str) -> tuple[float, str] | None:
    """The relay's figure over the fastest peer's in this row of one run, and the peer."""
    best = fastest_peer(figures, key, field, field not in LOWER_IS_BETTER)
    value = None if best is None else _ratio(_get(figures, RELAY, key, field), best[1])
    return None if value is None or best is None else (value, best[0])


def ratio_span(runs: Sequence[Payload], key: str, field: str) -> str:
    found = [ratio_to_fastest(run["figures"], key, field) for run in runs]
    peers = sorted({got[1] for got in found if got is not None})
    text = span([None if got is None else got[0] for got in found], 2)
    return text if text == "—" else f"{text} ({', '.join(peers)})"


def _all_rows() -> list[Row]:
    return [*ROWS, *startup_rows()[0]]


def peers_table(sides: Sides) -> list[str]:
    """The relay's figure and its ratio to the fastest peer, per row and side."""
    head = "| figure | " + " | ".join(f"{side}: acp-relay | {side}: ÷ fastest peer"
                                      for side in sides) + " |"  # fmt: skip
    lines = [head, "|---" * (2 * len(sides) + 1) + "|"]
    for title, key, field, digits in _all_rows():
        if field in CPU_FIELDS:
            continue  # in cpu_table
        cells = []
        for runs in sides.values():
            cells.append(figure_span(runs, RELAY, key, field, digits))
            cells.append(ratio_span(runs, key, field))
        if any(cell != "—" for cell in cells):
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return lines


def cpu_table(sides: Sides) -> list[str]:
    """CPU per message of every server, per row: the relay per side, each other server over
    the runs of every side (they are the same programs in each)."""
    others = [server for server in SERVERS if server != RELAY]
    head = ["| figure | " + " | ".join(f"acp-relay, {side}" for side in sides) + " | "
            + " | ".join(others) + " |"]  # fmt: skip
    lines = [*head, "|---" * (len(sides) + len(others) + 1) + "|"]
    every = [run for runs in sides.values() for run in runs]
    for title, key, field, digits in _all_rows():
        if field not in CPU_FIELDS:
            continue
        cells = [figure_span(runs, RELAY, key, field, digits) for runs in sides.values()]
        cells += [figure_span(every, server, key, field, digits) for server in others]
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return lines


def _relay_rows(runs: Sequence[Payload]) -> list[RelayRow]:
    """The relay-alone rows, named after the first run that has the features' figures."""
    named: dict[str, Any] = next(
        (r["figures"] for r in runs if "paths_text" in r["figures"].get(RELAY, {})), {}
    )
    return [*RELAY_ROWS, *feature_rows(named)]


def relay_table(sides: Sides) -> list[str]:
    """The relay-alone rows (left / right figures), ranges per side."""
    every = [run for runs in sides.values() for run in runs]
    lines = ["| acp-relay alone | " + " | ".join(sides) + " |", "|---" * (len(sides) + 1) + "|"]
    for title, left, right, digits in _relay_rows(every):
        cells = []
        for runs in sides.values():
            a = span([_get(run["figures"], RELAY, *left) for run in runs], digits)
            b = "" if right is None else span([_get(r["figures"], RELAY, *right) for r in runs],
                                              digits)  # fmt: skip
            cells.append(a if right is None else f"{a} / {b}")
        if any(cell not in ("—", "— / —") for cell in cells):
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return lines


def met_count(runs: Sequence[Payload], name: str) -> tuple[list[float | None], int]:
    """A target's value in each run, and in how many runs it was met."""
    values: list[float | None] = []
    met = 0
    for run in runs:
        check = next((c for c in checks(run["figures"]) if c.name == name), None)
        value = None if check is None else check.value
        values.append(value)
        if check is not None and value is not None:
            met += value >= check.bound if check.higher_is_better else value <= check.bound
    return values, met


def judged(runs: Sequence[Payload], name: str) -> str:
    """``met`` only when every run meets the target; otherwise how many did."""
    values, met = met_count(runs, name)
    measured = sum(v is not None for v in values)
    if measured == 0:
        return "not measured"
    if met == len(runs):
        return "met in every run"
    return f"**not met** ({met} of {len(runs)} runs)" if met else "**not met** (no run)"


def targets_table(sides: Sides) -> list[str]:
    """Each target: its value's range and verdict per side."""
    every = [run for runs in sides.values() for run in runs]
    names: list[tuple[str, str]] = []
    for run in every:
        for check in checks(run["figures"]):
            if (check.name, check.goal) not in names:
                names.append((check.name, check.goal))
    head = "| target | goal | " + " | ".join(f"{side} | {side}: verdict" for side in sides) + " |"
    lines = [head, "|---" * (2 * len(sides) + 2) + "|"]
    for name, goal in names:
        cells = []
        for runs in sides.values():
            values, _ = met_count(runs, name)
            cells += [span(values, 2), judged(runs, name)]
        if any(cell != "—" for cell in cells[::2]):
            lines.append(f"| {name} | {goal} | " + " | ".join(cells) + " |")
    return lines


def runs_table(sides: Sides) -> list[str]:
    lines = ["| side | run | started | 1-minute load at start |", "|---|---|---|---|"]
    for side, runs in sides.items():
        for number, run in enumerate(runs, 1):
            load = run.get("load", {}).get("at_start")
            shown = "—" if load is None else f"{load:.2f}"
            lines.append(f"| {side} | {number} | {run['machine']['date']} | {shown} |")
    return lines


def markdown(sides: Sides) -> str:
    """The whole comparison."""
    first = next(run for runs in sides.values() for run in runs)["machine"]
    counts = ", ".join(f"{len(runs)} {side}" for side, runs in sides.items())
    head = (f"Runs ({counts}) on {first['cpu']}, {first['cores']} cores, Python "
            f"{first['python']}, Linux {first['kernel']}; each cell is the lowest to the "
            "highest figure over a side's runs.")  # fmt: skip
    tables: list[Callable[[Sides], list[str]]] = [
        runs_table,
        peers_table,
        cpu_table,
        relay_table,
        targets_table,
    ]
    parts = [head, ""]
    for table in tables:
        parts += [*table(sides), ""]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--side", nargs="+", action="append", required=True, metavar=("NAME", "RUN"),
        help="a side's name, then its runs' JSON files",
    )  # fmt: skip
    args = parser.parse_args(argv)
    sides: Sides = {}
    for name, *files in args.side:
        if not files:
            parser.error(f"--side {name}: no run given")
        sides[name] = [json.loads(Path(file).read_text()) for file in files]
    print(markdown(sides))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
