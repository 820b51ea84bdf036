import json
from typing import Any

import pytest

from relay.acp.changes import Option
from relay.chat.permissions import (
    KEYCAPS,
    Request,
    ToolFacts,
    answer,
    chosen,
    decided_text,
    facts_of,
    outcome_option,
    read_request,
    request_text,
)
from relay.core import strictjson

ALLOW = {"optionId": "allow", "name": "Allow", "kind": "allow_once"}
REJECT = {"optionId": "reject", "name": "Reject", "kind": "reject_once"}


def asking(tool: dict[str, Any], options: list[Any], request_id: Any = "perm-1") -> Request:
    message = {"jsonrpc": "2.0", "id": request_id, "method": "session/request_permission",
               "params": {"sessionId": "s", "toolCall": tool, "options": options}}  # fmt: skip
    found = read_request(strictjson.loads(json.dumps(message).encode()))
    assert found is not None
    return found


def test_options_get_keycaps_in_the_request_order() -> None:
    """1️⃣ for the first option, 2️⃣ for the second; other reactions choose nothing."""
    request = asking({"title": "Write notes.md", "kind": "edit"}, [ALLOW, REJECT])
    assert request.keycaps() == ["1️⃣", "2️⃣"]
    assert request.option_for("1️⃣") == Option("allow", "Allow", "allow_once")
    assert request.option_for("2️⃣") == Option("reject", "Reject", "reject_once")
    assert request.option_for("3️⃣") is None
    assert request.option_for("👍") is None


def test_the_message_names_the_tool_call_and_each_option() -> None:
    """Title, kind, what it will do, each option behind its keycap, the approvers."""
    request = asking(
        {"title": "Run tests", "kind": "execute", "rawInput": {"command": ["pytest", "-q"]}},
        [ALLOW, REJECT],
    )
    body, html = request_text(request, "@alice:t")
    assert body.splitlines() == [
        "🔐 Permission requested: Run tests (execute)",
        "$ pytest -q",
        "1️⃣ Allow (allow_once)",
        "2️⃣ Reject (reject_once)",
        "React with a number to answer. Approvers: @alice:t",
    ]
    assert "<pre><code>$ pytest -q</code></pre>" in html


def test_a_diff_is_shown_as_a_bounded_excerpt() -> None:
    """The file and a unified diff excerpt, cut after a bounded number of lines."""
    new = "\n".join(f"line {n}" for n in range(100))
    request = asking(
        {"title": "Edit", "kind": "edit",
         "content": [{"type": "diff", "path": "/w/a.py", "oldText": "", "newText": new}]},
        [ALLOW],
    )  # fmt: skip
    lines = request.detail.splitlines()
    assert lines[0] == "/w/a.py:"
    assert lines[2] == "+line 0"
    assert lines[-1].startswith("… ")
    assert "more lines" in lines[-1]


def test_untrusted_text_in_a_request_stays_text() -> None:
    """Markup and control characters of the agent are escaped in both forms."""
    request = asking({"title": "<b>x</b>\x1b[2J", "kind": "edit"}, [ALLOW])
    body, html = request_text(request, "@alice:t")
    assert "\x1b" not in body
    assert "\\x1b[2J" in body
    assert "<b>x</b>" not in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "session/request_permission",
         "params": {"toolCall": {}, "options": []}},
        {"jsonrpc": "2.0", "method": "session/request_permission",
         "params": {"toolCall": {}, "options": [ALLOW]}},
        {"jsonrpc": "2.0", "id": 1, "method": "session/request_permission", "params": "x"},
    ],
)  # fmt: skip
def test_a_request_that_cannot_be_answered_here_is_not_read(message: dict[str, Any]) -> None:
    """No options or no id: nothing the chat could answer."""
    assert read_request(message) is None


