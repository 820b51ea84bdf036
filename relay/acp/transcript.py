"""A watched conversation as text for a terminal: what ``acp-relay watch`` prints.

Pure: the frames of the watch profile in (read by :func:`relay.core.watchprofile.read_frame`),
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
from dataclasses import dataclass
from typing import Any

from relay.acp.answers import Key
from relay.acp.refusals import id_key
from relay.acp.showing import (
    AGENT_REQUESTS,
    CLIENT_REQUESTS,
    INDENT,
    MAX_ITEMS,
    MAX_NAME_CHARS,
    RESULTS,
    UPDATES,
    as_list,
    blocks_text,
    cut,
    decoded,
    error_text,
    field_text,
    id_text,
    more,
    name_text,
    outcome_text,
    remember,
    text_of,
)
from relay.core import strictjson
from relay.core.watchprofile import (
    ANSWERED,
    DETACHED,
    RESUMED,
    Frame,
    Opening,
    Origin,
    Said,
    Told,
)

MAX_PARSED_BYTES = 8 << 20  # a larger line is named, not read
PLAN_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
CHUNKS = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}
# Who said a line, by the frame's from; who answered a permission request, by the notice's by.
WHO = {
    Origin.CONTROLLER.value: "client",
    Origin.AGENT.value: "agent",
    Origin.WATCHER.value: "a watcher",
}
BY = {Origin.CONTROLLER.answerer: "the controller", Origin.WATCHER.answerer: "a watcher"}
CLOSE_WORDS = {
    1000: "the connection ended",
    1001: "the relay is shutting down",
    4429: "fell behind",
}


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
        self._requests: OrderedDict[tuple[Origin, Key], _Request] = OrderedDict()  # (asker, id)

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
        return self._line(f"-- a frame that is not the watch profile's: {cut(frame.why)} --")

    def closed(self, code: int, reason: str) -> str:
        """The last line: how the relay closed the socket (in words of its own when the
        relay gave none)."""
        reason = reason or CLOSE_WORDS.get(code, "")
        why = f"{cut(reason)} ({code})" if reason else f"({code})"
        hint = "; attach again with a new ticket" if code == 4429 else ""
        return self._line(f"-- closed: {why}{hint} --")

    def lost(self, why: str) -> str:
        """The last line when the socket was lost (no close from the relay)."""
        return self._line(f"-- lost: {cut(why)} --")

    def stopped(self) -> str:
        """The last line when the watch was stopped here (Ctrl-C)."""
        return self._line("-- stopped --")

    # -- the first frame -------------------------------------------------------------------

    def _opening(self, frame: Opening) -> str:
        self._history_left = frame.messages
        dropped = f"; {frame.dropped} older ones no longer kept" if frame.dropped else ""
        head = f"-- watching connection {cut(frame.connection, MAX_NAME_CHARS)}: "
        if frame.messages:
            return self._line(f"{head}the conversation so far ({frame.messages} lines{dropped}) --")
        return self._line(f"{head}nothing said yet{dropped}; live --")

    # -- lines of the conversation ---------------------------------------------------------

    def _said(self, said: Said) -> str:
        who = WHO.get(said.origin) or cut(said.origin, MAX_NAME_CHARS)
        if len(said.line) > MAX_PARSED_BYTES:
            return self._line(f"{who}: (a line of {len(said.line)} bytes, too large to show)")
        try:
            message = strictjson.loads(said.line, max_bytes=MAX_PARSED_BYTES)
        except strictjson.JsonRefused as exc:
            why = cut(str(exc), MAX_NAME_CHARS)
            return self._line(f"{who}: (not JSON: {why}) {cut(decoded(said.line), 200)}")
        if not isinstance(message, dict):
            return self._line(f"{who}: (not a JSON-RPC message) {cut(decoded(said.line), 200)}")
        method = message.get("method")
        # The client's side of the conversation asks too: the controller, and the watchers.
        asker = Origin.AGENT if said.origin == Origin.AGENT.value else Origin.CONTROLLER
        if isinstance(method, str):
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if "id" in message:
                self._remember_request(asker, message["id"], method, params)
                return self._request(who, asker, method, params)
            return self._notification(who, asker, method, params)
        if "id" in message and ("result" in message or "error" in message):
            answered = Origin.CONTROLLER if asker is Origin.AGENT else Origin.AGENT
            return self._response(who, answered, message)
        return self._line(f"{who}: (not a JSON-RPC message) {cut(decoded(said.line), 200)}")

    def _request(self, who: str, asker: Origin, method: str, params: dict[str, Any]) -> str:
        if asker is Origin.CONTROLLER:
            if method == "session/prompt":
                return self._block("user", blocks_text(params.get("prompt")))
            shown = CLIENT_REQUESTS.get(method)
            return self._line(f"client: {shown(params) if shown else name_text(method)}")
        if method == "session/request_permission":
            return self._permission_asked(params)
        shown = AGENT_REQUESTS.get(method)
        return self._line(f"{who} asks {shown(params) if shown else name_text(method)}")

    def _notification(self, who: str, asker: Origin, method: str, params: dict[str, Any]) -> str:
        if asker is Origin.AGENT and method == "session/update":
            return self._update(params)
        if asker is Origin.CONTROLLER and method == "session/cancel":
            return self._line("client: cancel the turn")
        return self._line(f"{who}: {name_text(method)} (notification)")

    def _response(self, who: str, asker: Origin, message: dict[str, Any]) -> str:
        key = id_key(message["id"])
        request = self._requests.get((asker, key)) if key is not None else None
        what = name_text(request.method) if request else f"request {id_text(message['id'])}"
        error = message.get("error")
        if "error" in message:
            return self._line(f"{who}: error answering {what}: {error_text(error)}")
        result = message.get("result")
        result = result if isinstance(result, dict) else {}
        if request is not None and request.method == "session/request_permission":
            chosen = outcome_text(result, request.options)
            return self._line(f"{who} answered permission {id_text(message['id'])}: {chosen}")
        shown = RESULTS.get(request.method) if request else None
        return self._line(f"{who}: {shown(result) if shown else 'answered ' + what}")

    def _remember_request(self, asker: Origin, request_id: Any, method: str, params: Any) -> None:
        key = id_key(request_id)
        if key is None:
            return
        options: dict[str, str] = {}
        if method == "session/request_permission":
            for option in as_list(params.get("options"))[:MAX_ITEMS]:
                if isinstance(option, dict) and isinstance(option.get("optionId"), str):
                    options[option["optionId"]] = field_text(option, "name")
        remember(self._requests, (asker, key), _Request(method, options))

    # -- session/update --------------------------------------------------------------------

    def _update(self, params: dict[str, Any]) -> str:
        update = params.get("update")
        update = update if isinstance(update, dict) else {}
        kind = update.get("sessionUpdate")
        if kind in CHUNKS:
            where = (text_of(params.get("sessionId")), text_of(update.get("messageId")))
            return self._chunk(CHUNKS[kind], where, blocks_text([update.get("content")]))
        if kind in ("tool_call", "tool_call_update"):
            return self._tool_call(update, started=kind == "tool_call")
        if kind == "plan":
            return self._plan(update.get("entries"))
        if kind == "plan_update":
            return self._plan_update(update.get("plan"))
        shown = UPDATES.get(kind) if isinstance(kind, str) else None
        if shown is not None:
            return self._line(f"agent: {shown(update)}")
        return self._line(f"agent: session update {name_text(kind)}")

    def _tool_call(self, update: dict[str, Any], *, started: bool) -> str:
        tool_id = text_of(update.get("toolCallId"))
        known = self._tools.get(tool_id)
        before = None if known is None else _Tool(known.title, known.kind, known.status)
        if known is None:
            known = _Tool(f"tool call {cut(tool_id, MAX_NAME_CHARS)}", "", "pending")
        for field in ("title", "kind", "status"):
            value = update.get(field)
            if isinstance(value, str):
                setattr(known, field, cut(value, MAX_NAME_CHARS))
        remember(self._tools, tool_id, known)
        if known == before and not started:
            return ""  # only its content or locations changed
        kind = f" [{known.kind}]" if known.kind else ""
        return self._line(f"tool: {known.title}{kind} {known.status}")

    def _permission_asked(self, params: dict[str, Any]) -> str:
        call = params.get("toolCall")
        call = call if isinstance(call, dict) else {}
        known = self._tools.get(text_of(call.get("toolCallId")))
        title = field_text(call, "title") or (known.title if known else "")
        kind = field_text(call, "kind") or (known.kind if known else "")
        kind = f" [{kind}]" if kind else ""
        lines = [f"agent asks permission: {title or 'a tool call'}{kind}"]
        options = as_list(params.get("options"))
        for option in options[:MAX_ITEMS]:
            option = option if isinstance(option, dict) else {}
            name = field_text(option, "name")
            details = ", ".join(
                cut(text_of(option.get(key)), MAX_NAME_CHARS) for key in ("kind", "optionId")
            )
            lines.append(f"{INDENT}- {name} ({details})")
        lines.extend(more(options))
        return self._line("\n".join(lines))

    def _plan(self, entries: Any) -> str:
        entries = as_list(entries)
        lines = ["plan:"]
        for entry in entries[:MAX_ITEMS]:
            entry = entry if isinstance(entry, dict) else {}
            mark = PLAN_MARKS.get(text_of(entry.get("status")), "[?]")
            lines.append(f"{INDENT}{mark} {field_text(entry, 'content')}")
        lines.extend(more(entries))
        return self._line("\n".join(lines) if entries else "plan: (empty)")

    def _plan_update(self, plan: Any) -> str:
        plan = plan if isinstance(plan, dict) else {}
        if plan.get("type") == "items":
            return self._plan(plan.get("entries"))
        if plan.get("type") == "markdown":
            return self._block("plan", cut(text_of(plan.get("content")), keep="\n\t"))
        if plan.get("type") == "file":
            return self._line(f"plan: in {field_text(plan, 'uri')}")
        return self._line(f"plan: {name_text(plan.get('type'))}")

    # -- the relay's own -------------------------------------------------------------------

    def _told(self, data: bytes) -> str:
        try:
            message = strictjson.loads(data, max_bytes=MAX_PARSED_BYTES)
        except strictjson.JsonRefused as exc:
            return self._line(f"relay: (not JSON: {cut(str(exc), MAX_NAME_CHARS)})")
        message = message if isinstance(message, dict) else {}
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        method = message.get("method")
        if method == ANSWERED:
            return self._line(f"relay: {self._answered(params)}")
        if method == DETACHED:
            reason, grace = field_text(params, "reason"), params.get("grace")
            waits = f"; the connection waits {id_text(grace)} s for it" if grace is not None else ""
            return self._line(f"relay: the controller detached ({reason}){waits}")
        if method == RESUMED:
            return self._line("relay: the controller resumed")
        if "error" in message:
            return self._line(
                f"relay: refused what this watcher sent: {error_text(message['error'])}"
            )
        return self._line(f"relay: {name_text(method)}")

    def _answered(self, params: dict[str, Any]) -> str:
        request_id = params.get("id")
        key = id_key(request_id)
        request = self._requests.get((Origin.AGENT, key)) if key is not None else None
        by = text_of(params.get("by"))
        by = BY.get(by, by)
        subject = field_text(params, "subject")
        who = f"{cut(by, MAX_NAME_CHARS)} ({subject})" if subject else cut(by, MAX_NAME_CHARS)
        if "error" in params:
            chosen = f"error: {error_text(params['error'])}"
        else:
            result = params.get("result")
            chosen = outcome_text(
                result if isinstance(result, dict) else {}, request.options if request else {}
            )
        return f"permission {id_text(request_id)} answered first by {who}: {chosen}"

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
