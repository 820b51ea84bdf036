import json
from typing import Any

from relay.chat.attachments import read_attachment
from relay.chat.controls import Asked
from relay.chat.session import MAX_QUEUED, ChatSession, Step
from relay.core import strictjson


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def sent(step: Step) -> list[dict[str, Any]]:
    return [json.loads(each) for each in step.send]


def opened() -> ChatSession:
    session = ChatSession("/work/app", version="1.0")
    session.start()
    [new] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": 1, "result": {}})))
    assert new["method"] == "session/new"
    session.agent_line(line({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s-1"}}))
    return session


def test_the_session_opens_with_initialize_then_session_new() -> None:
    """initialize without fs or terminal; session/new with the cwd once it is answered."""
    session = ChatSession("/work/app", version="1.0")
    [init] = sent(session.start())
    assert init["method"] == "initialize"
    assert init["params"]["clientCapabilities"] == {
        "fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False
    }  # fmt: skip
    [new] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": 1, "result": {}})))
    assert new == {"jsonrpc": "2.0", "id": 2, "method": "session/new",
                   "params": {"cwd": "/work/app", "mcpServers": []}}  # fmt: skip


def test_a_prompt_before_the_session_is_open_waits_for_it() -> None:
    """The first prompt is sent once session/new is answered."""
    session = ChatSession("/w", version="1.0")
    session.start()
    assert session.prompt("hello").send == []
    session.agent_line(line({"jsonrpc": "2.0", "id": 1, "result": {}}))
    [prompt] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": 2,
                                             "result": {"sessionId": "s-1"}})))  # fmt: skip
    assert prompt["method"] == "session/prompt"
    assert prompt["params"] == {"sessionId": "s-1", "prompt": [{"type": "text", "text": "hello"}]}


def test_prompts_during_a_turn_are_queued_and_sent_in_order() -> None:
    """One turn at a time; the thread is told a prompt waits; the queue is bounded."""
    session = opened()
    [first] = sent(session.prompt("one"))
    assert session.prompt("two").send == []
    assert any("Queued" in s.body for s in session.view.take())
    for n in range(MAX_QUEUED + 3):
        session.prompt(f"more {n}")
    assert len(session.queue) == MAX_QUEUED
    [second] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": first["id"],
                                             "result": {"stopReason": "end_turn"}})))  # fmt: skip
    assert second["params"]["prompt"][0]["text"] == "two"


def test_cancel_sends_session_cancel_only_while_a_turn_runs() -> None:
    """session/cancel for the session; with no turn, the thread is told there is none."""
    session = opened()
    assert session.cancel().send == []
    session.prompt("one")
    [cancel] = sent(session.cancel())
    assert cancel == {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s-1"}}


def test_cancel_carries_the_turns_permission_requests_to_answer_cancelled() -> None:
    """A cancel's step names the turn's permission requests (kept over a restore), for the
    thread to answer them ``cancelled``; the next turn starts with none."""
    session = opened()
    session.prompt("one")
    for request_id in (7, 8):
        session.agent_line(line({"jsonrpc": "2.0", "id": request_id,
                                 "method": "session/request_permission",
                                 "params": {"sessionId": "s-1", "toolCall": {"title": "Write"},
                                            "options": [{"optionId": "a", "name": "A",
                                                         "kind": "allow_once"}]}}))  # fmt: skip
    again = ChatSession("/work/app", version="1.0")
    again.restore(json.loads(json.dumps(session.snapshot())))
    step = again.cancel()
    assert [r.request_id for r in step.cancelled] == [strictjson.Number("7"),
                                                      strictjson.Number("8")]  # fmt: skip
    assert [m["method"] for m in sent(step)] == ["session/cancel"]
    again.prompt("two")
    assert again.cancel().cancelled == []


def test_a_permission_request_is_handed_to_the_thread() -> None:
    """The request read, with its id as the agent sent it."""
    session = opened()
    step = session.agent_line(
        line(
            {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "session/request_permission",
                "params": {
                    "sessionId": "s-1",
                    "toolCall": {"title": "Write", "kind": "edit"},
                    "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
                },
            }
        )
    )
    assert [r.title for r in step.requests] == ["Write"]
    assert step.requests[0].request_id == strictjson.Number("9")


def test_requests_the_chat_does_not_serve_get_method_not_found() -> None:
    """fs and terminal requests (not offered) get -32601 with the id."""
    session = opened()
    [reply] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": "r", "method":
                                            "fs/read_text_file", "params": {}})))  # fmt: skip
    assert reply["id"] == "r"
    assert reply["error"]["code"] == -32601


