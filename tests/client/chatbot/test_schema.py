"""The state file opened: private, its schema versioned, earlier releases' files migrated."""

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from relay.client.chatbot.schema import SCHEMA_1, VERSION, StateError, open_state, version_of
from relay.client.chatbot.store import State


def first_release_file(path: Path) -> None:
    """A state file as the first release left it: a live thread with a pending request."""
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA_1)
        db.execute("INSERT INTO meta VALUES ('since', 's42')")
        db.execute(
            "INSERT INTO threads (root, room, kind, url, connection, secret, grace, sent, "
            "received, view, opened_at) VALUES ('$root', '!r', 'session', 'ws://x/acp', "
            "'conn-1', 's3cret', 60.0, 3, 7, '{\"view\": {\"pages\": [\"hello\"]}}', 1.0)"
        )
        db.execute("INSERT INTO requests VALUES ('$root', '$req', '{\"id\": \"1\"}', NULL)")
        db.commit()
    path.chmod(0o600)


def test_a_first_release_file_opens_migrated_with_everything_it_kept(tmp_path: Path) -> None:
    """Version 1 (no user_version) becomes this release's version; threads, secrets,
    requests (found by their id) and the turn's words are all still there."""
    path = tmp_path / "chat.sqlite"
    first_release_file(path)
    state = State(str(path))
    assert version_of(state.db) == VERSION > 1
    assert state.sync_token() == "s42"
    [row] = state.live_threads()
    assert (row.connection, row.secret, row.sent, row.received) == ("conn-1", "s3cret", 3, 7)
    assert row.view == {"view": {"pages": ["hello"]}}  # v1 kept them in the view
    assert [kept.event_id for kept in state.pending_requests("$root")] == ["$req"]
    assert state.shown_request("$root", "1") == "$req"  # found by its id, keyed on migration
    assert state.request_message("$root", "1") == ("$req", False)
    state.close()
    with closing(open_state(str(path))) as again:  # and opens again without a migration
        assert version_of(again) == VERSION


def test_a_new_file_is_made_at_this_releases_version(tmp_path: Path) -> None:
    """A file that did not exist is created 0600, through every migration."""
    with closing(open_state(str(tmp_path / "new.sqlite"))) as db:
        assert version_of(db) == VERSION
        columns = {row[1] for row in db.execute("PRAGMA table_info(threads)")}
        assert {"opened_by", "first_prompt", "posts", "ended_at"} <= columns


def test_a_later_releases_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    """A schema version past this release's is not misread: StateError, exit 2 upstream."""
    path = tmp_path / "later.sqlite"
    with closing(open_state(str(path))) as db:
        db.execute(f"PRAGMA user_version = {VERSION + 1}")
    with pytest.raises(StateError, match="written by a later acp-relay"):
        open_state(str(path))


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """Garbage in the state file: StateError naming the file, no traceback."""
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    path.chmod(0o600)
    with pytest.raises(StateError, match="cannot use --state"):
        open_state(str(path))
