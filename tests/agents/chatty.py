"""An agent whose turns use every kind of update a thread shows: a plan, thoughts, a tool
call and its update, words (markup and mentions among them), and a permission request.

Plain JSON lines, no SDK. ``initialize`` and ``session/new`` are answered; each
``session/prompt`` gets: a plan (read, edit, test), a thought, the tool call
``Run pytest -q`` (kind execute, pending), a permission request for it (allow / reject,
id ``ask-N``), then, once answered, the tool call's status (completed when allowed, else
failed), the plan done, the words ``I ran the tests: <b>42 passed</b> @room``, and
``end_turn``. ``session/cancel`` answers the waiting prompt with ``cancelled``.
"""

import json
import sys

turn = 0
waiting: dict[str, object] = {}  # the prompt awaiting the permission answer


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def update(session: str, body: dict[str, object]) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": session, "update": body},
        }
    )


def plan(session: str, done: int) -> None:
    entries = [
        {"content": step, "status": "completed" if n < done else "pending", "priority": "medium"}
        for n, step in enumerate(["read", "edit", "test"])
    ]
    update(session, {"sessionUpdate": "plan", "entries": entries})


for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": 1}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": ident, "result": {"sessionId": "s-1"}})
    elif method == "session/prompt":
        turn += 1
        session = message["params"]["sessionId"]
        waiting = {"id": ident, "session": session}
        plan(session, 1)
        update(
            session,
            {
                "sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": "The tests first."},
            },
        )
        update(
            session,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": f"run-{turn}",
                "title": "Run pytest -q",
                "kind": "execute",
                "status": "pending",
            },
        )
        send(
            {
                "jsonrpc": "2.0",
                "id": f"ask-{turn}",
                "method": "session/request_permission",
                "params": {
                    "sessionId": session,
                    "toolCall": {
                        "toolCallId": f"run-{turn}",
                        "title": "Run pytest -q",
                        "kind": "execute",
                        "rawInput": {"command": ["pytest", "-q"]},
                    },
                    "options": [
                        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                    ],
                },
            }
        )
    elif method == "session/cancel" and waiting:
        send({"jsonrpc": "2.0", "id": waiting["id"], "result": {"stopReason": "cancelled"}})
        waiting = {}
    elif str(ident).startswith("ask-") and "result" in message and waiting:
        session = str(waiting["session"])
        outcome = message["result"]["outcome"]
        allowed = outcome.get("optionId") == "allow"
        update(
            session,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": f"run-{turn}",
                "status": "completed" if allowed else "failed",
            },
        )
        plan(session, 3 if allowed else 1)
        words = ["I ran the tests: ", "<b>42 passed</b> ", "@room"] if allowed else ["Not run."]
        for word in words:
            update(
                session,
                {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": word}},
            )
        send({"jsonrpc": "2.0", "id": waiting["id"], "result": {"stopReason": "end_turn"}})
        waiting = {}
