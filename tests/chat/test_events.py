from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.chat.attachments import Attachment
from relay.chat.events import (
    Encryption,
    Message,
    Other,
    Reaction,
    bounded,
    events_of,
    in_thread,
    message,
    reaction,
    read_event,
    replacing,
    rooms_of,
)
from relay.chat.text import CONTENT_BYTES, MAX_EVENT_BYTES, json_size


def test_a_message_pings_nobody() -> None:
    """Whatever the text says (@room, a user id), m.mentions is empty."""
    content = message("@room @alice:t look", html="<b>x</b>")
    assert content["m.mentions"] == {}
    assert content["format"] == "org.matrix.custom.html"


def test_a_thread_reply_names_its_root_and_falls_back_to_a_reply() -> None:
    """m.thread with the reply fallback for clients without threads."""
    content = in_thread(message("hi"), "$root", "$last")
    assert content["m.relates_to"] == {
        "rel_type": "m.thread", "event_id": "$root", "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$last"},
    }  # fmt: skip


def test_an_edit_carries_the_new_content_and_a_fallback() -> None:
    """m.replace of the original, m.new_content without relation, body '* ...'."""
    edit = replacing("$orig", in_thread(message("new"), "$root", "$root"))
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$orig"}
    assert edit["m.new_content"]["body"] == "new"
    assert "m.relates_to" not in edit["m.new_content"]
    assert edit["body"] == "* new"
    assert edit["m.mentions"] == {}


def test_a_reaction_annotates_its_target() -> None:
    """A key on an event."""
    assert reaction("$e", "1️⃣") == {
        "m.relates_to": {"rel_type": "m.annotation", "event_id": "$e", "key": "1️⃣"}
    }


@given(st.text(min_size=1, max_size=50), st.integers(min_value=1, max_value=3000))
def test_every_message_and_edit_fits_one_event(piece: str, times: int) -> None:
    """However long and however escaped the text, a message and its edit fit 64 KiB."""
    body = piece * times
    content = message(body, html=body)
    assert json_size(content) <= CONTENT_BYTES < MAX_EVENT_BYTES
    assert json_size(replacing("$e", content)) <= CONTENT_BYTES


def test_a_long_body_is_cut_with_a_note() -> None:
    """The HTML goes first, then the body is cut saying how much."""
    content = bounded({"msgtype": "m.text", "body": "x" * 100_000, "formatted_body": "y"})
    assert "formatted_body" not in content
    assert content["body"].startswith("xxx")
    assert "more characters]" in content["body"]


def event(kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "content": content, "event_id": "$e", "sender": "@a:t", **extra}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (event("m.room.message", {"msgtype": "m.text", "body": "hi"}),
         Message("$e", "@a:t", "hi", None, frozenset(), False, "m.text")),
        (event("m.room.message", {"msgtype": "m.text", "body": "hi",
                                  "m.mentions": {"user_ids": ["@bot:t", 5]},
                                  "m.relates_to": {"rel_type": "m.thread", "event_id": "$r"}}),
         Message("$e", "@a:t", "hi", "$r", frozenset({"@bot:t"}), False, "m.text")),
        (event("m.room.message", {"msgtype": "m.text", "body": "* hi",
                                  "m.new_content": {"body": "hi"},
                                  "m.relates_to": {"rel_type": "m.replace", "event_id": "$o"}}),
         Message("$e", "@a:t", "* hi", None, frozenset(), True, "m.text")),
        (event("m.reaction", {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$t",
                                               "key": "1️⃣"}}),
         Reaction("$e", "@a:t", "$t", "1️⃣")),
        (event("m.reaction", {"m.relates_to": {"rel_type": "m.annotation", "key": "1️⃣"}}),
         Other("$e")),
        (event("m.room.encrypted", {"algorithm": "m.megolm.v1.aes-sha2"}),
         Encryption("$e", "@a:t")),
        (event("m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"}),
         Encryption("$e", "@a:t")),
        (event("m.room.message", {"msgtype": "m.text", "body": 5}), Other("$e")),
        (event("m.room.message", {"msgtype": "m.bogus", "body": "@bot:t hi",
                                  "m.mentions": {"user_ids": ["@bot:t"]}}), Other("$e")),
        (event("m.room.message", {"body": "@bot:t hi"}), Other("$e")),
        (event("m.room.message", {"msgtype": "m.notice", "body": "hi"}),
         Message("$e", "@a:t", "hi", None, frozenset(), False, "m.notice")),
        (event("m.room.message", "not an object"), Other("$e")),
        ({"type": "m.room.message", "content": {"body": "x"}}, Other("")),
        (event("m.room.redaction", {}, redacts="$x"), Other("$e")),
    ],
)  # fmt: skip
def test_incoming_events_are_read_field_by_field(raw: dict[str, Any], expected: object) -> None:
    """Each kind of event read, malformed ones taken as nothing to act on."""
    assert read_event(raw) == expected


@given(st.dictionaries(st.text(max_size=10), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5),
                                                                       children, max_size=3),
    max_leaves=10)))  # fmt: skip
def test_any_event_is_read_without_error(raw: dict[str, Any]) -> None:
    """Whatever a room member sends, reading it raises nothing."""
    assert read_event(raw) is not None


def test_an_image_or_a_file_is_an_attachment_and_its_edit_is_not() -> None:
    """m.image, m.file (and other media) are read as attachments with their thread; an
    edit of one is nothing to act on."""
    content = {"msgtype": "m.image", "body": "shot.png", "url": "mxc://hs/x",
               "info": {"mimetype": "image/png", "size": 3},
               "m.relates_to": {"rel_type": "m.thread", "event_id": "$root"}}  # fmt: skip
    event = {"type": "m.room.message", "event_id": "$e", "sender": "@a:t", "content": content}
    found = read_event(event)
    assert isinstance(found, Attachment)
    assert (found.thread, found.url, found.size) == ("$root", "mxc://hs/x", 3)
    edited = {**event, "content": {**content, "m.new_content": content}}
    assert not isinstance(read_event(edited), Attachment)


def test_a_sync_answers_rooms_and_events_are_read_within_their_shapes() -> None:
    """Rooms of a kind with their data (an empty object where it is not one); a block's
    events, each an object; anything else nothing."""
    room_a: dict[str, Any] = {"timeline": {"events": [{"type": "x"}, 3, None]}}
    answer = {"rooms": {"join": {"!a": room_a, "!b": "junk"}, "invite": {"!c": {}}}}
    joined = rooms_of(answer, "join")
    assert joined == {"!a": room_a, "!b": {}}
    assert list(rooms_of(answer, "invite")) == ["!c"]
    assert rooms_of({"rooms": []}, "join") == {}
    assert events_of(joined["!a"].get("timeline")) == [{"type": "x"}]
    assert events_of({"events": "no"}) == []
