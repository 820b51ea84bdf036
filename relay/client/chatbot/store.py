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

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from relay.chat.audit import AuditRecord
from relay.client.chatbot.auditbook import AuditBook
from relay.client.chatbot.schema import StateError, open_state

__all__ = ["KeptRequest", "State", "StateError", "ThreadKind", "ThreadRow"]

MAX_HANDLED = 20_000  # event ids remembered (the oldest forgotten: sync never goes that far back)


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
    opened_by: str | None = None
    first_prompt: str | None = None  # a thread recorded, not yet opened: its first prompt
    checkpointed: int = 0  # the last line sent at the last checkpoint (later ones were kept)


@dataclass
class KeptRequest:
    """A permission request as kept: its message, the request, its tally, when it was asked."""

    event_id: str
    record: dict[str, Any]
    tally: dict[str, Any] | None
    asked_at: float | None


class State:
    """The state file, open."""

    def __init__(self, path: str, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self.db = open_state(path)
        self.audit = AuditBook(self.db)
        self._pages: dict[str, list[str]] = {}  # each thread's pages as last written

    def close(self) -> None:
        self.db.close()

    # -- sync --------------------------------------------------------------------------------

    def sync_token(self) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'since'").fetchone()
        return None if row is None else str(row[0])

    def save_sync_token(self, token: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('since', ?)", (token,))

    def first_start(self, now_ms: int | None) -> int:
        """When the bot first started with this file, in ms (``now_ms`` at its first start;
        0 for a file kept before it was noted)."""
        if now_ms is not None:
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('first_start', ?)", (str(now_ms),))
        row = self.db.execute("SELECT value FROM meta WHERE key = 'first_start'").fetchone()
        return 0 if row is None else int(row[0])

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

    def add_thread(
        self,
        root: str,
        room: str,
        kind: ThreadKind,
        url: str,
        at: float,
        by: str | None = None,
        first_prompt: str | None = None,
    ) -> None:
        """A thread opened by ``by``; ``first_prompt`` is kept until its connection opens."""
        self.db.execute(
            "INSERT OR IGNORE INTO threads (root, room, kind, url, opened_at, opened_by, "
            "first_prompt, active_at) VALUES (?,?,?,?,?,?,?,?)",
            (root, room, kind, url, at, by, first_prompt, at),
        )

    def connected(self, root: str, connection: str, secret: str, grace: float) -> None:
        """The thread's connection opened: its first prompt is the session's now."""
        self.db.execute(
            "UPDATE threads SET connection = ?, secret = ?, grace = ?, sent = 0, received = 0, "
            "first_prompt = NULL WHERE root = ?",
            (connection, secret, grace, root),
        )

    def welcomed(self, root: str, secret: str, grace: float) -> None:
        """A resume of the thread's connection was welcomed: its new secret, the one the
        next resume must present (the relay spent the old one when it welcomed this)."""
        self.db.execute(
            "UPDATE threads SET secret = ?, grace = ? WHERE root = ?", (secret, grace, root)
        )

    def set_session(self, root: str, session: str) -> None:
        """The ACP session the thread runs (kept after it ends: ``!reopen``)."""
        self.db.execute("UPDATE threads SET session = ? WHERE root = ?", (session, root))

    def ended_session(self, root: str) -> tuple[str, str | None] | None:
        """An ended thread's room and session (None: no such ended thread)."""
        row = self.db.execute(
            "SELECT room, session FROM threads WHERE root = ? AND ended = 1", (root,)
        ).fetchone()
        return None if row is None else (str(row[0]), row[1])

    def reopen(self, root: str, by: str, at: float) -> None:
        """An ended thread live again (``!reopen``), opened by ``by``: a new connection, on
        its session."""
        self.db.execute(
            "UPDATE threads SET ended = 0, ended_at = NULL, connection = NULL, secret = NULL, "
            "sent = 0, received = 0, opened_by = ?, active_at = ? WHERE root = ?",
            (by, at, root),
        )

    def set_url(self, root: str, url: str) -> None:
        """The relay this thread's connection is on (--connect-command's box)."""
        self.db.execute("UPDATE threads SET url = ? WHERE root = ?", (url, root))

    def checkpoint(
        self, root: str, sent: int, received: int, acked: int, view: dict[str, Any]
    ) -> None:
        """Where the link stands and what the thread shows; lines the relay has are dropped.

        The turn's words (``view["view"]["pages"]``) are written page by page, only those
        that changed since the last checkpoint: its cost grows with what changed, not with
        the turn."""
        pages = _take_pages(view)
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "UPDATE threads SET sent = ?, received = ?, view = ? WHERE root = ?",
                (sent, received, json.dumps(view), root),
            )
            self.db.execute("DELETE FROM outbox WHERE root = ? AND seq <= ?", (root, acked))
            if pages is not None:
                self._write_pages(root, pages)

    def _write_pages(self, root: str, pages: list[str]) -> None:
        written = self._pages.get(root)
        if written is None:
            self.db.execute("DELETE FROM pages WHERE root = ?", (root,))
            written = []
        changed = [
            (root, n, text)
            for n, text in enumerate(pages)
            if n >= len(written) or (written[n] is not text and written[n] != text)
        ]
        self.db.executemany("INSERT OR REPLACE INTO pages VALUES (?, ?, ?)", changed)
        if len(pages) < len(written):
            self.db.execute("DELETE FROM pages WHERE root = ? AND n >= ?", (root, len(pages)))
        self._pages[root] = list(pages)

    def next_post(self, root: str) -> int:
        """The number of the thread's next post, kept before it is sent: the same post after
        a restart has the same transaction id, and the homeserver does not post it twice."""
        self.db.execute("UPDATE threads SET posts = posts + 1 WHERE root = ?", (root,))
        row = self.db.execute("SELECT posts FROM threads WHERE root = ?", (root,)).fetchone()
        return int(row[0]) if row is not None else 0

    def end_thread(self, root: str) -> None:
        """The thread is over: its secret, lines, slots and view go; its row stays (with
        its requests) until :meth:`prune` takes it."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "UPDATE threads SET ended = 1, secret = NULL, view = NULL, first_prompt = NULL, "
                "ended_at = ? WHERE root = ?",
                (self.clock(), root),
            )
            for table in ("outbox", "slots", "pages"):
                self.db.execute(f"DELETE FROM {table} WHERE root = ?", (root,))
        self._pages.pop(root, None)

    def prune(self, before: float) -> int:
        """Forget the threads that ended before ``before`` with their requests, and the
        requests decided before it; the number of threads forgotten."""
        with self.db:
            self.db.execute("BEGIN")
            old = "SELECT root FROM threads WHERE ended = 1 AND ended_at < ?"
            self.db.execute(f"DELETE FROM requests WHERE root IN ({old})", (before,))
            self.db.execute("DELETE FROM requests WHERE decided_at < ?", (before,))
            gone = self.db.execute(
                "DELETE FROM threads WHERE ended = 1 AND ended_at < ?", (before,)
            )
            return gone.rowcount

    def ended_thread(self, root: str) -> bool:
        """Whether ``root`` is a thread this bot ran, whose session has ended."""
        row = self.db.execute("SELECT 1 FROM threads WHERE root = ? AND ended = 1", (root,))
        return row.fetchone() is not None

    def live_threads(self) -> list[ThreadRow]:
        rows = self.db.execute(
            "SELECT root, room, kind, url, connection, secret, grace, "
            "MAX(sent, COALESCE((SELECT MAX(seq) FROM outbox o WHERE o.root = t.root), 0)), "
            "received, view, ended, opened_by, first_prompt, sent FROM threads t WHERE ended = 0 "
            "ORDER BY opened_at"
        ).fetchall()
        return [self._row(r) for r in rows]

    def _row(self, r: tuple[Any, ...]) -> ThreadRow:
        view = json.loads(r[9]) if r[9] else None
        inner = view.get("view") if isinstance(view, dict) else None
        if isinstance(inner, dict) and "pages" not in inner:  # a first release's view has them
            pages = self.db.execute("SELECT text FROM pages WHERE root = ? ORDER BY n", (r[0],))
            inner["pages"] = [text for (text,) in pages]
            self._pages[r[0]] = list(inner["pages"])
        return ThreadRow(
            r[0],
            r[1],
            ThreadKind(r[2]),
            r[3],
            r[4],
            r[5],
            r[6],
            r[7],
            r[8],
            view,
            bool(r[10]),
            r[11],
            r[12],
            int(r[13]),
        )

    # -- what a thread shows -----------------------------------------------------------------

    def shown(self, root: str, slot: str, event_id: str) -> None:
        self.db.execute(
            "INSERT INTO slots (root, slot, event_id) VALUES (?, ?, ?) "
            "ON CONFLICT (root, slot) DO UPDATE SET event_id = excluded.event_id",
            (root, slot, event_id),
        )

    def slots(self, root: str) -> dict[str, str]:
        """The thread's slots that were posted: their events."""
        rows = self.db.execute(
            "SELECT slot, event_id FROM slots WHERE root = ? AND event_id != ''", (root,)
        )
        return {slot: event_id for slot, event_id in rows}

    def posting(self, root: str, slot: str) -> tuple[str, bool]:
        """The transaction id of ``slot``'s post, kept before it is sent; True when it was
        kept already (a restart came between: it may have been posted)."""
        row = self.db.execute(
            "SELECT txn FROM slots WHERE root = ? AND slot = ? AND event_id = ''", (root, slot)
        ).fetchone()
        if row is not None and row[0]:
            return str(row[0]), True
        txn = f"acp-relay.{_digest(root)}.{self.next_post(root)}"
        self.db.execute(
            "INSERT OR REPLACE INTO slots (root, slot, event_id, txn) VALUES (?, ?, '', ?)",
            (root, slot, txn),
        )
        return txn, False

    # -- permission requests -------------------------------------------------------------------

    def request_shown(
        self,
        root: str,
        event_id: str,
        request: dict[str, Any],
        tally: dict[str, Any] | None = None,
        audit: AuditRecord | None = None,
    ) -> None:
        """A request's message, its tally and its audit record, kept at once (shown again
        after a kill, the homeserver answering the same transaction with the first event,
        it keeps what it had: it is answered once)."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT OR IGNORE INTO requests (root, event_id, request, tally, asked_at, "
                "request_key) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    root,
                    event_id,
                    json.dumps(request),
                    _json_or_none(tally),
                    self.clock(),
                    request["id"],
                ),
            )
            if audit is not None:
                self.audit.asked(audit)

    def save_tally(self, event_id: str, tally: dict[str, Any]) -> None:
        """The request's tally now (a tap counted or noted, an escalation, the reminder)."""
        self.db.execute(
            "UPDATE requests SET tally = ? WHERE event_id = ?", (json.dumps(tally), event_id)
        )

    def decide(
        self,
        event_id: str,
        decision: str,
        answer: tuple[int, bytes] | None = None,
    ) -> bool:
        """Record the request's decision, and the answer to send (its number and line) with
        it; False when it had a decision already (answer nothing)."""
        with self.db:
            self.db.execute("BEGIN")
            done = self.db.execute(
                "UPDATE requests SET decided = ?, decided_at = ? "
                "WHERE event_id = ? AND decided IS NULL",
                (decision, self.clock(), event_id),
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

    def request_message(self, root: str, request_id: str) -> tuple[str, bool] | None:
        """The message of the request with JSON id ``request_id`` in the thread, whether
        pending or decided, and whether it is decided; None if it was never shown."""
        row = self.db.execute(
            "SELECT event_id, decided IS NOT NULL FROM requests WHERE root = ? AND "
            "request_key = ? ORDER BY rowid DESC LIMIT 1",
            (root, request_id),
        ).fetchone()
        return None if row is None else (str(row[0]), bool(row[1]))

    def shown_request(self, root: str, request_id: str) -> str | None:
        """The message of the pending request with JSON id ``request_id``, if it was shown."""
        row = self.db.execute(
            "SELECT event_id FROM requests WHERE root = ? AND request_key = ? AND "
            "decided IS NULL ORDER BY rowid DESC LIMIT 1",
            (root, request_id),
        ).fetchone()
        return None if row is None else str(row[0])

    def pending_requests(self, root: str) -> list[KeptRequest]:
        """The thread's requests still pending, in the order they were asked."""
        return self._pending("root = ?", root)

    def pending_in_room(self, room: str) -> list[tuple[str, KeptRequest]]:
        """The room's requests still pending in live threads: (thread, request), in order."""
        rows = self.db.execute(
            "SELECT r.root FROM requests r JOIN threads t ON t.root = r.root "
            "WHERE t.room = ? AND t.ended = 0 AND r.decided IS NULL ORDER BY r.rowid",
            (room,),
        )
        roots = list(dict.fromkeys(root for (root,) in rows))
        return [(root, kept) for root in roots for kept in self.pending_requests(root)]

    def _pending(self, where: str, value: str) -> list[KeptRequest]:
        rows = self.db.execute(
            "SELECT event_id, request, tally, asked_at FROM requests "
            f"WHERE {where} AND decided IS NULL ORDER BY rowid",
            (value,),
        )
        return [
            KeptRequest(event_id, json.loads(text), json.loads(tally) if tally else None, at)
            for event_id, text, tally, at in rows
        ]

    # -- lines to the agent the relay may not have ------------------------------------------------

    def outgoing(self, root: str, seq: int, line: bytes) -> None:
        self.db.execute("INSERT OR REPLACE INTO outbox VALUES (?, ?, ?)", (root, seq, line))

    def unacknowledged(self, root: str, after: int) -> list[tuple[int, bytes]]:
        rows = self.db.execute(
            "SELECT seq, line FROM outbox WHERE root = ? AND seq > ? ORDER BY seq", (root, after)
        )
        return [(int(seq), bytes(line)) for seq, line in rows]


def _json_or_none(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value)


def _digest(text: str) -> str:
    """A short, stable name of ``text`` for transaction ids (room and event ids hold any
    character)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _take_pages(view: dict[str, Any]) -> list[str] | None:
    """The turn's pages, taken out of a thread's snapshot (kept in their own table)."""
    inner = view.get("view")
    pages = inner.pop("pages", None) if isinstance(inner, dict) else None
    return pages if isinstance(pages, list) else None
