"""The audit's records in the state file: kept, listed from a date, pruned."""

from __future__ import annotations

from pathlib import Path

from relay.client.chatbot.store import State, ThreadKind
from tests.support.chatbot import keep_request


def test_audit_records_are_listed_from_a_date_and_forgotten_after_their_retention(
    tmp_path: Path,
) -> None:
    """--since keeps the later records; pruning takes the older ones, not the threads'."""
    state = State(str(tmp_path / "chat.sqlite"))
    state.add_thread("$root", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    for n, at in enumerate((100.0, 200.0, 300.0)):
        keep_request(state, "$root", f"$req{n}", at)
    assert [r.event_id for r in state.audit.records(200.0)] == ["$req1", "$req2"]
    assert state.audit.prune(250.0) == 2
    assert [r.event_id for r in state.audit.records()] == ["$req2"]
    assert len(state.pending_requests("$root")) == 3  # the threads' own rows stay
    state.close()
