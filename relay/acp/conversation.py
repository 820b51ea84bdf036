"""One ACP conversation as a person follows it: lines in, what changed out, one state.

Pure. Every surface that shows a session to a person (``acp-relay watch`` on a terminal:
:mod:`relay.acp.transcript`; a Matrix thread: :mod:`relay.chat.turns` and
:mod:`relay.chat.watched`) reads the conversation through this model, and renders what it
says, in this vocabulary:

- a **turn** begins with the client's ``session/prompt`` (:class:`Prompted`) and ends with
  its answer (:class:`TurnEnded`);
- within it the agent's **words** and **thoughts**, and the person's words an agent replays,
  come as chunks (:class:`Said`);
- **tool calls** are known by id, each with its latest title, kind and status
  (:class:`ToolCall`, changed: :class:`ToolCallChanged`);
- the **plan** (:class:`Planned`), the **mode** (:class:`ModeChanged`), the **usage**
  (:class:`UsageChanged`), the agent's **commands** (:class:`CommandsChanged`);
- a **permission request** (:class:`PermissionAsked`), the answer a side wrote
  (:class:`PermissionAnswered`), and the relay's word on which answer was taken when a
  watcher may answer too (:class:`AnswerTaken`);
- the relay's own notices on the controller (:class:`ControllerDetached`,
  :class:`ControllerResumed`);
- anything else as what it is: another request (:class:`Requested`), its answer
  (:class:`Replied`), a notification (:class:`Notified`), another session update
  (:class:`Updated`), a line that could not be read (:class:`Unreadable`).

What the model remembers across lines is bounded (:data:`MAX_REMEMBERED` tool calls and
requests, texts at :data:`MAX_KEPT_CHARS`); a line is read up to :data:`MAX_LINE_BYTES`.
The vocabulary is :mod:`relay.acp.changes`. Texts are kept as the agent wrote them: each
renderer escapes and cuts them its own way.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from relay.acp.answers import Key
from relay.acp.changes import (
    AnswerTaken,
    Change,
    CommandsChanged,
    ControllerDetached,
    ControllerResumed,
    ModeChanged,
    Notified,
    Option,
    PermissionAnswered,
    PermissionAsked,
    PlanEntry,
    Planned,
    Prompted,
    RelayNotice,
    Replied,
    Requested,
    Said,
    Side,
    Speaker,
    ToolCall,
    ToolCallChanged,
    TurnEnded,
    Unreadable,
    Updated,
    UsageChanged,
)
from relay.acp.refusals import id_key
from relay.acp.values import list_of, text_of
from relay.core import strictjson
from relay.core.watchprofile import ANSWERED, DETACHED, RESUMED

MAX_LINE_BYTES = 8 << 20  # a larger line is named, not read
MAX_REMEMBERED = 1024  # tool calls, requests awaiting answers, answered permissions
MAX_KEPT_CHARS = 1000  # of a text remembered across lines (a title, a kind, an option)
MAX_ID_CHARS = 200  # of a tool call's id kept as its key
MAX_PLAN_ENTRIES = 50  # of one plan
MAX_PLAN_CHARS = 64000  # of a plan in markdown
MAX_OPTIONS = 50  # of one permission request
PERMISSION = "session/request_permission"
PROMPT = "session/prompt"
CHUNKS: dict[str, Speaker] = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}


@dataclass(frozen=True)
class _Asked:
    """A request awaiting its answer: its method, and a permission request's options."""

    method: str
    options: dict[str, str]