def test_a_refused_session_fails_the_thread_saying_why() -> None:
    """An error to session/new is the thread's failure, in words."""
    session = ChatSession("/nowhere", version="1.0")
    session.start()
    session.agent_line(line({"jsonrpc": "2.0", "id": 1, "result": {}}))
    step = session.agent_line(line({"jsonrpc": "2.0", "id": 2, "error": {
        "code": -32603, "message": "Directory does not exist: /nowhere"}}))  # fmt: skip
    assert step.failed == (
        "the agent could not open a session: Directory does not exist: /nowhere (-32603)"
    )


def test_updates_reach_the_view_and_garbage_is_said_once() -> None:
    """Agent message chunks show as words; an unreadable line is a note."""
    session = opened()
    session.prompt("hi")
    session.agent_line(
        line(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": "s-1",
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": "hello"},
                    },
                },
            }
        )
    )
    session.agent_line(b"{not json")
    bodies = [s.body for s in session.view.take()]
    assert bodies[0] == "hello"
    assert "not readable JSON" in bodies[1]


def test_a_session_kept_and_restored_carries_on_as_if_never_stopped() -> None:
    """Snapshot (as JSON) and restore mid-turn: the same words, the same answers awaited."""
    session = opened()
    [prompt] = sent(session.prompt("one"))
    session.prompt("two")
    session.agent_line(
        line(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": "s-1",
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": "hal"},
                    },
                },
            }
        )
    )
    kept = json.loads(json.dumps(session.snapshot()))
    again = ChatSession("/work/app", version="1.0")
    again.restore(kept)
    for each in (session, again):
        each.agent_line(
            line(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {
                        "sessionId": "s-1",
                        "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": "f"},
                        },
                    },
                }
            )
        )
    assert again.view.take() == session.view.take()
    end = line({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}})
    assert sent(again.agent_line(end)) == sent(session.agent_line(end))


def test_the_turns_prompter_follows_the_queue_and_survives_a_restore() -> None:
    """Who prompted the running turn (the self-approval rule's) is the writer of the prompt
    that started it, queued prompts keeping their writers, across a snapshot and restore."""
    session = opened()
    [first] = sent(session.prompt("one", "@alice:t"))
    session.prompt("two", "@bob:t")
    assert session.turn_by == "@alice:t"
    kept = json.loads(json.dumps(session.snapshot()))
    again = ChatSession("/w", version="1.0")
    again.restore(kept)
    assert (again.turn_by, list(again.queued_by)) == ("@alice:t", ["@bob:t"])
    again.agent_line(line({"jsonrpc": "2.0", "id": first["id"], "result": {"stopReason": "x"}}))
    assert again.turn_by == "@bob:t"
    older = {k: v for k, v in kept.items() if k not in ("by", "queued_by")}
    oldest = ChatSession("/w", version="1.0")
    oldest.restore(older)  # a snapshot of the release before: nobody known
    assert (oldest.turn_by, list(oldest.queued_by)) == (None, [None])


OPTIONS = [
    {"id": "model", "name": "Model", "category": "model", "type": "select",
     "currentValue": "fast", "options": [{"value": "fast", "name": "Fast"},
                                         {"value": "deep", "name": "Deep"}]},
]  # fmt: skip
AVAILABLE = [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}]
MODES = {"currentModeId": "default", "availableModes": AVAILABLE}


