"""The bot's state file: SQLite (the standard library's), mode 0600, as it holds secrets.

What survives a restart: the Matrix sync position and the events already handled (none
is handled twice); each thread (its room, its relay connection, the connection's resume
secret, what was sent and received on it, the messages that show it) and the permission
requests pending in it with their messages; the lines sent to an agent that the relay
may not have yet. The resume secrets are what would let someone else take a connection
over: the file is created 0600 and must stay readable by the bot's user alone.

Writes are small and few (a prompt, an answer, a checkpoint per round of edits), in
WAL mode with ``synchronous=NORMAL``: a killed bot loses nothing committed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS handled (event_id TEXT PRIMARY KEY, at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS threads (
    root TEXT PRIMARY KEY, room TEXT NOT NULL, kind TEXT NOT NULL, url TEXT NOT NULL,
    connection TEXT, secret TEXT, grace REAL, sent INTEGER NOT NULL DEFAULT 0,
    received INTEGER NOT NULL DEFAULT 0, view TEXT, ended INTEGER NOT NULL DEFAULT 0,
    opened_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS slots (
    root TEXT NOT NULL, slot TEXT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (root, slot));
CREATE TABLE IF NOT EXISTS requests (
    root TEXT NOT NULL, event_id TEXT NOT NULL PRIMARY KEY, request TEXT NOT NULL,
    decided TEXT);
CREATE TABLE IF NOT EXISTS outbox (
    root TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (root, seq));
"""
MAX_HANDLED = 20_000  # event ids remembered (the oldest forgotten: sync never goes that far back)


class StateError(Exception):
    """The state file cannot be used (why, and the fix)."""


class ThreadKind(StrEnum):
    """What a thread of the bot's carries: a session it controls, or one it watches."""

    SESSION = "session"
    WATCH = "watch"


@dataclass
class ThreadRow:
    """One thread as kept: where it is, its connection, and where the link stood."""

    root: str
    room: str
    kind: ThreadKind
    url: str
    connection: str | None
    secret: str | None
    grace: float | None
    sent: int  # the last line the relay may have: kept lines are sent after the checkpoint
    received: int
    view: dict[str, Any] | None
    ended: bool


