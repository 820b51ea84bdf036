"""A permission request as a message with keycap options, its answer, and what was decided.

Pure. The agent's ``session/request_permission`` names a tool call (title, kind, what it
will do: the command, or the file and a bounded excerpt of the diff) and its options;
the message shows each option behind a keycap digit in the request's order (1️⃣ for the
first, …, 🔟 for the tenth; the eleventh on are numbered, answered with ``!answer N`` in
the thread). A reaction with a keycap (or an ``!answer``) from an approver becomes the
JSON-RPC answer to the agent; the message is then edited to say what was decided, by
whom, when and from where. Nothing is ever allowed automatically: a timeout answers
the request's reject option (:func:`relay.chat.rules.timeout_option`). What the tool call
will do is also read as :class:`ToolFacts`, for the audit.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relay.acp.changes import Option
from relay.acp.values import list_of, text_of
from relay.chat.text import cut, safe, safe_line, to_html
from relay.core import strictjson

KEYCAPS = ("1️⃣", "2️⃣", "3️⃣", "4️⃣", "5️⃣", "6️⃣", "7️⃣", "8️⃣", "9️⃣", "🔟")
MAX_DIFF_LINES = 40  # of the diff excerpt shown
MAX_DETAIL_CHARS = 3000  # of a command or a diff excerpt shown
MAX_PATHS = 16  # editor-side paths an audit keeps per tool call
MAX_COMMAND_CHARS = 2000  # of a command an audit keeps


@dataclass(frozen=True)
class ToolFacts:
    """What a tool call will do, as an audit keeps it (paths as the editor names them)."""

    title: str
    kind: str
    paths: tuple[str, ...] = ()
    command: str = ""
    diff_bytes: int = 0


NO_FACTS = ToolFacts("", "")


@dataclass(frozen=True)
class Request:
    """A permission request of the agent, as the thread shows it and answers it."""

    request_id: Any  # as the agent sent it (a string, or a strictjson.Number)
    title: str
    kind: str
    detail: str  # what it will do: a command, or a file and an excerpt of its diff
    options: tuple[Option, ...]
    # For the audit when it is asked (not kept with the request: the audit keeps them).
    session: str = field(default="", compare=False)
    facts: ToolFacts = field(default=NO_FACTS, compare=False)

    def option_for(self, key: str) -> Option | None:
        """The option behind keycap ``key`` (None for any other reaction)."""
        if key not in KEYCAPS:
            return None
        index = KEYCAPS.index(key)
        return self.options[index] if index < len(self.options) else None

    def keycaps(self) -> list[str]:
        """The keycaps the bot puts under the message, one per option."""
        return list(KEYCAPS[: len(self.options)])


def request_state(request: Request) -> dict[str, Any]:
    """A request as JSON values (for the state file); :func:`request_of` reads it back."""
    return {
        "id": strictjson.dumps(request.request_id).decode(),
        "title": request.title,
        "kind": request.kind,
        "detail": request.detail,
        "options": [[o.option_id, o.name, o.kind] for o in request.options],
    }


def request_of(state: dict[str, Any]) -> Request:
    return Request(
        strictjson.loads(state["id"].encode()),
        state["title"],
        state["kind"],
        state["detail"],
        tuple(Option(*option) for option in state["options"]),
    )


def read_request(message: dict[str, Any]) -> Request | None:
    """A ``session/request_permission`` request read from the agent's message (None when it
    is not one the chat can show: no id or no options)."""
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    tool = params.get("toolCall")
    tool = tool if isinstance(tool, dict) else {}
    options = tuple(
        Option(text_of(o.get("optionId")), text_of(o.get("name")), text_of(o.get("kind")))
        for o in list_of(params.get("options"))
        if isinstance(o, dict) and text_of(o.get("optionId"))
    )
    if "id" not in message or not options:
        return None
    return Request(
        request_id=message["id"],
        title=safe_line(text_of(tool.get("title")) or "a tool call"),
        kind=safe_line(text_of(tool.get("kind")) or "other", 40),
        detail=_detail(tool),
        options=options,
        session=text_of(params.get("sessionId")),
        facts=facts_of(tool),
    )


def facts_of(tool: Mapping[str, Any]) -> ToolFacts:
    """The audit's facts of a ``toolCall`` object (paths as the editor names them)."""
    paths = [
        text_of(loc.get("path")) for loc in list_of(tool.get("locations")) if isinstance(loc, dict)
    ]
    diffs = [
        item
        for item in list_of(tool.get("content"))
        if isinstance(item, dict) and item.get("type") == "diff"
    ]
    paths += [text_of(item.get("path")) for item in diffs]
    raw = tool.get("rawInput")
    command = raw.get("command") if isinstance(raw, dict) else None
    if isinstance(command, list):
        command = " ".join(text_of(word) for word in command)
    size = sum(
        len(text_of(d.get("newText")).encode()) + len(text_of(d.get("oldText")).encode())
        for d in diffs
    )
    return ToolFacts(
        title=text_of(tool.get("title")) or "a tool call",
        kind=text_of(tool.get("kind")) or "other",
        paths=tuple(dict.fromkeys(path for path in paths if path))[:MAX_PATHS],
        command=(command if isinstance(command, str) else "")[:MAX_COMMAND_CHARS],
        diff_bytes=size,
    )


