"""``acp-relay chat audit``: the permission requests a chat bot kept, one record each.

Reads the bot's state file (the bot may be running: the file is in WAL mode) and prints
each permission request's audit record (:mod:`relay.chat.audit`), oldest first, as JSON
lines or CSV: when it was asked, where (a ``matrix.to`` link), the session, the tool
call, the options, the outcome, who decided and from where, and every tap. Needs no
Matrix library: an auditor's machine runs it with the base install.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Sequence

from relay.chat.audit import CSV_COLUMNS, AuditRecord, csv_row, record_json, since_time
from relay.config.errors import UsageError

FORMATS = ("jsonl", "csv")
STATE_ENV = "ACP_RELAY_STATE"


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(
        prog="acp-relay chat audit",
        allow_abbrev=False,
        description="Print the audit record of every permission request the chat bot kept "
        "in its state file: what was asked, where, the outcome, who decided, every tap.",
    )
    made.add_argument(
        "--state", metavar="FILE", default=None, help=f"the bot's state file (env {STATE_ENV})"
    )
    made.add_argument(
        "--since",
        metavar="DATE",
        default=None,
        help="only requests asked from this date on: 2026-12-01 or "
        "2026-12-01T09:30 (UTC unless it says)",
    )
    made.add_argument(
        "--format",
        choices=FORMATS,
        default="jsonl",
        help="jsonl (one JSON object per line, the default) or csv",
    )
    return made


def main(argv: Sequence[str]) -> int:
    """Run ``acp-relay chat audit ARGV``; the exit status."""
    args = parser().parse_args(list(argv))
    try:
        records = _records(args.state or os.environ.get(STATE_ENV), args.since)
    except UsageError as exc:
        print(f"acp-relay: {exc}", file=sys.stderr)
        return 2
    try:
        _print(records, args.format)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _records(path: str | None, since: str | None) -> list[AuditRecord]:
    from relay.client.chatbot.store import State, StateError

    if not path:
        raise UsageError(f"acp-relay chat audit needs --state FILE (or ${STATE_ENV})")
    if not os.path.isfile(path):
        raise UsageError(f"--state {path}: no such file (the bot's --state file)")
    try:
        start = since_time(since) if since is not None else None
    except ValueError as exc:
        raise UsageError(f"--since: {exc}") from None
    try:
        state = State(path)
    except StateError as exc:
        raise UsageError(str(exc)) from None
    try:
        return state.audit.records(start)
    finally:
        state.close()


def _print(records: list[AuditRecord], how: str) -> None:
    if how == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        writer.writerows(csv_row(record) for record in records)
        return
    for record in records:
        sys.stdout.write(json.dumps(record_json(record), ensure_ascii=False) + "\n")