class State:
    """The state file, open."""

    def __init__(self, path: str) -> None:
        self.path = path
        _create_private(path)
        try:
            self.db = sqlite3.connect(path, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StateError(f"cannot use --state {path}: {exc}") from None

    def close(self) -> None:
        self.db.close()

    # -- sync --------------------------------------------------------------------------------

    def sync_token(self) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'since'").fetchone()
        return None if row is None else str(row[0])

    def save_sync_token(self, token: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('since', ?)", (token,))

    def first_handling(self, event_id: str, at: int) -> bool:
        """Note ``event_id`` as handled; False when it already was (do nothing)."""
        done = self.db.execute("INSERT OR IGNORE INTO handled VALUES (?, ?)", (event_id, at))
        return done.rowcount == 1

    def forget_old_events(self) -> None:
        self.db.execute(
            "DELETE FROM handled WHERE event_id NOT IN "
            "(SELECT event_id FROM handled ORDER BY at DESC, rowid DESC LIMIT ?)",
            (MAX_HANDLED,),
        )

    # -- threads -------------------------------------------------------------------------------

    def add_thread(self, root: str, room: str, kind: ThreadKind, url: str, at: float) -> None:
        self.db.execute(
            "INSERT OR IGNORE INTO threads (root, room, kind, url, opened_at) VALUES (?,?,?,?,?)",
            (root, room, kind, url, at),
        )

    def connected(self, root: str, connection: str, secret: str, grace: float) -> None:
        self.db.execute(
            "UPDATE threads SET connection = ?, secret = ?, grace = ?, sent = 0, received = 0 "
            "WHERE root = ?",
            (connection, secret, grace, root),
        )

    def set_url(self, root: str, url: str) -> None:
        """The relay this thread's connection is on (--connect-command's box)."""
        self.db.execute("UPDATE threads SET url = ? WHERE root = ?", (url, root))

    def checkpoint(
        self, root: str, sent: int, received: int, acked: int, view: dict[str, Any]
    ) -> None:
        """Where the link stands and what the thread shows; lines the relay has are dropped."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "UPDATE threads SET sent = ?, received = ?, view = ? WHERE root = ?",
                (sent, received, json.dumps(view), root),
            )
            self.db.execute("DELETE FROM outbox WHERE root = ? AND seq <= ?", (root, acked))

    def end_thread(self, root: str) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("UPDATE threads SET ended = 1, secret = NULL WHERE root = ?", (root,))
            self.db.execute("DELETE FROM outbox WHERE root = ?", (root,))
            self.db.execute("DELETE FROM slots WHERE root = ?", (root,))

    def ended_thread(self, root: str) -> bool:
        """Whether ``root`` is a thread this bot ran, whose session has ended."""
        row = self.db.execute("SELECT 1 FROM threads WHERE root = ? AND ended = 1", (root,))
        return row.fetchone() is not None

    def live_threads(self) -> list[ThreadRow]:
        rows = self.db.execute(
            "SELECT root, room, kind, url, connection, secret, grace, "
            "MAX(sent, COALESCE((SELECT MAX(seq) FROM outbox o WHERE o.root = t.root), 0)), "
            "received, view, ended FROM threads t WHERE ended = 0 ORDER BY opened_at"
        ).fetchall()
        return [
            ThreadRow(
                r[0],
                r[1],
                ThreadKind(r[2]),
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                r[8],
                json.loads(r[9]) if r[9] else None,
                bool(r[10]),
            )
            for r in rows
        ]

    # -- what a thread shows -----------------------------------------------------------------

    def shown(self, root: str, slot: str, event_id: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO slots VALUES (?, ?, ?)", (root, slot, event_id))

    def slots(self, root: str) -> dict[str, str]:
        rows = self.db.execute("SELECT slot, event_id FROM slots WHERE root = ?", (root,))
        return {slot: event_id for slot, event_id in rows}

    def forget_slots(self, root: str, slots: list[str]) -> None:
        self.db.executemany(
            "DELETE FROM slots WHERE root = ? AND slot = ?", [(root, slot) for slot in slots]
        )

    # -- permission requests -------------------------------------------------------------------

    def request_shown(self, root: str, event_id: str, request: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO requests (root, event_id, request) VALUES (?, ?, ?)",
            (root, event_id, json.dumps(request)),
        )

    def decide(self, event_id: str, decision: str, answer: tuple[int, bytes] | None = None) -> bool:
        """Record the request's decision, and the answer to send (its number and line) with
        it; False when it had a decision already (answer nothing)."""
        with self.db:
            self.db.execute("BEGIN")
            done = self.db.execute(
                "UPDATE requests SET decided = ? WHERE event_id = ? AND decided IS NULL",
                (decision, event_id),
            )
            if done.rowcount != 1:
                return False
            if answer is not None:
                self.db.execute(
                    "INSERT OR REPLACE INTO outbox SELECT root, ?, ? FROM requests "
                    "WHERE event_id = ?",
                    (answer[0], answer[1], event_id),
                )
            return True

    def shown_request(self, root: str, request_id: str) -> str | None:
        """The message of the pending request with JSON id ``request_id``, if it was shown."""
        for event_id, record in self.pending_requests(root):
            if record.get("id") == request_id:
                return event_id
        return None

    def pending_requests(self, root: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self.db.execute(
            "SELECT event_id, request FROM requests WHERE root = ? AND decided IS NULL", (root,)
        )
        return [(event_id, json.loads(text)) for event_id, text in rows]

    # -- lines to the agent the relay may not have ------------------------------------------------

    def outgoing(self, root: str, seq: int, line: bytes) -> None:
        self.db.execute("INSERT OR REPLACE INTO outbox VALUES (?, ?, ?)", (root, seq, line))

    def unacknowledged(self, root: str, after: int) -> list[tuple[int, bytes]]:
        rows = self.db.execute(
            "SELECT seq, line FROM outbox WHERE root = ? AND seq > ? ORDER BY seq", (root, after)
        )
        return [(int(seq), bytes(line)) for seq, line in rows]


def _create_private(path: str) -> None:
    """Create the file 0600 if it is new; refuse one that others may read."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateError(f"cannot open --state {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise StateError(
            f"--state {path} is readable by others (mode {stat.S_IMODE(mode):o}): it holds "
            f"resume secrets; chmod 600 {path}"
        )
