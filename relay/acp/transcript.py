"""A watched conversation as text for a terminal: what ``acp-relay watch`` prints.

Pure: the frames of the watch profile in (read by :func:`relay.core.watching.read_frame`),
text out. Each line of the conversation becomes what a person wants to see of it: the
user's prompts, the agent's words (its ``agent_message_chunk`` updates joined into
paragraphs, its thoughts marked as such), tool calls with their title, kind and status as
they change, permission requests with their options and the answers they got, plans, and
the relay's own ``_acp-relay/`` notices. Anything else gets one short line naming it.

Everything shown of the conversation is escaped (:func:`relay.core.printable.escaped`): an
agent's text cannot move the cursor or retitle the terminal. What one frame produces is
bounded: a line is parsed up to :data:`MAX_PARSED_BYTES`, each text is cut at
:data:`MAX_TEXT_CHARS` (names at :data:`MAX_NAME_CHARS`), each list at :data:`MAX_ITEMS`;
what is remembered across lines (tool calls, requests awaiting answers) at
:data:`MAX_REMEMBERED` of each.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from relay.acp import strictjson
from relay.core.printable import escaped
from relay.core.watching import (
    ANSWERED,
    DETACHED,
    RESUMED,
    Frame,
    Opening,
    Said,
    Told,
    id_key,
)

MAX_PARSED_BYTES = 8 << 20  # a larger line is named, not read
MAX_TEXT_CHARS = 2000  # of one text shown (a prompt, a chunk, a plan entry)
MAX_NAME_CHARS = 200  # of a title, a path, a method, an option's name
MAX_ITEMS = 20  # options, plan entries, commands, content blocks shown of one line
MAX_REMEMBERED = 1024  # tool calls, and requests awaiting answers, remembered
INDENT = "  "
PLAN_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
CHUNKS = {"user_message_chunk": "user", "agent_message_chunk": "agent",
          "agent_thought_chunk": "thought"}  # fmt: skip
WHO = {"client": "client", "agent": "agent", "watcher": "a watcher"}
CLOSE_WORDS = {1000: "the connection ended", 1001: "the relay is shutting down",
               4429: "fell behind"}  # fmt: skip


@dataclass
class _Tool:
    """What is known of one tool call: its latest title, kind and status."""

    title: str
    kind: str
    status: str


@dataclass(frozen=True)
class _Request:
    """A request awaiting its answer: its method, and for a permission request the names of
    its options by id."""

    method: str
    options: dict[str, str]


class Transcript:
    """The text of one watched conversation, frame by frame (it remembers what later lines
    refer to: open paragraphs, tool calls, requests awaiting answers)."""

    def __init__(self) -> None:
        self._paragraph: tuple[str, Any] | None = None  # (label, what the chunks belong to)
        self._at_line_start = True
        self._history_left = 0
        self._tools: OrderedDict[str, _Tool] = OrderedDict()
        self._requests: OrderedDict[tuple[str, str], _Request] = OrderedDict()  # (asker, id)

    def show(self, frame: Frame) -> str:
        """The text for ``frame`` (ending without a newline while a paragraph is open)."""
        if isinstance(frame, Opening):
            return self._opening(frame)
        if isinstance(frame, Said):
            text = self._said(frame)
            if self._history_left:
                self._history_left -= 1
                if not self._history_left:
                    text += self._line("-- live --")
            return text
        if isinstance(frame, Told):
            return self._told(frame.message)
        return self._line(f"-- a frame that is not the watch profile's: {_cut(frame.why)} --")

    def closed(self, code: int, reason: str) -> str:
        """The last line: how the relay closed the socket (in words of its own when the
        relay gave none)."""
        reason = reason or CLOSE_WORDS.get(code, "")
        why = f"{_cut(reason)} ({code})" if reason else f"({code})"
        hint = "; attach again with a new ticket" if code == 4429 else ""
        return self._line(f"-- closed: {why}{hint} --")

    def lost(self, why: str) -> str:
        """The last line when the socket was lost (no close from the relay)."""
        return self._line(f"-- lost: {_cut(why)} --")

    def stopped(self) -> str:
        """The last line when the watch was stopped here (Ctrl-C)."""
        return self._line("-- stopped --")

    # -- the first frame -------------------------------------------------------------------

    def _opening(self, frame: Opening) -> str:
        self._history_left = frame.messages
        dropped = f"; {frame.dropped} older ones no longer kept" if frame.dropped else ""
        head = f"-- watching connection {_cut(frame.connection, MAX_NAME_CHARS)}: "
        if frame.messages:
            return self._line(f"{head}the conversation so far ({frame.messages} lines{dropped}) --")
        return self._line(f"{head}nothing said yet{dropped}; live --")

    # -- lines of the conversation ---------------------------------------------------------

    def _said(self, said: Said) -> str:
        who = WHO.get(said.origin) or _cut(said.origin, MAX_NAME_CHARS)
        if len(said.line) > MAX_PARSED_BYTES:
            return self._line(f"{who}: (a line of {len(said.line)} bytes, too large to show)")
        try:
            message = strictjson.loads(said.line, max_bytes=MAX_PARSED_BYTES)
        except strictjson.JsonRefused as exc:
            why = _cut(str(exc), MAX_NAME_CHARS)
            return self._line(f"{who}: (not JSON: {why}) {_cut(_decoded(said.line), 200)}")
        if not isinstance(message, dict):
            return self._line(f"{who}: (not a JSON-RPC message) {_cut(_decoded(said.line), 200)}")
        method = message.get("method")
        asker = "agent" if said.origin == "agent" else "client"
        if isinstance(method, str):
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if "id" in message:
                self._remember_request(asker, message["id"], method, params)
                return self._request(who, asker, method, params)
            return self._notification(who, asker, method, params)
        if "id" in message and ("result" in message or "error" in message):
            answered = "client" if asker == "agent" else "agent"
            return self._response(who, answered, message)
        return self._line(f"{who}: (not a JSON-RPC message) {_cut(_decoded(said.line), 200)}")

    def _request(self, who: str, asker: str, method: str, params: dict[str, Any]) -> str:
        if asker == "client":
            if method == "session/prompt":
                return self._block("user", _blocks(params.get("prompt")))
            shown = _CLIENT_REQUESTS.get(method)
            return self._line(f"client: {shown(params) if shown else _name(method)}")
        if method == "session/request_permission":
            return self._permission_asked(params)
        shown = _AGENT_REQUESTS.get(method)
        return self._line(f"{who} asks {shown(params) if shown else _name(method)}")

    def _notification(self, who: str, asker: str, method: str, params: dict[str, Any]) -> str:
        if asker == "agent" and method == "session/update":
            return self._update(params)
        if asker == "client" and method == "session/cancel":
            return self._line("client: cancel the turn")
        return self._line(f"{who}: {_name(method)} (notification)")

    def _response(self, who: str, asker: str, message: dict[str, Any]) -> str:
        key = id_key(message["id"])
        request = self._requests.get((asker, key)) if key is not None else None
        what = _name(request.method) if request else f"request {_id(message['id'])}"
        error = message.get("error")
        if "error" in message:
            return self._line(f"{who}: error answering {what}: {_error(error)}")
        result = message.get("result")
        result = result if isinstance(result, dict) else {}
        if request is not None and request.method == "session/request_permission":
            chosen = _outcome(result, request.options)
            return self._line(f"{who} answered permission {_id(message['id'])}: {chosen}")
        shown = _RESULTS.get(request.method) if request else None
        return self._line(f"{who}: {shown(result) if shown else 'answered ' + what}")

    def _remember_request(self, asker: str, request_id: Any, method: str, params: Any) -> None:
        key = id_key(request_id)
        if key is None:
            return
        options: dict[str, str] = {}
        if method == "session/request_permission":
            for option in _list(params.get("options"))[:MAX_ITEMS]:
                if isinstance(option, dict) and isinstance(option.get("optionId"), str):
                    options[option["optionId"]] = _field(option, "name")
        _remember(self._requests, (asker, key), _Request(method, options))

    # -- session/update --------------------------------------------------------------------

    def _update(self, params: dict[str, Any]) -> str:
        update = params.get("update")
        update = update if isinstance(update, dict) else {}
        kind = update.get("sessionUpdate")
        if kind in CHUNKS:
            where = (_text(params.get("sessionId")), _text(update.get("messageId")))
            return self._chunk(CHUNKS[kind], where, _blocks([update.get("content")]))
        if kind in ("tool_call", "tool_call_update"):
            return self._tool_call(update, started=kind == "tool_call")
        if kind == "plan":
            return self._plan(update.get("entries"))
        if kind == "plan_update":
            return self._plan_update(update.get("plan"))
        shown = _UPDATES.get(kind) if isinstance(kind, str) else None
        if shown is not None:
            return self._line(f"agent: {shown(update)}")
        return self._line(f"agent: session update {_name(kind)}")

    def _tool_call(self, update: dict[str, Any], *, started: bool) -> str:
        tool_id = _text(update.get("toolCallId"))
        known = self._tools.get(tool_id)
        before = None if known is None else _Tool(known.title, known.kind, known.status)
        if known is None:
            known = _Tool(f"tool call {_cut(tool_id, MAX_NAME_CHARS)}", "", "pending")
        for field in ("title", "kind", "status"):
            value = update.get(field)
            if isinstance(value, str):
                setattr(known, field, _cut(value, MAX_NAME_CHARS))
        _remember(self._tools, tool_id, known)
        if known == before and not started:
            return ""  # only its content or locations changed
        kind = f" [{known.kind}]" if known.kind else ""
        return self._line(f"tool: {known.title}{kind} {known.status}")

    def _permission_asked(self, params: dict[str, Any]) -> str:
        call = params.get("toolCall")
        call = call if isinstance(call, dict) else {}
        known = self._tools.get(_text(call.get("toolCallId")))
        title = _field(call, "title") or (known.title if known else "")
        kind = _field(call, "kind") or (known.kind if known else "")
        kind = f" [{kind}]" if kind else ""
        lines = [f"agent asks permission: {title or 'a tool call'}{kind}"]
        options = _list(params.get("options"))
        for option in options[:MAX_ITEMS]:
            option = option if isinstance(option, dict) else {}
            name = _field(option, "name")
            details = ", ".join(
                _cut(_text(option.get(key)), MAX_NAME_CHARS) for key in ("kind", "optionId")
            )
            lines.append(f"{INDENT}- {name} ({details})")
        lines.extend(_more(options))
        return self._line("\n".join(lines))

    def _plan(self, entries: Any) -> str:
        entries = _list(entries)
        lines = ["plan:"]
        for entry in entries[:MAX_ITEMS]:
            entry = entry if isinstance(entry, dict) else {}
            mark = PLAN_MARKS.get(_text(entry.get("status")), "[?]")
            lines.append(f"{INDENT}{mark} {_field(entry, 'content')}")
        lines.extend(_more(entries))
        return self._line("\n".join(lines) if entries else "plan: (empty)")

    def _plan_update(self, plan: Any) -> str:
        plan = plan if isinstance(plan, dict) else {}
        if plan.get("type") == "items":
            return self._plan(plan.get("entries"))
        if plan.get("type") == "markdown":
            return self._block("plan", _cut(_text(plan.get("content")), keep="\n\t"))
        if plan.get("type") == "file":
            return self._line(f"plan: in {_field(plan, 'uri')}")
        return self._line(f"plan: {_name(plan.get('type'))}")

    # -- the relay's own -------------------------------------------------------------------

    def _told(self, data: bytes) -> str:
        try:
            message = strictjson.loads(data, max_bytes=MAX_PARSED_BYTES)
        except strictjson.JsonRefused as exc:
            return self._line(f"relay: (not JSON: {_cut(str(exc), MAX_NAME_CHARS)})")
        message = message if isinstance(message, dict) else {}
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        method = message.get("method")
        if method == ANSWERED:
            return self._line(f"relay: {self._answered(params)}")
        if method == DETACHED:
            reason, grace = _field(params, "reason"), params.get("grace")
            waits = f"; the connection waits {_id(grace)} s for it" if grace is not None else ""
            return self._line(f"relay: the controller detached ({reason}){waits}")
        if method == RESUMED:
            return self._line("relay: the controller resumed")
        if "error" in message:
            return self._line(f"relay: refused what this watcher sent: {_error(message['error'])}")
        return self._line(f"relay: {_name(method)}")

    def _answered(self, params: dict[str, Any]) -> str:
        request_id = params.get("id")
        key = id_key(request_id)
        request = self._requests.get(("agent", key)) if key is not None else None
        by = _text(params.get("by"))
        by = "the controller" if by == "controller" else "a watcher" if by == "watcher" else by
        subject = _field(params, "subject")
        who = f"{_cut(by, MAX_NAME_CHARS)} ({subject})" if subject else _cut(by, MAX_NAME_CHARS)
        if "error" in params:
            chosen = f"error: {_error(params['error'])}"
        else:
            result = params.get("result")
            chosen = _outcome(result if isinstance(result, dict) else {},
                              request.options if request else {})  # fmt: skip
        return f"permission {_id(request_id)} answered first by {who}: {chosen}"

    # -- text ------------------------------------------------------------------------------

    def _line(self, text: str) -> str:
        """A whole line (or lines, the later ones indented by their maker)."""
        return self._end_paragraph() + text + "\n"

    def _block(self, label: str, text: str) -> str:
        """A paragraph of its own: ``label: text``, its later lines indented."""
        body = text.strip("\n").replace("\n", "\n" + INDENT)
        return self._line(f"{label}: {body}")

    def _chunk(self, label: str, belongs_to: Any, text: str) -> str:
        """A piece of a paragraph: joined to the open one when it is the same speaker's."""
        opening = ""
        if self._paragraph != (label, belongs_to):
            opening = self._end_paragraph() + f"{label}: "
            self._paragraph = (label, belongs_to)
            self._at_line_start = False
        return opening + self._flow(text)

    def _flow(self, text: str) -> str:
        """``text`` within the open paragraph, each new line indented once it has text."""
        out = []
        for n, piece in enumerate(text.split("\n")):
            if n:
                out.append("\n")
                self._at_line_start = True
            if piece:
                out.append(INDENT + piece if self._at_line_start else piece)
                self._at_line_start = False
        return "".join(out)

    def _end_paragraph(self) -> str:
        if self._paragraph is None:
            return ""
        self._paragraph = None
        ended = "" if self._at_line_start else "\n"
        self._at_line_start = True
        return ended