class Conversation:
    """One conversation's state, line by line: what later lines refer to (tool calls by
    id, requests awaiting their answers). The plan, the mode and the usage are in the
    changes that say them; a screen keeps what it shows of them."""

    def __init__(self) -> None:
        self.tools: OrderedDict[str, ToolCall] = OrderedDict()
        self.asked: OrderedDict[tuple[Side, Key], _Asked] = OrderedDict()
        # Permission requests answered: the relay's notice of which answer was taken
        # comes after the answer itself, and names its option.
        self.answered: OrderedDict[Key, dict[str, str]] = OrderedDict()

    def prompts(self) -> list[Key]:
        """The client's prompts awaiting their answers (the turns running), by id."""
        return [
            key
            for (side, key), asked in self.asked.items()
            if side == "client" and asked.method == PROMPT
        ]

    def prompted(self, key: Key) -> None:
        """A prompt kept across a restart awaits its answer again."""
        _remember(self.asked, ("client", key), _Asked(PROMPT, {}))

    # -- lines in --------------------------------------------------------------------------

    def line(self, side: Side, line: bytes) -> Change:
        """What one line a side wrote changes (read within :data:`MAX_LINE_BYTES`)."""
        message = _read(line)
        if isinstance(message, Unreadable):
            return message
        return self.message(side, message)

    def message(self, side: Side, message: dict[str, Any]) -> Change:
        """What one message a side wrote (already read) changes."""
        method = message.get("method")
        if isinstance(method, str):
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if "id" in message:
                return self._request(side, message, method, params)
            if side == "agent" and method == "session/update":
                return self._update(params)
            return Notified(side, method)
        if "id" in message and ("result" in message or "error" in message):
            return self._response(_other(side), message)
        return Unreadable("rpc", 0)

    def session_update(self, update: Any) -> Change:
        """What one ``session/update``'s ``update`` object changes (its params read
        elsewhere)."""
        return self._update({"update": update})

    def notice(self, data: bytes) -> Change:
        """What a notice of the relay's own (``_acp-relay/...``) says."""
        message = _read(data)
        if isinstance(message, Unreadable):
            return message
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        method = message.get("method")
        if method == ANSWERED:
            return self._taken(params)
        if method == DETACHED:
            return ControllerDetached(text_of(params.get("reason")), params.get("grace"))
        if method == RESUMED:
            return ControllerResumed()
        if "error" in message:
            return RelayNotice(method, failed=True, error=message["error"])
        return RelayNotice(method)

    # -- requests and their answers --------------------------------------------------------

    def _request(
        self, side: Side, message: dict[str, Any], method: str, params: dict[str, Any]
    ) -> Change:
        request_id = message["id"]
        asked = _Asked(method, {})
        change: Change = Requested(side, method, params)
        if side == "client" and method == PROMPT:
            change = Prompted(request_id, list_of(params.get("prompt")))
        elif side == "agent" and method == PERMISSION:
            change = self._permission_asked(request_id, params, message)
            asked = _Asked(method, {o.option_id: o.name for o in change.options})
        key = id_key(request_id)
        if key is not None:
            _remember(self.asked, (side, key), asked)
        return change

    def _permission_asked(
        self, request_id: Any, params: dict[str, Any], message: dict[str, Any]
    ) -> PermissionAsked:
        call = params.get("toolCall")
        call = call if isinstance(call, dict) else {}
        known = self.tools.get(text_of(call.get("toolCallId"))[:MAX_ID_CHARS])
        title = _kept(call.get("title")) or (known.title or "" if known else "")
        kind = _kept(call.get("kind")) or (known.kind or "" if known else "")
        options = list_of(params.get("options"))
        return PermissionAsked(
            request_id,
            title,
            kind,
            tuple(_option(option) for option in options[:MAX_OPTIONS]),
            len(options),
            message,
        )

    def _response(self, asker: Side, message: dict[str, Any]) -> Change:
        request_id = message["id"]
        key = id_key(request_id)
        asked = self.asked.pop((asker, key), None) if key is not None else None
        failed, error = "error" in message, message.get("error")
        result = message.get("result")
        result = result if isinstance(result, dict) else {}
        if asked is None:
            return Replied(request_id, None, result, failed, error)
        if asked.method == PERMISSION and asker == "agent":
            if key is not None:
                _remember(self.answered, key, asked.options)
            return PermissionAnswered(request_id, asked.options, result, failed, error)
        if asked.method == PROMPT and asker == "client":
            reason = result.get("stopReason")
            return TurnEnded(request_id, reason if isinstance(reason, str) else None, failed, error)
        return Replied(request_id, asked.method, result, failed, error)

    def _taken(self, params: dict[str, Any]) -> AnswerTaken:
        request_id = params.get("id")
        key = id_key(request_id)
        options: dict[str, str] = {}
        if key is not None:
            asked = self.asked.get(("agent", key))
            options = asked.options if asked else self.answered.get(key, {})
        result = params.get("result")
        return AnswerTaken(
            request_id,
            text_of(params.get("by")),
            text_of(params.get("subject")),
            options,
            result if isinstance(result, dict) else {},
            "error" in params,
            params.get("error"),
        )

    # -- session/update --------------------------------------------------------------------

    def _update(self, params: dict[str, Any]) -> Change:
        update = params.get("update")
        update = update if isinstance(update, dict) else {}
        kind = update.get("sessionUpdate")
        if isinstance(kind, str) and kind in CHUNKS:
            belongs_to = (text_of(params.get("sessionId")), text_of(update.get("messageId")))
            return Said(CHUNKS[kind], update.get("content"), belongs_to)
        if kind in ("tool_call", "tool_call_update"):
            return self._tool_call(update, started=kind == "tool_call")
        if kind == "plan":
            return _items(update.get("entries"))
        if kind == "plan_update":
            return _plan_of(update.get("plan"))
        if kind == "current_mode_update":
            return ModeChanged(_kept(update.get("currentModeId")))
        if kind == "usage_update":
            return UsageChanged(_kept(update.get("used")), _kept(update.get("size")))
        if kind == "available_commands_update":
            commands = [c for c in list_of(update.get("availableCommands")) if isinstance(c, dict)]
            return CommandsChanged(tuple(_kept(c.get("name")) for c in commands))
        return Updated(kind, update)

    def _tool_call(self, update: dict[str, Any], *, started: bool) -> ToolCallChanged:
        tool_id = text_of(update.get("toolCallId"))[:MAX_ID_CHARS]
        before = self.tools.get(tool_id)
        call = before or ToolCall(tool_id)
        for name in ("title", "kind", "status"):
            value = update.get(name)
            if isinstance(value, str):
                call = replace(call, **{name: value[:MAX_KEPT_CHARS]})
        _remember(self.tools, tool_id, call)
        return ToolCallChanged(call, started, changed=call != before)


