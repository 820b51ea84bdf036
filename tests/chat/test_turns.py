from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.chat.text import text_size
from relay.chat.turns import WORDS_PAGE_BYTES, Shown, TurnView


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def test_the_words_of_a_turn_are_one_message_edited_as_they_grow() -> None:
    """Chunks join into one slot; each take shows its whole text so far."""
    view = TurnView()
    view.start_turn()
    view.update(chunk("Hello "))
    assert view.take() == [Shown("1.words.1", "Hello ", None, "m.text")]
    view.update(chunk("world"))
    view.update(chunk("!"))
    assert view.take() == [Shown("1.words.1", "Hello world!", None, "m.text")]
    assert view.take() == []


def test_a_tool_call_is_one_line_edited_in_place() -> None:
    """Title, kind and status; an update changes the same slot."""
    view = TurnView()
    view.start_turn()
    view.update({"sessionUpdate": "tool_call", "toolCallId": "t.1", "title": "Write notes.md",
                 "kind": "edit", "status": "pending"})  # fmt: skip
    assert [s.body for s in view.take()] == ["🔧 Write notes.md · edit · ⏳ pending"]
    view.update({"sessionUpdate": "tool_call_update", "toolCallId": "t.1", "status": "completed"})
    shown = view.take()
    assert [(s.slot, s.body) for s in shown] == [
        ("tool.t.1", "🔧 Write notes.md · edit · ✅ completed")
    ]


def test_a_plan_is_a_checklist() -> None:
    """Each entry with its status mark."""
    view = TurnView()
    view.start_turn()
    view.update({"sessionUpdate": "plan", "entries": [
        {"content": "read", "status": "completed"}, {"content": "write", "status": "in_progress"},
        {"content": "test", "status": "pending"}]})  # fmt: skip
    assert view.take()[0].body == "📋 Plan\n☑ read\n◐ write\n☐ test"


def test_a_plan_update_shows_its_items_its_markdown_or_its_file() -> None:
    """plan_update (ACP's newer plan) reads through the conversation model as plan did."""
    view = TurnView()
    view.start_turn()
    items = {"type": "items", "entries": [{"content": "read", "status": "completed"}]}
    view.update({"sessionUpdate": "plan_update", "plan": items})
    assert view.take()[0].body == "📋 Plan\n☑ read"
    view.update(
        {"sessionUpdate": "plan_update", "plan": {"type": "markdown", "content": "# A\n- b"}}
    )
    assert view.take()[0].body == "📋 Plan\n# A\n- b"
    view.update({"sessionUpdate": "plan_update", "plan": {"type": "file", "uri": "file:///p.md"}})
    assert view.take()[0].body == "📋 Plan\nin file:///p.md"


def test_a_tool_call_restored_from_a_snapshot_keeps_its_title_for_later_updates() -> None:
    """A killed bot's view, restored, names a tool call by the title it had before."""
    view = TurnView()
    view.start_turn()
    view.update(
        {"sessionUpdate": "tool_call", "toolCallId": "t", "title": "Run tests", "kind": "execute"}
    )
    view.take()
    again = TurnView()
    again.restore(view.snapshot())
    again.update({"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"})
    assert again.take()[-1].body == "🔧 Run tests · execute · ✅ completed"


def test_thoughts_are_folded_shown_or_left_out() -> None:
    """Folded under a summary, shown as they are, or not at all."""
    for setting, body, html in [
        ("folded", "💭 Thinking: hmm", "<details><summary>💭 Thinking</summary>hmm</details>"),
        ("shown", "💭 hmm", "💭 hmm"),
    ]:
        view = TurnView(setting)  # type: ignore[arg-type]
        view.start_turn()
        view.update(chunk("hmm", "agent_thought_chunk"))
        assert view.take() == [Shown("1.thoughts", body, html)]
    hidden = TurnView("hidden")
    hidden.start_turn()
    hidden.update(chunk("hmm", "agent_thought_chunk"))
    assert hidden.take() == []


