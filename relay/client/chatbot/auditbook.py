"""The audit's records in the bot's state file: one per permission request, from its asking
to its outcome, kept ``--audit-retention`` days apart from the threads' own pruning.

I/O over the state file's ``audit`` table (:mod:`relay.client.chatbot.schema`); the
record itself is :mod:`relay.chat.audit`'s, kept as its JSON form.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from relay.chat.audit import AuditRecord, record_json, record_of


class AuditBook:
    """The ``audit`` table of an open state file."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def asked(self, record: AuditRecord) -> None:
        """A request's first record (kept as it was when asked again after a restart)."""
        self.db.execute(
            "INSERT OR IGNORE INTO audit VALUES (?, ?, ?)",
            (record.event_id, record.asked_at, json.dumps(record_json(record))),
        )

    def of(self, event_id: str) -> AuditRecord | None:
        row = self.db.execute("SELECT record FROM audit WHERE event_id = ?", (event_id,))
        found = row.fetchone()
        return None if found is None else record_of(json.loads(found[0]))

    def change(self, event_id: str, change: Callable[[AuditRecord], AuditRecord]) -> None:
        """The request's record changed by ``change`` (a tap, its decision)."""
        with self.db:
            self.db.execute("BEGIN")
            record = self.of(event_id)
            if record is not None:
                self.db.execute(
                    "UPDATE audit SET record = ? WHERE event_id = ?",
                    (json.dumps(record_json(change(record))), event_id),
                )

    def records(self, since: float | None = None) -> list[AuditRecord]:
        """Every record asked at ``since`` or later, oldest first."""
        rows = self.db.execute(
            "SELECT record FROM audit WHERE asked_at >= ? ORDER BY asked_at, rowid",
            (since if since is not None else float("-inf"),),
        )
        return [record_of(json.loads(text)) for (text,) in rows]

    def prune(self, before: float) -> int:
        """Forget the records of requests asked before ``before``; how many."""
        return self.db.execute("DELETE FROM audit WHERE asked_at < ?", (before,)).rowcount
