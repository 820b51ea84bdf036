"""``acp-relay chat audit``: a state file's audit records as JSON lines or CSV, or exit 2
saying the fix."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from relay.acp.changes import Option
from relay.chat.audit import CSV_COLUMNS, asked, decided
from relay.chat.permissions import Request, ToolFacts, request_state
from relay.client.chatbot.store import State, ThreadKind
from tests.support.cli import run_cli
from tests.support.env import clean_env

ALLOW = Option("allow", "Allow", "allow_once")
DAY = 86_400.0
DEC_1 = 1796083200.0  # 2026-12-01T00:00:00Z


def state_with_two_requests(path: Path) -> None:
    """A bot's state file: a request decided in the chat on Dec 1, one pending on Dec 3."""
    state = State(str(path))
    state.add_thread("$root", "!r:x.org", ThreadKind.SESSION, "ws://x/acp", DEC_1)
    for event_id, at in (("$one", DEC_1), ("$two", DEC_1 + 2 * DAY)):
        facts = ToolFacts("Run, tests", "execute", command="make\ntest")
        request = Request(event_id, "Run, tests", "execute", "", (ALLOW,), "s-1", facts)
        state.request_shown("$root", event_id, request_state(request), None,
                            asked(request, "!r:x.org", "$root", event_id, at))  # fmt: skip
    state.audit.change("$one", lambda r: decided(r, "selected", ALLOW, "@lead:x.org", "chat",
                                                 DEC_1 + 60))  # fmt: skip
    state.close()


def test_the_records_print_as_json_lines_oldest_first_and_from_a_date(tmp_path: Path) -> None:
    """One JSON object per request; --since keeps those asked from that date on."""
    path = tmp_path / "chat.sqlite"
    state_with_two_requests(path)
    result = run_cli("chat", "audit", "--state", str(path), env=clean_env())
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert (first["request_event"], first["outcome"], first["decided_by"]) == (
        "$one", "selected", "@lead:x.org")  # fmt: skip
    assert first["decided_at"] == "2026-12-01T00:01:00Z"
    assert (second["request_event"], second["outcome"]) == ("$two", "pending")
    later = run_cli("chat", "audit", "--state", str(path), "--since", "2026-12-02",
                    env=clean_env())  # fmt: skip
    assert [json.loads(line)["request_event"] for line in later.stdout.splitlines()] == ["$two"]


def test_the_records_print_as_csv_that_a_spreadsheet_reads_back(tmp_path: Path) -> None:
    """A header row, then one row per request; commas and newlines quoted."""
    path = tmp_path / "chat.sqlite"
    state_with_two_requests(path)
    result = run_cli("chat", "audit", "--state", str(path), "--format", "csv",
                     env=clean_env(ACP_RELAY_STATE="/nonexistent"))  # fmt: skip
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == list(CSV_COLUMNS)
    assert [row[CSV_COLUMNS.index("title")] for row in rows[1:]] == ["Run, tests"] * 2
    assert rows[1][CSV_COLUMNS.index("command")] == "make\ntest"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {}, "acp-relay chat audit needs --state FILE (or $ACP_RELAY_STATE)"),
        (("--state", "{missing}"), {}, "no such file"),
        ((), {"ACP_RELAY_STATE": "{missing}"}, "no such file"),
        (("--state", "{state}", "--since", "last week"), {}, "expected a date such as"),
    ],
)
def test_a_mistake_is_exit_2_with_the_fix_and_creates_no_file(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    """No state named, a state file that is not there, a date that is not one: exit 2, one
    line; a missing file is not created."""
    state = tmp_path / "chat.sqlite"
    state_with_two_requests(state)
    where = {"missing": str(tmp_path / "none.sqlite"), "state": str(state)}
    given = [arg.format(**where) for arg in args]
    result = run_cli("chat", "audit", *given,
                     env=clean_env(**{k: v.format(**where) for k, v in env.items()}))  # fmt: skip
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "none.sqlite").exists()
