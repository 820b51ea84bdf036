"""The bot's state file opened: created private, its schema brought to this release's.

The file is SQLite (the standard library's), created 0600 and refused when its group or
others may read it, since it holds resume secrets. Its schema has a version
(``PRAGMA user_version``): a new file is made as the first release made it, then every
migration since is applied in order, so a file of any earlier release opens the same way;
a file written by a later release is refused rather than misread. Each migration runs in
one transaction with the version it reaches.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Callable


class StateError(Exception):
    """The state file cannot be used (why, and the fix)."""


# The first release's schema (its files have user_version 0): never changed, only migrated.
SCHEMA_1 = """
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

# MIGRATIONS[n] takes a file from version n + 1 to n + 2 (version 1 is SCHEMA_1's): SQL,
# or a step written in Python where SQLite's own functions would not do everywhere.
MIGRATIONS: tuple[tuple[str | Callable[[sqlite3.Connection], None], ...], ...] = (
    (
        # who opened a thread (caps per person, the share requester, self-approval), its
        # first prompt until the agent has it, when it was last active and when it ended
        "ALTER TABLE threads ADD COLUMN opened_by TEXT",
        "ALTER TABLE threads ADD COLUMN first_prompt TEXT",
        "ALTER TABLE threads ADD COLUMN active_at REAL",
        "ALTER TABLE threads ADD COLUMN ended_at REAL",
        # the thread's posts numbered, and a post's transaction id kept before it is sent
        # (event_id '' until the homeserver answers), so that a post sent again after a
        # restart is the same transaction: the homeserver answers it with the first event
        "ALTER TABLE threads ADD COLUMN posts INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE slots ADD COLUMN txn TEXT",
        "ALTER TABLE requests ADD COLUMN decided_at REAL",
        # a turn's words page by page: a checkpoint writes the pages that changed
        "CREATE TABLE pages (root TEXT NOT NULL, n INTEGER NOT NULL, text TEXT NOT NULL, "
        "PRIMARY KEY (root, n))",
        "UPDATE threads SET ended_at = opened_at WHERE ended = 1",
    ),
    (
        # a request's tally under its approval rule (taps, escalation, reminder) and when
        # it was asked: a restart between two taps keeps the first, and its timers run on
        "ALTER TABLE requests ADD COLUMN tally TEXT",
        "ALTER TABLE requests ADD COLUMN asked_at REAL",
        # the audit: one record per permission request, kept apart from the threads'
        # pruning (--audit-retention)
        "CREATE TABLE audit (event_id TEXT PRIMARY KEY, asked_at REAL NOT NULL, "
        "record TEXT NOT NULL)",
        "CREATE INDEX audit_by_time ON audit (asked_at)",
    ),
    (
        # the ACP session a thread ran: kept when it ends, so that !reopen can bring it back
        "ALTER TABLE threads ADD COLUMN session TEXT",
    ),
    (
        # a request found by its JSON-RPC id without reading every request of its thread
        "ALTER TABLE requests ADD COLUMN request_key TEXT",
        "CREATE INDEX requests_by_key ON requests (root, request_key)",
        lambda db: _key_requests(db),
    ),
)
VERSION = 1 + len(MIGRATIONS)  # the version this release writes


def open_state(path: str) -> sqlite3.Connection:
    """The state file at ``path``, private, at this release's schema; StateError saying
    the fix otherwise."""
    create_private(path)
    try:
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        _migrate(db, path)
    except sqlite3.DatabaseError as exc:
        raise StateError(f"cannot use --state {path}: {exc}") from None
    return db


def version_of(db: sqlite3.Connection) -> int:
    """The file's schema version: 0 for a new file, 1 for the first release's."""
    (stamped,) = db.execute("PRAGMA user_version").fetchone()
    if stamped:
        return int(stamped)
    tables = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'threads'").fetchone()
    return 1 if tables[0] else 0


def _migrate(db: sqlite3.Connection, path: str) -> None:
    version = version_of(db)
    if version > VERSION:
        raise StateError(
            f"--state {path} was written by a later acp-relay (schema {version}; this one "
            f"reads up to {VERSION}): run that release, or give this one another file"
        )
    if version == 0:
        db.executescript(SCHEMA_1)
        version = 1
    for steps in MIGRATIONS[version - 1 :]:
        version += 1
        with db:
            db.execute("BEGIN")
            for step in steps:
                if isinstance(step, str):
                    db.execute(step)
                else:
                    step(db)
            db.execute(f"PRAGMA user_version = {version:d}")


def create_private(path: str, flag: str = "--state", holds: str = "resume secrets") -> None:
    """Create the file 0600 if it is new; refuse one that others may read (``flag`` names
    it, ``holds`` says why it must stay private)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StateError(f"cannot open {flag} {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise StateError(
            f"{flag} {path} is readable by others (mode {stat.S_IMODE(mode):o}): it holds "
            f"{holds}; chmod 600 {path}"
        )


def _key_requests(db: sqlite3.Connection) -> None:
    """Each kept request's JSON-RPC id (its JSON text) in its own column (json_extract is
    not in every SQLite a Python is built with)."""
    rows = db.execute("SELECT event_id, request FROM requests").fetchall()
    keyed = [(json.loads(text).get("id"), event_id) for event_id, text in rows]
    db.executemany("UPDATE requests SET request_key = ? WHERE event_id = ?", keyed)