def test_the_end_of_a_turn_says_its_stop_reason() -> None:
    """A line of its own after the turn's messages."""
    view = TurnView()
    view.start_turn()
    view.update(chunk("done"))
    view.end_turn("end_turn")
    assert [s.body for s in view.take()] == ["done", "⏹ End of turn: end_turn"]


def test_a_turn_ended_before_its_words_were_taken_keeps_them() -> None:
    """The next turn starting does not lose what the last one said but was not yet shown."""
    view = TurnView()
    view.start_turn()
    view.update(chunk("first"))
    view.end_turn("end_turn")
    view.start_turn()
    view.update(chunk("second"))
    assert [(s.slot, s.body) for s in view.take()] == [
        ("1.words.1", "first"), ("1.end", "⏹ End of turn: end_turn"), ("2.words.1", "second"),
    ]  # fmt: skip


def test_the_agents_text_is_made_safe() -> None:
    """Control characters in the words are escaped; markup stays text (no HTML sent)."""
    view = TurnView()
    view.start_turn()
    view.update(chunk("<script>\x1b[2J"))
    assert view.take() == [Shown("1.words.1", "<script>\\x1b[2J", None, "m.text")]


def test_what_is_remembered_stays_bounded() -> None:
    """Finished turns are forgotten once handed out."""
    view = TurnView()
    for _ in range(50):
        view.start_turn()
        view.update(chunk("x"))
        view.end_turn("end_turn")
        view.take()
    assert len(view._order) <= 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=3000), min_size=1, max_size=30),
       st.lists(st.integers(min_value=0, max_value=29), max_size=10))  # fmt: skip
def test_streamed_words_are_shown_exactly_in_pages(pieces: list[str], takes: list[int]) -> None:
    """However the chunks come and whenever the thread is shown, the pages, joined, are the
    agent's text made safe, each within an event's size."""
    view = TurnView()
    view.start_turn()
    latest: dict[str, str] = {}
    for n, piece in enumerate(pieces):
        view.update(chunk(piece))
        if n in takes:
            latest.update((s.slot, s.body) for s in view.take())
    latest.update((s.slot, s.body) for s in view.take())
    pages = [latest[f"1.words.{n}"] for n in range(1, len(latest) + 1)]
    assert "".join(pages) == "".join(view.pages)
    assert all(text_size(page) <= WORDS_PAGE_BYTES for page in pages)


def test_slots_taken_but_not_yet_shown_survive_a_restart_as_changed() -> None:
    """A snapshot taken while a round shows what it took (another round's, an agent
    line's) keeps those slots as changed: a bot killed before they were shown shows them
    after its restart, a frozen one (the turn's end) with its words."""
    view = TurnView()
    view.start_turn()
    view.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}})
    view.end_turn("end_turn")
    taken = view.take()
    kept = view.snapshot()  # the round has not shown them yet
    again = TurnView()
    again.restore(kept)
    assert again.pending
    assert [s.body for s in again.take()] == [s.body for s in taken]
    view.shown([s.slot for s in taken])
    done = TurnView()
    done.restore(view.snapshot())
    assert not done.pending


def test_a_session_line_is_one_message_edited_across_turns_and_kept() -> None:
    """session_line makes a slot that stays live across turns, changes only when its text
    does, and comes back from a snapshot."""
    view = TurnView()
    view.session_line("settings", "⚙️ Mode: Z")
    view.start_turn()  # a turn starts before a round took the line: it stays live
    view.session_line("settings", "⚙️ Mode: A")
    [first] = view.take()
    assert first.body == "⚙️ Mode: A"
    view.start_turn()
    view.session_line("settings", "⚙️ Mode: A")
    assert view.take() == []
    view.session_line("settings", "⚙️ Mode: B")
    [second] = view.take()
    assert (first.slot, second.slot, second.body) == ("session.settings",) * 2 + ("⚙️ Mode: B",)
    assert view.is_live("session.settings")
    again = TurnView()
    again.restore(view.snapshot())
    again.session_line("settings", "⚙️ Mode: C")
    assert [s.body for s in again.take()] == ["⚙️ Mode: C"]