def with_controls() -> tuple[ChatSession, list[str]]:
    """A session whose agent offers modes and a model option; the bodies shown so far."""
    session = ChatSession("/w", version="1.0")
    session.start()
    session.agent_line(line({"jsonrpc": "2.0", "id": 1, "result": {}}))
    session.agent_line(line({"jsonrpc": "2.0", "id": 2, "result": {
        "sessionId": "s-1", "modes": MODES, "configOptions": OPTIONS}}))  # fmt: skip
    return session, [shown.body for shown in session.view.take()]


def test_the_settings_line_shows_at_open_and_follows_the_agents_updates() -> None:
    """One session line with the mode and each option, edited when the agent updates them;
    the agent's commands in a line of their own."""
    session, bodies = with_controls()
    assert bodies == ["⚙️ Mode: Default · Model: Fast (change: !mode ID, !model VALUE, "
                      "!set OPTION VALUE; approvers only)"]  # fmt: skip
    update = {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}
    session.agent_line(line({"jsonrpc": "2.0", "method": "session/update",
                             "params": {"sessionId": "s-1", "update": update}}))  # fmt: skip
    review = [{"name": "review", "description": "Review the diff"}]
    commands = {"sessionUpdate": "available_commands_update", "availableCommands": review}
    session.agent_line(line({"jsonrpc": "2.0", "method": "session/update",
                             "params": {"sessionId": "s-1", "update": commands}}))  # fmt: skip
    shown = session.view.take()
    assert [s.slot for s in shown] == ["session.settings", "session.commands"]
    assert shown[0].body.startswith("⚙️ Mode: Plan · Model: Fast")
    assert (
        shown[1].body == "The agent's commands (send one as a prompt):\n/review — Review the diff"
    )


def test_a_change_is_sent_between_turns_queued_during_one_and_recorded_with_who() -> None:
    """!model between turns: session/set_config_option at once; during a turn: queued and
    sent after it, before the next prompt; the answer's options become the line; the thread
    records who changed what."""
    session, _ = with_controls()
    [request] = sent(session.change(Asked("model", "deep"), "@lead:t"))
    assert request["method"] == "session/set_config_option"
    assert request["params"] == {"sessionId": "s-1", "configId": "model", "value": "deep"}
    assert session.prompt("go", "@bob:t").send == []  # waits for the change's answer
    chosen = [{**OPTIONS[0], "currentValue": "deep"}]
    [prompt] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": request["id"],
                                             "result": {"configOptions": chosen}})))  # fmt: skip
    assert prompt["method"] == "session/prompt"
    bodies = [s.body for s in session.view.take()]
    assert "⚙️ Model → Deep (by @lead:t)" in bodies
    assert any(b.startswith("⚙️ Mode: Default · Model: Deep") for b in bodies)
    assert session.change(Asked("mode", "plan"), "@lead:t").send == []  # a turn runs: queued
    [mode] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": prompt["id"],
                                           "result": {"stopReason": "end_turn"}})))  # fmt: skip
    assert (mode["method"], mode["params"]["modeId"]) == ("session/set_mode", "plan")
    session.agent_line(line({"jsonrpc": "2.0", "id": mode["id"], "error": {
        "code": -32603, "message": "not now"}}))  # fmt: skip
    assert any("The agent refused Mode → Plan (by @lead:t): not now (-32603)" in s.body
               for s in session.view.take())  # fmt: skip


def test_a_value_the_agent_did_not_offer_is_answered_with_the_choices() -> None:
    """Nothing is sent; the thread says the values."""
    session, _ = with_controls()
    assert session.change(Asked("model", "huge"), "@lead:t").send == []
    [said] = [s.body for s in session.view.take()]
    assert said == "⚠️ Model has no value 'huge'; its values: fast, deep"