# -- what each method shows ---------------------------------------------------------------

_Shown = Callable[[dict[str, Any]], str]


def _says(template: str, *keys: str) -> _Shown:
    """A line of ``template`` filled with the named fields of a message's params or result."""

    def shown(fields: dict[str, Any]) -> str:
        return template.format(*(_field(fields, key) for key in keys))

    return shown


def _opening_session(verb: str) -> _Shown:
    def shown(params: dict[str, Any]) -> str:
        which = f" {_field(params, 'sessionId')}" if "sessionId" in params else ""
        where = f" in {_field(params, 'cwd')}" if "cwd" in params else ""
        return f"{verb} session{which}{where}"

    return shown


def _initialize(params: dict[str, Any]) -> str:
    return f"initialize ({_info(params, 'clientInfo')})"


def _initialized(result: dict[str, Any]) -> str:
    return f"initialized ({_info(result, 'agentInfo')})"


def _info(fields: dict[str, Any], key: str) -> str:
    """``name version, protocol N`` of an initialize request or its result."""
    info = fields.get(key)
    protocol = f"protocol {_field(fields, 'protocolVersion')}"
    if not isinstance(info, dict) or not isinstance(info.get("name"), str):
        return protocol
    version = f" {_field(info, 'version')}" if info.get("version") else ""
    return f"{_field(info, 'name')}{version}, {protocol}"


