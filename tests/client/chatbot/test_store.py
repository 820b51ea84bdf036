import os
import stat
from pathlib import Path

import pytest

from relay.chat.audit import AuditTap, tapped
from relay.client.chatbot.store import State, StateError, ThreadKind
from tests.support.chatbot import keep_request


def test_the_state_file_is_created_0600_and_one_others_may_read_is_refused(tmp_path: Path) -> None:
    """It holds resume secrets: created 0600; a group-readable one is refused with the fix."""
    path = tmp_path / "chat.sqlite"
    State(str(path)).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o640)
    with pytest.raises(StateError, match="chmod 600"):
        State(str(path))


def test_an_event_is_handled_once_and_a_request_decided_once(tmp_path: Path) -> None:
    """first_handling and decide say yes once, across a reopening."""
    state = State(str(tmp_path / "chat.sqlite"))
    state.add_thread("$root", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    state.request_shown("$root", "$req", {"id": '"perm-1"'})
    assert state.first_handling("$e", 1)
    assert state.decide("$req", "allow", (4, b'{"answer":1}'))
    state.close()
    again = State(str(tmp_path / "chat.sqlite"))
    assert not again.first_handling("$e", 2)
    assert not again.decide("$req", "reject", (5, b"{}"))
    assert again.unacknowledged("$root", 3) == [(4, b'{"answer":1}')]
    assert again.shown_request("$root", '"perm-1"') is None  # decided: no longer pending
    again.close()


def test_a_thread_kept_then_ended_keeps_no_secret(tmp_path: Path) -> None:
    """The resume secret goes with the thread's end."""
    state = State(str(tmp_path / "chat.sqlite"))
    state.add_thread("$root", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    state.connected("$root", "conn-1", "s3cret", 60.0)
    [row] = state.live_threads()
    assert (row.connection, row.secret) == ("conn-1", "s3cret")
    state.end_thread("$root")
    assert state.live_threads() == []
    assert state.db.execute("SELECT secret FROM threads").fetchall() == [(None,)]
    state.close()


def test_a_thread_kept_counts_the_lines_kept_after_its_checkpoint_as_sent(tmp_path: Path) -> None:
    """Lines kept (and so maybe sent) after the last checkpoint count as sent: a bot killed
    then resumes claiming them, and the relay, which may have them, accepts the resume."""
    state = State(str(tmp_path / "chat.sqlite"))
    state.add_thread("$root", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    state.connected("$root", "conn-1", "s3cret", 60.0)
    state.checkpoint("$root", 2, 5, 1, {})
    assert [row.sent for row in state.live_threads()] == [2]
    state.outgoing("$root", 3, b'{"prompt":1}')
    state.outgoing("$root", 4, b'{"answer":1}')
    assert [row.sent for row in state.live_threads()] == [4]
    state.checkpoint("$root", 4, 6, 4, {})  # the relay acknowledged them all
    assert [row.sent for row in state.live_threads()] == [4]
    state.close()


def wal_bytes(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_a_long_turns_checkpoints_write_what_changed_not_the_whole_turn(tmp_path: Path) -> None:
    """A turn of 200 pages checkpointed after each new page: the log written stays about
    the size of the turn once, not its square; the pages read back whole."""
    path = tmp_path / "chat.sqlite"
    state = State(str(path))
    state.add_thread("$root", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    state.db.execute("PRAGMA wal_autocheckpoint = 0")  # let the log show every byte written
    page = "w" * 30_000
    pages: list[str] = []
    for n in range(200):
        pages = [*pages[:-1], page, f"page {n}"] if pages else [f"page {n}"]
        state.checkpoint("$root", 0, n, 0, {"view": {"pages": list(pages), "turn": 1}})
    turn_bytes = sum(len(p) for p in pages)
    assert wal_bytes(path) < 3 * turn_bytes  # whole turn each time: about 100 x the turn
    state.close()
    again = State(str(path))
    [row] = again.live_threads()
    assert row.view == {"view": {"pages": pages, "turn": 1}}
    again.close()


def test_ended_threads_keep_no_view_and_are_forgotten_after_their_retention(
    tmp_path: Path,
) -> None:
    """An ended thread drops its view and pages at once; prune() forgets it and its
    requests once ended before the cut, and requests decided before it."""
    now = [1000.0]
    state = State(str(tmp_path / "chat.sqlite"), clock=lambda: now[0])
    for root in ("$old", "$live"):
        state.add_thread(root, "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
        state.checkpoint(root, 0, 0, 0, {"view": {"pages": ["words"]}})
        state.request_shown(root, f"{root}-req", {"id": "1"})
    state.decide("$live-req", "allow")
    state.end_thread("$old")
    assert state.db.execute("SELECT view FROM threads WHERE root = '$old'").fetchone() == (None,)
    assert state.db.execute("SELECT count(*) FROM pages WHERE root = '$old'").fetchone() == (0,)
    assert state.prune(before=999.0) == 0
    assert state.prune(before=1001.0) == 1
    assert [r.root for r in state.live_threads()] == ["$live"]
    assert state.db.execute("SELECT event_id FROM requests").fetchall() == []
    state.close()


def test_a_threads_posts_are_numbered_across_a_reopening(tmp_path: Path) -> None:
    """next_post counts per thread and keeps counting after the file is opened again."""
    state = State(str(tmp_path / "chat.sqlite"))
    state.add_thread("$a", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    state.add_thread("$b", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    assert [state.next_post("$a"), state.next_post("$a"), state.next_post("$b")] == [1, 2, 1]
    state.close()
    again = State(str(tmp_path / "chat.sqlite"))
    assert again.next_post("$a") == 3
    again.close()


def test_an_ended_thread_is_known_as_ended_across_a_reopening(tmp_path: Path) -> None:
    """ended_thread: yes for a thread the bot ended (after a restart too), no for a live one
    or a root it never ran."""
    state = State(str(tmp_path / "chat.sqlite"))
    state.add_thread("$gone", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    state.add_thread("$live", "!r", ThreadKind.SESSION, "ws://x/acp", 2.0)
    state.end_thread("$gone")
    state.close()
    again = State(str(tmp_path / "chat.sqlite"))
    assert [again.ended_thread(r) for r in ("$gone", "$live", "$other")] == [True, False, False]
    again.close()


def test_a_requests_tally_and_audit_record_are_kept_across_a_reopening(tmp_path: Path) -> None:
    """The tally saved after a tap, the audit changed by a tap, the room's pending requests
    in live threads: all read back after a reopening; a decision takes it off !pending."""
    state = State(str(tmp_path / "chat.sqlite"), clock=lambda: 500.0)
    state.add_thread("$root", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
    keep_request(state, "$root", "$req", 100.0)
    keep_request(state, "$root", "$req2", 200.0)
    tapped_tally = {"prompter": "@alice:t", "escalated": True, "reminded": False,
                    "taps": [["@bob:t", "a", True, ""]]}  # fmt: skip
    state.save_tally("$req", tapped_tally)
    tap = AuditTap("@bob:t", "a", True, "", 150.0)
    state.audit.change("$req", lambda record: tapped(record, tap))
    state.close()
    again = State(str(tmp_path / "chat.sqlite"))
    [first, second] = again.pending_requests("$root")
    assert (first.event_id, first.tally, first.asked_at) == ("$req", tapped_tally, 500.0)
    assert second.record["id"] == '"r-$req2"'
    assert [(root, kept.event_id) for root, kept in again.pending_in_room("!r")] == [
        ("$root", "$req"), ("$root", "$req2")]  # fmt: skip
    assert again.pending_in_room("!other") == []
    assert again.decide("$req", "allowed")
    assert [kept.event_id for _, kept in again.pending_in_room("!r")] == ["$req2"]
    [audited, _] = again.audit.records()
    assert audited.taps == (tap,)
    again.close()


def test_an_ended_threads_session_is_kept_and_the_thread_can_be_reopened(tmp_path: Path) -> None:
    """The session id outlives the thread's end; reopen makes it live again, opened by the
    person who reopened it, with no connection yet."""
    state = State(str(tmp_path / "chat.sqlite"))
    state.add_thread("$root", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0, "@a:t")
    state.connected("$root", "conn-1", "secret", 60.0)
    state.set_session("$root", "sess-1")
    assert state.ended_session("$root") is None  # live
    state.end_thread("$root")
    assert state.ended_session("$root") == ("!r", "sess-1")
    state.reopen("$root", "@b:t", 2.0)
    [row] = state.live_threads()
    assert (row.root, row.connection, row.secret, row.opened_by) == ("$root", None, None, "@b:t")
    assert not state.ended_thread("$root")
    state.close()