def _detail(tool: dict[str, Any]) -> str:
    """What the tool call will do: its command, or its diffs' files and excerpts."""
    parts: list[str] = []
    raw = tool.get("rawInput")
    command = raw.get("command") if isinstance(raw, dict) else None
    if isinstance(command, list):
        command = " ".join(text_of(word) for word in command)
    if isinstance(command, str) and command:
        parts.append("$ " + command)
    for item in list_of(tool.get("content"))[:4]:
        if isinstance(item, dict) and item.get("type") == "diff":
            parts.append(_diff(item))
    if not parts:
        paths = [
            text_of(loc.get("path"))
            for loc in list_of(tool.get("locations"))[:4]
            if isinstance(loc, dict)
        ]
        parts.extend(path for path in paths if path)
    return cut(safe("\n".join(parts)), MAX_DETAIL_CHARS)


def _diff(item: dict[str, Any]) -> str:
    path = text_of(item.get("path")) or "a file"
    old = text_of(item.get("oldText")).splitlines()
    new = text_of(item.get("newText")).splitlines()
    lines = list(difflib.unified_diff(old, new, "before", "after", lineterm="", n=1))[2:]
    shown = lines[:MAX_DIFF_LINES]
    more = len(lines) - len(shown)
    tail = [f"… {more} more lines"] if more > 0 else []
    return "\n".join([f"{path}:", *shown, *tail])


def request_text(request: Request, approvers: str) -> tuple[str, str]:
    """The request's message (plain text and HTML): what, then each option's keycap."""
    head = f"🔐 Permission requested: {request.title} ({request.kind})"
    options = [
        f"{KEYCAPS[i]} {safe_line(o.name)} ({safe_line(o.kind, 40)})"
        for i, o in enumerate(request.options[: len(KEYCAPS)])
    ]
    more = enumerate(request.options[len(KEYCAPS) :], len(KEYCAPS) + 1)
    options += [
        f"{n}. {safe_line(o.name)} ({safe_line(o.kind, 40)}): write !answer {n}" for n, o in more
    ]
    typed = len(request.options) > len(KEYCAPS)
    how = "React with a number" + (" (or write !answer N)" if typed else "")
    foot = f"{how} to answer. Approvers: {safe_line(approvers, 400)}"
    body = "\n".join([head, *([request.detail] if request.detail else []), *options, foot])
    detail_html = f"<pre><code>{to_html(request.detail)}</code></pre>" if request.detail else ""
    html = (
        f"<b>🔐 Permission requested:</b> {to_html(request.title)} ({to_html(request.kind)})"
        f"{detail_html}{'<br>'.join(to_html(line) for line in options)}"
        f"<br><i>{to_html(foot)}</i>"
    )
    return body, html


def decided_text(request: Request, decision: str) -> tuple[str, str]:
    """The request's message once no longer pending: what was decided (plain text, HTML)."""
    head = f"🔐 {request.title} ({request.kind})"
    body = f"{head}\n{decision}"
    return body, f"<b>{to_html(head)}</b><br>{to_html(decision)}"


def chosen(option: Option, by: str, when: str, where: str) -> str:
    """The decision's words: the option, who chose it, when and from where."""
    return (
        f"✅ {safe_line(option.name)} ({safe_line(option.kind, 40)}): chosen by "
        f"{safe_line(by)} {where} at {when}"
    )


def answer(request: Request, option: Option | None) -> bytes:
    """The JSON-RPC answer to the agent: the option selected, or ``cancelled``."""
    outcome: dict[str, Any] = (
        {"outcome": "cancelled"}
        if option is None
        else {"outcome": "selected", "optionId": option.option_id}
    )
    reply = {"jsonrpc": "2.0", "id": request.request_id, "result": {"outcome": outcome}}
    return strictjson.dumps(reply)


def outcome_option(request: Request, result: Any) -> Option | None:
    """The option an answer ``result`` selected (None for cancelled or unknown)."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
        return None
    chosen_id = text_of(outcome.get("optionId"))
    return next((o for o in request.options if o.option_id == chosen_id), None)