def _run(params: dict[str, Any]) -> str:
    words = [_text(params.get("command")), *map(_text, _list(params.get("args"))[:MAX_ITEMS])]
    return f"to run {_cut(' '.join(words), MAX_NAME_CHARS)}"


def _commands(update: dict[str, Any]) -> str:
    commands = [c for c in _list(update.get("availableCommands")) if isinstance(c, dict)]
    return "commands: " + _listed(["/" + _text(c.get("name")) for c in commands])


def _session_info(update: dict[str, Any]) -> str:
    if isinstance(update.get("title"), str):
        return f"session title: {_field(update, 'title')}"
    return "session info updated"


_CLIENT_REQUESTS: dict[str, _Shown] = {
    "initialize": _initialize,
    "session/new": _opening_session("new"),
    "session/load": _opening_session("load"),
    "session/resume": _opening_session("resume"),
    "session/fork": _opening_session("fork"),
    "session/set_mode": _says("set mode {}", "modeId"),
    "authenticate": _says("authenticate ({})", "methodId"),
}

_AGENT_REQUESTS: dict[str, _Shown] = {
    "fs/read_text_file": _says("to read {}", "path"),
    "fs/write_text_file": _says("to write {}", "path"),
    "terminal/create": _run,
}

_RESULTS: dict[str, _Shown] = {
    "initialize": _initialized,
    "session/new": _says("session {} opened", "sessionId"),
    "session/fork": _says("session {} opened", "sessionId"),
    "session/prompt": _says("end of turn ({})", "stopReason"),
}