@pytest.mark.parametrize(
    ("request_id", "option", "expected"),
    [
        ("perm-1", Option("allow", "Allow", "allow_once"),
         b'{"jsonrpc":"2.0","id":"perm-1","result":{"outcome":{"outcome":"selected",'
         b'"optionId":"allow"}}}'),
        (strictjson.Number("7"), None,
         b'{"jsonrpc":"2.0","id":7,"result":{"outcome":{"outcome":"cancelled"}}}'),
    ],
)  # fmt: skip
def test_the_answer_to_the_agent(request_id: Any, option: Option | None, expected: bytes) -> None:
    """The id exactly as the agent sent it; the option selected, or cancelled."""
    request = Request(request_id, "t", "edit", "", (Option("allow", "Allow", "allow_once"),))
    assert answer(request, option) == expected


def test_the_decision_says_what_who_when_and_where() -> None:
    """The edited message: what was chosen, by whom, when, from where."""
    request = asking({"title": "Write", "kind": "edit"}, [ALLOW, REJECT])
    words = chosen(request.options[0], "@alice:t", "12:00:01 UTC", "in the chat")
    body, _ = decided_text(request, words)
    assert (
        body
        == "🔐 Write (edit)\n✅ Allow (allow_once): chosen by @alice:t in the chat at 12:00:01 UTC"
    )


def test_an_answer_taken_elsewhere_names_its_option() -> None:
    """The relay's notice of an answer maps back to the option."""
    request = asking({"title": "Write", "kind": "edit"}, [ALLOW, REJECT])
    result = {"outcome": {"outcome": "selected", "optionId": "reject"}}
    assert outcome_option(request, result) == request.options[1]
    assert outcome_option(request, {"outcome": {"outcome": "cancelled"}}) is None


def test_more_options_than_keycaps_are_listed_without_a_key() -> None:
    """An eleventh option is shown numbered, to be answered with !answer 11 in the thread."""
    options = [{"optionId": f"o{n}", "name": f"O{n}", "kind": "allow_once"} for n in range(11)]
    request = asking({"title": "t", "kind": "edit"}, options)
    body, _ = request_text(request, "x")
    assert request.keycaps() == list(KEYCAPS)
    assert "11. O10 (allow_once): write !answer 11" in body
    assert "answer in the editor" not in body
    assert "React with a number (or write !answer N) to answer." in body


def test_the_facts_of_a_command_and_of_diffs() -> None:
    """A command (a string or argv) and the diffs' paths and sizes, each path once."""
    tool = strictjson.loads(
        json.dumps(
            {
                "title": "Edit config",
                "kind": "edit",
                "rawInput": {"command": ["rm", "-rf", "build"]},
                "locations": [{"path": "/Users/a/app/x.py"}, {"path": "/Users/a/app/x.py"}],
                "content": [
                    {"type": "diff", "path": "/Users/a/app/x.py", "oldText": "ab", "newText": "é"},
                    {"type": "content", "content": {"type": "text", "text": "ignored"}},
                ],
            }
        ).encode()
    )
    assert facts_of(tool) == ToolFacts(
        "Edit config", "edit", ("/Users/a/app/x.py",), "rm -rf build", diff_bytes=4
    )


@pytest.mark.parametrize(
    "tool",
    [{}, {"title": 3, "kind": None, "locations": "x", "content": [1, None], "rawInput": []}],
)
def test_the_facts_of_a_tool_call_of_the_wrong_shape_are_empty(tool: dict[str, Any]) -> None:
    """Fields of the wrong type become the defaults, never an error."""
    assert facts_of(tool) == ToolFacts("a tool call", "other")


def test_a_request_carries_its_session_and_its_tool_calls_facts_for_the_audit() -> None:
    """The session id and the facts come with the request read, and are not part of its
    identity (a request read again equals the one kept)."""
    tool = {"title": "Run", "kind": "execute", "rawInput": {"command": "make"}}
    request = asking(tool, [ALLOW])
    assert request.session == "s"
    assert request.facts == ToolFacts("Run", "execute", command="make")
    assert request == Request(request.request_id, request.title, request.kind, request.detail,
                              request.options)  # fmt: skip