# -- reading values ----------------------------------------------------------------------------


def _read(line: bytes) -> dict[str, Any] | Unreadable:
    if len(line) > MAX_LINE_BYTES:
        return Unreadable("large", len(line))
    try:
        message = strictjson.loads(line, max_bytes=MAX_LINE_BYTES)
    except strictjson.JsonRefused as exc:
        return Unreadable("json", len(line), str(exc))
    return message if isinstance(message, dict) else Unreadable("rpc", len(line))


def _plan_of(plan: Any) -> Planned:
    plan = plan if isinstance(plan, dict) else {}
    form = plan.get("type")
    if form == "items":
        return _items(plan.get("entries"))
    if form in ("markdown", "file"):
        text = text_of(plan.get("content" if form == "markdown" else "uri"))
        return Planned(form, text=text[:MAX_PLAN_CHARS])
    return Planned(form)


def _items(entries: Any) -> Planned:
    entries = list_of(entries)
    kept = tuple(
        PlanEntry(_kept(e.get("content")), _kept(e.get("status")))
        for e in (e if isinstance(e, dict) else {} for e in entries[:MAX_PLAN_ENTRIES])
    )
    return Planned("items", kept, len(entries))


def _option(option: Any) -> Option:
    option = option if isinstance(option, dict) else {}
    return Option(
        _kept(option.get("optionId")), _kept(option.get("name")), _kept(option.get("kind"))
    )


def _other(side: Side) -> Side:
    """Who asked what ``side`` answers."""
    return "agent" if side == "client" else "client"


def _kept(value: Any) -> str:
    """A text remembered across lines: bounded."""
    return text_of(value)[:MAX_KEPT_CHARS]


def _remember(book: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    book[key] = value
    book.move_to_end(key)
    while len(book) > MAX_REMEMBERED:
        book.popitem(last=False)
