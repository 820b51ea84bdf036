import json
from typing import Any

from relay.acp.transcript import Transcript
from relay.chat.watched import Watched
from relay.core.watchprofile import (
    ANSWERED,
    DETACHED,
    Origin,
    conversation_frame,
    notification,
    read_frame,
    relay_frame,
    watching_frame,
)
from tests.support.recordings import GEMINI_SESSION, recorded

ALLOW = {"optionId": "allow", "name": "Allow", "kind": "allow_once"}
ASK = {"jsonrpc": "2.0", "id": "perm-1", "method": "session/request_permission",
       "params": {"sessionId": "s", "toolCall": {"title": "Write", "kind": "edit"},
                  "options": [ALLOW]}}  # fmt: skip
PROMPT = {"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
          "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "fix it"}]}}  # fmt: skip


def said(seq: int, origin: bytes, message: dict[str, Any]) -> Any:
    frame = conversation_frame(seq, Origin(origin.decode()), json.dumps(message).encode())
    return read_frame(frame)


def chunk(text: str) -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "s", "update": update}}  # fmt: skip


def test_the_editors_prompt_and_the_agents_turn_are_shown() -> None:
    """The opening said, the prompt named as the editor's, the words, the turn's end."""
    watched = Watched()
    watched.frame(read_frame(watching_frame("c-1", may_answer=True, first=1, messages=0,
                                            dropped=0)))  # fmt: skip
    watched.frame(said(1, b"client", PROMPT))
    watched.frame(said(2, b"agent", chunk("done")))
    watched.frame(
        said(3, b"agent", {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}})
    )
    bodies = [shown.body for shown in watched.view.take()]
    assert bodies[0].startswith("👀 Following the editor's connection c-1")
    assert "may be answered here" in bodies[0]
    assert bodies[1:] == ["🧑‍💻 The editor's prompt: fix it", "done", "⏹ End of turn: end_turn"]


def test_a_request_is_handed_out_and_the_relays_notice_says_who_answered() -> None:
    """The request to show; the relay's answered notice names the taker and the result."""
    watched = Watched()
    [request] = watched.frame(said(1, b"agent", ASK)).requests
    notice = notification(ANSWERED, {"id": "perm-1", "by": "controller", "subject": "alice",
                                     "result": {"outcome": {"outcome": "selected",
                                                            "optionId": "allow"}}})  # fmt: skip
    [taken] = watched.frame(read_frame(relay_frame(notice))).taken
    assert taken.request == request
    assert (taken.by, taken.subject) == ("controller", "alice")
    assert watched.frame(read_frame(relay_frame(notice))).taken == []


def test_an_answer_in_the_history_is_the_editors() -> None:
    """A request answered before the bot attached is taken by the editor, not shown pending."""
    watched = Watched()
    watched.frame(said(1, b"agent", ASK))
    answer = {"jsonrpc": "2.0", "id": "perm-1", "result": {"outcome": {"outcome": "cancelled"}}}
    [taken] = watched.frame(said(2, b"client", answer)).taken
    assert taken.by == "controller"


def test_lines_seen_before_a_reattach_are_skipped_and_state_survives_a_restart() -> None:
    """After a restore, the history's lines up to the last one taken do nothing twice."""
    watched = Watched()
    watched.frame(said(1, b"client", PROMPT))
    watched.frame(said(2, b"agent", ASK))
    watched.view.shown([shown.slot for shown in watched.view.take()])  # a round showed them
    again = Watched()
    again.restore(json.loads(json.dumps(watched.snapshot())))
    assert again.frame(said(2, b"agent", ASK)).requests == []
    end = {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}}
    again.frame(said(3, b"agent", end))
    assert [s.body for s in again.view.take()] == ["⏹ End of turn: end_turn"]
    answer = {"jsonrpc": "2.0", "id": "perm-1", "result": {"outcome": {"outcome": "cancelled"}}}
    assert len(again.frame(said(4, b"client", answer)).taken) == 1


def test_the_relays_notices_of_the_editor_dropping_and_resuming() -> None:
    """Detached and resumed are said in the thread."""
    watched = Watched()
    watched.frame(read_frame(relay_frame(notification(DETACHED, {"reason": "x", "grace": 5}))))
    assert "dropped" in watched.view.take()[0].body


def test_the_terminal_and_the_thread_show_the_same_recorded_session() -> None:
    """gemini-cli's recorded session fed to both renderers of the one conversation model:
    each shows the two prompts, the permission asked and answered, the write completed and
    each turn's end."""
    frames = [read_frame(watching_frame("c-1", may_answer=True, first=1, messages=0, dropped=0))]
    for seq, (side, line) in enumerate(recorded(GEMINI_SESSION), 1):
        frames.append(read_frame(conversation_frame(seq, Origin(side), line)))
    transcript, watched = Transcript(), Watched()
    text = "".join(transcript.show(frame) for frame in frames)
    steps = [watched.frame(frame) for frame in frames]
    bodies = [shown.body for shown in watched.view.take()]
    for prompt in ("hi", "write the notes"):
        assert f"user: {prompt}\n" in text
        assert f"🧑‍💻 The editor's prompt: {prompt}" in bodies
    assert text.count("agent asks permission: Writing to notes.txt [edit]") == 2
    assert [r.title for step in steps for r in step.requests] == ["Writing to notes.txt"] * 2
    assert text.count('client answered permission 1: selected "Allow" (proceed_once)') == 1
    taken = [(t.by, t.result["outcome"]["optionId"]) for step in steps for t in step.taken]
    assert taken == [("controller", "proceed_once")] * 2
    assert text.count("tool: Writing to notes.txt [edit] completed\n") == 2
    assert "🔧 Writing to notes.txt · edit · ✅ completed" in bodies
    assert text.count("agent: end of turn (end_turn)\n") == 2
    assert bodies.count("⏹ End of turn: end_turn") == 2
