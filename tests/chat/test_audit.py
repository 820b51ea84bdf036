"""The audit record of a permission request: facts of its tool call, JSON and CSV shapes."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from relay.acp.changes import Option
from relay.chat.audit import (
    CSV_COLUMNS,
    AuditRecord,
    AuditTap,
    asked,
    csv_row,
    decided,
    iso,
    matrix_link,
    record_json,
    record_of,
    since_time,
    tapped,
)
from relay.chat.permissions import Request, ToolFacts

ALLOW = Option("allow", "Allow", "allow_once")
REJECT = Option("reject", "Reject", "reject_once")


def test_a_matrix_to_link_escapes_the_ids() -> None:
    """Room and event ids are percent-encoded in the link (they hold ! $ : and more)."""
    assert matrix_link("!ab:x.org", "$e/v+1") == "https://matrix.to/#/%21ab%3Ax.org/%24e%2Fv%2B1"


def test_times_are_utc_iso_and_since_reads_dates_and_times() -> None:
    """iso() writes UTC with a Z; since_time() takes a date, a time, or an offset."""
    assert iso(0.0) == "1970-01-01T00:00:00Z"
    assert iso(None) == ""
    assert since_time("2026-12-01") == 1796083200.0
    assert since_time("2026-12-01T01:00+01:00") == 1796083200.0
    with pytest.raises(ValueError, match="expected a date such as 2026-12-01"):
        since_time("last week")


def record(**more: Any) -> AuditRecord:
    base: dict[str, Any] = {
        "asked_at": 1796083200.0,
        "room": "!r:x.org",
        "thread": "$root",
        "event_id": "$req",
        "session": "sess-1",
        "tool": ToolFacts("Run tests", "execute", ("/Users/a/app",), "make test"),
        "options": (ALLOW, REJECT),
    }
    return AuditRecord(**(base | more))


def test_a_decided_record_says_who_from_where_and_every_tap() -> None:
    """The JSON form: the outcome, its option, the decider and each tap with its verdict."""
    taps = (
        AuditTap("@eve:x.org", "allow", False, "only @lead:x.org may answer", 1796083201.0),
        AuditTap("@lead:x.org", "allow", True, "", 1796083202.0),
    )
    data = record_json(
        record(
            outcome="selected",
            option=ALLOW,
            decided_by="@lead:x.org",
            decided_from="chat",
            decided_at=1796083202.0,
            taps=taps,
        )
    )
    assert data["outcome"] == "selected"
    assert data["option"] == {"id": "allow", "kind": "allow_once"}
    assert (data["decided_by"], data["decided_from"]) == ("@lead:x.org", "chat")
    assert data["decided_at"] == "2026-12-01T00:00:02Z"
    assert data["link"] == "https://matrix.to/#/%21r%3Ax.org/%24req"
    assert [(t["sender"], t["counted"], t["why_not"]) for t in data["taps"]] == [
        ("@eve:x.org", False, "only @lead:x.org may answer"),
        ("@lead:x.org", True, ""),
    ]
    assert json.loads(json.dumps(data)) == data


def test_a_timed_out_record_has_no_decider_but_the_timeout() -> None:
    """A request refused by its timeout: outcome 'timed out', the reject option, no person."""
    data = record_json(
        record(outcome="timed out", option=REJECT, decided_from="timeout", decided_at=1.0)
    )
    assert (data["outcome"], data["option"]["id"], data["decided_by"]) == (
        "timed out",
        "reject",
        "",
    )


def test_a_csv_row_has_every_column_and_survives_hostile_text() -> None:
    """A row has one value per column; commas, quotes and newlines round-trip through csv."""
    hostile = ToolFacts('a, "b"\nc', "execute", command="echo 'x,y'\nrm")
    row = csv_row(record(tool=hostile))
    assert len(row) == len(CSV_COLUMNS)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    writer.writerow(row)
    header, read = list(csv.reader(io.StringIO(out.getvalue())))
    assert dict(zip(header, read, strict=True))["title"] == 'a, "b"\nc'
    assert dict(zip(header, read, strict=True))["command"] == "echo 'x,y'\nrm"


def test_a_record_is_asked_tapped_decided_once_and_reads_back_as_kept() -> None:
    """asked() takes the request's session and facts; taps add up; the first decision
    stands; record_of() reads record_json() back to the same record."""
    request = Request(
        "r1", "Run tests", "execute", "$ make test", (ALLOW, REJECT), session="sess-1",
        facts=ToolFacts("Run tests", "execute", ("/Users/a/app",), "make test"),
    )  # fmt: skip
    made = asked(request, "!r:x.org", "$root", "$req", 1796083200.0)
    assert made == record()
    tap = AuditTap("@lead:x.org", "allow", True, "", 1796083202.0)
    done = decided(tapped(made, tap), "selected", ALLOW, "@lead:x.org", "chat", 1796083203.0)
    assert decided(done, "timed out", REJECT, "", "timeout", 1796083299.0) == done
    assert record_of(json.loads(json.dumps(record_json(done)))) == done
    assert record_of(record_json(made)) == made
