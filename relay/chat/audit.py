"""The audit record of one permission request: what was asked, what was decided, by whom.

Pure. A record tells the story the thread tells, in one place a month later: when the
request was asked, where (the room, the thread, a ``matrix.to`` link to the request's
message), the session, the tool call (its title, its kind, the editor-side paths it
names, the command or the size of its diffs), the options, the outcome (an option, a
timeout, or no longer pending), who decided and from where (the chat, the editor, the
timeout), when, and every tap with whether it counted and why not. The I/O keeps the
records in the bot's state file; :func:`record_json` and :func:`csv_row` shape one for
``acp-relay chat audit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from relay.acp.changes import Option
from relay.chat.permissions import Request, ToolFacts

CSV_COLUMNS = (
    "asked_at",
    "room",
    "thread",
    "link",
    "session",
    "title",
    "kind",
    "paths",
    "command",
    "diff_bytes",
    "options",
    "outcome",
    "option_id",
    "option_kind",
    "decided_by",
    "decided_from",
    "decided_at",
    "taps",
)
OUTCOMES = ("selected", "timed out", "cancelled", "no longer pending", "pending")
SOURCES = ("chat", "editor", "watcher", "timeout", "cancel", "")


@dataclass(frozen=True)
class AuditTap:
    """One reaction on the request, as judged."""

    sender: str
    option_id: str
    counted: bool
    why_not: str
    at: float


@dataclass(frozen=True)
class AuditRecord:
    """One permission request, from its asking to its outcome."""

    asked_at: float
    room: str
    thread: str
    event_id: str
    session: str
    tool: ToolFacts
    options: tuple[Option, ...]
    outcome: str = "pending"  # one of OUTCOMES
    option: Option | None = None
    decided_by: str = ""
    decided_from: str = ""  # one of SOURCES
    decided_at: float | None = None
    taps: tuple[AuditTap, ...] = field(default=())


def matrix_link(room: str, event_id: str) -> str:
    """A ``matrix.to`` link to an event of a room (any Matrix client opens it)."""
    return f"https://matrix.to/#/{quote(room, safe='')}/{quote(event_id, safe='')}"


def iso(at: float | None) -> str:
    """A time as ISO 8601 in UTC, seconds precision ('' for none)."""
    if at is None:
        return ""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def record_json(record: AuditRecord) -> dict[str, Any]:
    """The record as JSON values: one line of ``--format jsonl``."""
    option = record.option
    return {
        "asked_at": iso(record.asked_at),
        "room": record.room,
        "thread": record.thread,
        "request_event": record.event_id,
        "link": matrix_link(record.room, record.event_id),
        "session": record.session,
        "tool_call": {
            "title": record.tool.title,
            "kind": record.tool.kind,
            "paths": list(record.tool.paths),
            "command": record.tool.command,
            "diff_bytes": record.tool.diff_bytes,
        },
        "options": [{"id": o.option_id, "name": o.name, "kind": o.kind} for o in record.options],
        "outcome": record.outcome,
        "option": None if option is None else {"id": option.option_id, "kind": option.kind},
        "decided_by": record.decided_by,
        "decided_from": record.decided_from,
        "decided_at": iso(record.decided_at),
        "taps": [
            {
                "at": iso(t.at),
                "sender": t.sender,
                "option": t.option_id,
                "counted": t.counted,
                "why_not": t.why_not,
            }
            for t in record.taps
        ],
    }


def csv_row(record: AuditRecord) -> list[str]:
    """The record as one row of ``--format csv`` (columns :data:`CSV_COLUMNS`)."""
    data = record_json(record)
    tool = data["tool_call"]
    taps = "; ".join(
        f"{t['sender']} {t['option']} "
        + ("counted" if t["counted"] else f"not counted: {t['why_not']}")
        for t in data["taps"]
    )
    option = data["option"] or {}
    return [
        data["asked_at"],
        record.room,
        record.thread,
        data["link"],
        record.session,
        tool["title"],
        tool["kind"],
        " ".join(tool["paths"]),
        tool["command"],
        str(tool["diff_bytes"]),
        " ".join(f"{o['id']}({o['kind']})" for o in data["options"]),
        record.outcome,
        option.get("id", ""),
        option.get("kind", ""),
        record.decided_by,
        record.decided_from,
        data["decided_at"],
        taps,
    ]


def since_time(text: str) -> float:
    """``--since`` as a time: an ISO date or date and time (UTC unless it says); ValueError."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"expected a date such as 2026-12-01 or 2026-12-01T09:30, got {text[:40]!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def asked(request: Request, room: str, thread: str, event_id: str, at: float) -> AuditRecord:
    """The record of ``request``, shown as ``event_id`` in ``thread`` of ``room`` at ``at``."""
    return AuditRecord(
        asked_at=at,
        room=room,
        thread=thread,
        event_id=event_id,
        session=request.session,
        tool=request.facts,
        options=request.options,
    )


def tapped(record: AuditRecord, tap: AuditTap) -> AuditRecord:
    """The record with one more tap."""
    return replace(record, taps=(*record.taps, tap))


def decided(
    record: AuditRecord, outcome: str, option: Option | None, by: str, source: str, at: float
) -> AuditRecord:
    """The record once decided (a record decided already keeps its first outcome)."""
    if record.outcome != "pending":
        return record
    return replace(
        record, outcome=outcome, option=option, decided_by=by, decided_from=source, decided_at=at
    )


def record_of(data: Mapping[str, Any]) -> AuditRecord:
    """A record back from :func:`record_json` (as the state file keeps it)."""
    tool = data["tool_call"]
    options = tuple(Option(o["id"], o["name"], o["kind"]) for o in data["options"])
    chosen = data.get("option")
    option = None
    if isinstance(chosen, dict):
        option = next((o for o in options if o.option_id == chosen.get("id")), None)
    return AuditRecord(
        asked_at=_moment(data["asked_at"]) or 0.0,
        room=data["room"],
        thread=data["thread"],
        event_id=data["request_event"],
        session=data["session"],
        tool=ToolFacts(
            tool["title"],
            tool["kind"],
            tuple(tool["paths"]),
            tool["command"],
            int(tool["diff_bytes"]),
        ),
        options=options,
        outcome=data["outcome"],
        option=option,
        decided_by=data["decided_by"],
        decided_from=data["decided_from"],
        decided_at=_moment(data["decided_at"]),
        taps=tuple(
            AuditTap(
                t["sender"], t["option"], bool(t["counted"]), t["why_not"], _moment(t["at"]) or 0.0
            )
            for t in data["taps"]
        ),
    )


def _moment(text: str) -> float | None:
    return None if not text else datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