def test_changes_asked_before_the_session_opens_are_made_before_the_first_prompt() -> None:
    """@bot !mode plan PROMPT: the mode is set once the session opens, then the prompt."""
    session = ChatSession("/w", version="1.0")
    session.start()
    session.change(Asked("mode", "plan"), "@lead:t")
    session.prompt("fix it", "@lead:t")
    session.agent_line(line({"jsonrpc": "2.0", "id": 1, "result": {}}))
    [mode] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": 2, "result": {
        "sessionId": "s-1", "modes": MODES}})))  # fmt: skip
    assert mode["method"] == "session/set_mode"
    [prompt] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": mode["id"], "result": {}})))
    assert prompt["params"]["prompt"] == [{"type": "text", "text": "fix it"}]
    assert session.controls.mode is not None
    assert session.controls.mode.current == "plan"  # accepted: shown before any update


def test_usage_shows_at_the_end_of_a_turn_and_on_request() -> None:
    """usage_update keeps the figures; the end-of-turn line carries them; !usage says them."""
    session, _ = with_controls()
    session.usage()
    assert session.view.take()[-1].body == "The agent has not said what this session uses."
    [prompt] = sent(session.prompt("go"))
    usage = {"sessionUpdate": "usage_update", "used": 53000, "size": 200000,
             "cost": {"amount": 0.42, "currency": "USD"}}  # fmt: skip
    session.agent_line(line({"jsonrpc": "2.0", "method": "session/update",
                             "params": {"sessionId": "s-1", "update": usage}}))  # fmt: skip
    session.agent_line(line({"jsonrpc": "2.0", "id": prompt["id"],
                             "result": {"stopReason": "end_turn"}}))  # fmt: skip
    end = session.view.take()[-1].body
    assert end == "⏹ End of turn: end_turn · Context: 53,000 of 200,000 tokens (26 %); " \
                  "cost so far 0.42 USD"  # fmt: skip


def test_controls_and_a_change_in_flight_survive_a_snapshot() -> None:
    """The controls and the change awaiting its answer are kept and restored."""
    session, _ = with_controls()
    [request] = sent(session.change(Asked("model", "deep"), "@lead:t"))
    session.prompt("later", "@bob:t")
    again = ChatSession("/w", version="1.0")
    again.restore(json.loads(json.dumps(session.snapshot())))
    assert again.controls == session.controls
    [prompt] = sent(again.agent_line(line({"jsonrpc": "2.0", "id": request["id"],
                                           "result": {}})))  # fmt: skip
    assert prompt["params"]["prompt"][0]["text"] == "later"
    assert again.controls.by_category("model").current == "deep"  # type: ignore[union-attr]


