import os
import stat
from pathlib import Path

import pytest

from relay.client.chatbot.state import State, StateError, ThreadKind


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