_UPDATES: dict[str, _Shown] = {
    "available_commands_update": _commands,
    "current_mode_update": _says("mode is now {}", "currentModeId"),
    "session_info_update": _session_info,
    "usage_update": _says("context used: {} of {} tokens", "used", "size"),
    "config_option_update": _says("config options updated"),
    "plan_removed": _says("plan removed"),
}


# -- values, shown ------------------------------------------------------------------------


def _blocks(blocks: Any) -> str:
    """The text of content blocks: text as it is, other blocks named."""
    blocks = _list(blocks)
    text = ""
    for block in blocks[:MAX_ITEMS]:
        part = _block_text(block)
        named = not (isinstance(block, dict) and block.get("type") == "text")
        text += " " + part if named and text and not text[-1].isspace() else part
    if len(blocks) > MAX_ITEMS:
        text += f" [... and {len(blocks) - MAX_ITEMS} more blocks]"
    return _cut(text, MAX_TEXT_CHARS, keep="\n\t")


def _block_text(block: Any) -> str:
    if not isinstance(block, dict):
        return "[?]"
    kind = block.get("type")
    if kind == "text":
        return _text(block.get("text"))
    if kind == "resource_link":
        return f"[resource_link {_text(block.get('uri'))[:MAX_NAME_CHARS]}]"
    if kind == "resource":
        resource = block.get("resource")
        uri = resource.get("uri") if isinstance(resource, dict) else None
        return f"[resource {_text(uri)[:MAX_NAME_CHARS]}]"
    return f"[{_text(kind)[:MAX_NAME_CHARS] or '?'}]"