def test_files_join_the_next_prompt_after_its_text_and_only_between_turns() -> None:
    """attach() keeps what the agent can take (said), refuses the rest (said); the prompt
    carries its blocks after its text; fetched blocks for a busy session are not queued."""
    session = ChatSession("/w", version="1.0")
    session.start()
    caps = {"agentCapabilities": {"promptCapabilities": {"image": True}}}
    session.agent_line(line({"jsonrpc": "2.0", "id": 1, "result": caps}))
    session.agent_line(line({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s-1"}}))
    image = read_attachment("$i", "@a:t", "$r", {"msgtype": "m.image", "body": "a.png",
                            "url": "mxc://hs/i", "info": {"mimetype": "image/png"}})  # fmt: skip
    text = read_attachment("$f", "@a:t", "$r", {"msgtype": "m.file", "body": "n.md",
                           "url": "mxc://hs/f", "info": {"mimetype": "text/markdown"}})  # fmt: skip
    session.attach(image, 100)
    session.attach(text, 100)
    assert [s.body for s in session.view.take()] == [
        "📎 a.png joins the next prompt.",
        "⚠️ Not attached: n.md: this agent takes no files in prompts (no embeddedContext).",
    ]
    assert session.idle
    assert session.take_attached() == [image]
    block = {"type": "image", "mimeType": "image/png", "data": "AA=="}
    [prompt] = sent(session.prompt("look", "@a:t", [block]))
    assert prompt["params"]["prompt"] == [{"type": "text", "text": "look"}, block]
    assert session.prompt("more", "@a:t", [block]).send == []  # a turn runs
    assert "sent between turns" in session.view.take()[-1].body


def bringing(caps: dict[str, Any]) -> tuple[ChatSession, dict[str, Any]]:
    """A session asked to bring back s-9, after initialize answered with ``caps``."""
    session = ChatSession("/w", version="1.0")
    session.resuming = "s-9"
    session.start()
    sent_now = sent(session.agent_line(line({"jsonrpc": "2.0", "id": 1,
                                             "result": {"agentCapabilities": caps}})))  # fmt: skip
    return session, sent_now[0] if sent_now else {}


def test_a_session_brought_back_by_load_shows_its_history_within_bounds() -> None:
    """session/load with the id; the replay shows each person's message and the agent's
    words; past REPLAY_BYTES the rest is counted, not shown; prompts wait for it."""
    session, load = bringing({"loadSession": True})
    assert (load["method"], load["params"]["sessionId"]) == ("session/load", "s-9")
    assert session.prompt("next").send == []
    for n in range(3):
        for kind, text in (("user_message_chunk", f"q{n}"), ("agent_message_chunk", "a" * 200_000)):
            update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
            params = {"sessionId": "s-9", "update": update}
            session.agent_line(
                line({"jsonrpc": "2.0", "method": "session/update", "params": params})
            )
    [prompt] = sent(session.agent_line(line({"jsonrpc": "2.0", "id": load["id"], "result": {}})))
    assert prompt["params"]["prompt"][0]["text"] == "next"
    bodies = [s.body for s in session.view.take()]
    assert bodies[0] == "🗨 q0"
    assert "🗨 q1" in bodies
    assert "🗨 q2" not in bodies
    assert "↩ Session s-9 is back, its history above (the rest of its history, 2 updates, " \
           "not shown)." in bodies  # fmt: skip


def test_a_session_brought_back_by_resume_or_not_at_all() -> None:
    """resume is preferred and said to replay nothing; an agent offering neither fails the
    thread saying so; an agent refusing the id fails it with its words."""
    session, resume = bringing({"loadSession": True, "sessionCapabilities": {"resume": {}}})
    assert resume["method"] == "session/resume"
    session.agent_line(line({"jsonrpc": "2.0", "id": resume["id"], "result": {}}))
    assert session.session_id == "s-9"
    assert "resumed: the agent does not replay it" in session.view.take()[-1].body
    session = ChatSession("/w", version="1.0")
    session.resuming = "s-9"
    session.start()
    failed = session.agent_line(line({"jsonrpc": "2.0", "id": 1, "result": {}})).failed
    assert failed is not None
    assert "neither session/resume nor session/load" in failed
    session, load = bringing({"loadSession": True})
    error = {"code": -32002, "message": "no such"}
    refused = session.agent_line(line({"jsonrpc": "2.0", "id": load["id"], "error": error}))
    assert refused.failed == "the agent could not bring back session s-9: no such (-32002)"


def test_an_agents_refusal_says_the_reason_its_error_data_gives() -> None:
    """ "Internal error" alone says nothing: the details (or message) in its data follow."""
    session, _ = with_controls()
    [request] = sent(session.change(Asked("mode", "plan"), "@lead:t"))
    data = {"details": "Cannot enable privileged approval modes in an untrusted folder."}
    error = {"code": -32603, "message": "Internal error", "data": data}
    session.agent_line(line({"jsonrpc": "2.0", "id": request["id"], "error": error}))
    assert session.view.take()[-1].body == (
        "⚠️ The agent refused Mode → Plan (by @lead:t): Internal error (-32603): Cannot enable "
        "privileged approval modes in an untrusted folder."
    )