def _outcome(result: dict[str, Any], options: dict[str, str]) -> str:
    """A permission answer's outcome: the option selected (by name when known), or cancelled."""
    outcome = result.get("outcome")
    outcome = outcome if isinstance(outcome, dict) else {}
    if outcome.get("outcome") == "selected":
        option = _text(outcome.get("optionId"))
        name = options.get(option)
        shown = _cut(option, MAX_NAME_CHARS)
        return f'selected "{name}" ({shown})' if name else f"selected {shown}"
    if outcome.get("outcome") == "cancelled":
        return "cancelled"
    return f"outcome {_name(outcome.get('outcome'))}"


def _error(error: Any) -> str:
    """A JSON-RPC error: its message, the detail its data gives, its code."""
    if not isinstance(error, dict):
        return "(no error object)"
    data = error.get("data")
    detail = data.get("detail") if isinstance(data, dict) else None
    text = _text(error.get("message")) + (f": {_text(detail)}" if detail else "")
    return f"{_cut(text, MAX_NAME_CHARS)} ({_id(error.get('code'))})"


def _listed(names: list[str]) -> str:
    shown = ", ".join(_cut(name, MAX_NAME_CHARS) for name in names[:MAX_ITEMS])
    more = len(names) - MAX_ITEMS
    return shown + (f", and {more} more" if more > 0 else "") if names else "(none)"


def _more(items: list[Any]) -> list[str]:
    more = len(items) - MAX_ITEMS
    return [f"{INDENT}... and {more} more"] if more > 0 else []


def _name(value: Any) -> str:
    """A method or kind, shown."""
    return _cut(_text(value), MAX_NAME_CHARS) if value is not None else "(none)"


def _id(value: Any) -> str:
    """A request id or a number, shown."""
    if isinstance(value, strictjson.Number):
        return _cut(value.text, MAX_NAME_CHARS)
    if isinstance(value, str):
        return _cut(value, MAX_NAME_CHARS)
    return "null" if value is None else _cut(_text(value), MAX_NAME_CHARS)


def _field(fields: dict[str, Any], key: str) -> str:
    """A field of a message, shown (a string or a number; "" for anything else)."""
    return _cut(_text(fields.get(key)), MAX_NAME_CHARS)


def _text(value: Any) -> str:
    """A string of the conversation, or "" for anything else (a number as it was spelled)."""
    if isinstance(value, str):
        return value
    if isinstance(value, strictjson.Number):
        return value.text
    return ""


def _decoded(line: bytes) -> str:
    return line[: MAX_TEXT_CHARS * 4].decode("utf-8", "replace")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _cut(text: str, limit: int = MAX_TEXT_CHARS, *, keep: str = "") -> str:
    """``text`` escaped and cut at ``limit`` characters (saying how many more there were)."""
    text = text.replace("\r\n", "\n")
    more = len(text) - limit
    shown = escaped(text[:limit], keep=keep)
    return shown + (f"... ({more} more characters)" if more > 0 else "")


def _remember(book: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    book[key] = value
    book.move_to_end(key)
    while len(book) > MAX_REMEMBERED:
        book.popitem(last=False)
