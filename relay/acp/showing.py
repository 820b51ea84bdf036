"""The values of ACP messages as a person reads them on a terminal: what each method shows,
content blocks, outcomes, errors, names and texts, each escaped and bounded.

Pure. :mod:`relay.acp.transcript` puts these together into a watched conversation; here
is what one method or one value becomes, and the bounds: each text cut at
:data:`MAX_TEXT_CHARS` (names at :data:`MAX_NAME_CHARS`), each list at :data:`MAX_ITEMS`.
What is remembered across lines is the conversation model's (:mod:`relay.acp.conversation`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from relay.acp.values import list_of, text_of
from relay.core import strictjson
from relay.core.printable import escaped

MAX_TEXT_CHARS = 2000  # of one text shown (a prompt, a chunk, a plan entry)
MAX_NAME_CHARS = 200  # of a title, a path, a method, an option's name
MAX_ITEMS = 20  # options, plan entries, commands, content blocks shown of one line
INDENT = "  "


_Shown = Callable[[dict[str, Any]], str]


def _says(template: str, *keys: str) -> _Shown:
    """A line of ``template`` filled with the named fields of a message's params or result."""

    def shown(fields: dict[str, Any]) -> str:
        return template.format(*(field_text(fields, key) for key in keys))

    return shown


def _opening_session(verb: str) -> _Shown:
    def shown(params: dict[str, Any]) -> str:
        which = f" {field_text(params, 'sessionId')}" if "sessionId" in params else ""
        where = f" in {field_text(params, 'cwd')}" if "cwd" in params else ""
        return f"{verb} session{which}{where}"

    return shown


def _initialize(params: dict[str, Any]) -> str:
    return f"initialize ({_info(params, 'clientInfo')})"


def _initialized(result: dict[str, Any]) -> str:
    return f"initialized ({_info(result, 'agentInfo')})"


def _info(fields: dict[str, Any], key: str) -> str:
    """``name version, protocol N`` of an initialize request or its result."""
    info = fields.get(key)
    protocol = f"protocol {field_text(fields, 'protocolVersion')}"
    if not isinstance(info, dict) or not isinstance(info.get("name"), str):
        return protocol
    version = f" {field_text(info, 'version')}" if info.get("version") else ""
    return f"{field_text(info, 'name')}{version}, {protocol}"


def _run(params: dict[str, Any]) -> str:
    words = [text_of(params.get("command")), *map(text_of, list_of(params.get("args"))[:MAX_ITEMS])]
    return f"to run {cut(' '.join(words), MAX_NAME_CHARS)}"


def _session_info(update: dict[str, Any]) -> str:
    if isinstance(update.get("title"), str):
        return f"session title: {field_text(update, 'title')}"
    return "session info updated"


CLIENT_REQUESTS: dict[str, _Shown] = {
    "initialize": _initialize,
    "session/new": _opening_session("new"),
    "session/load": _opening_session("load"),
    "session/resume": _opening_session("resume"),
    "session/fork": _opening_session("fork"),
    "session/set_mode": _says("set mode {}", "modeId"),
    "authenticate": _says("authenticate ({})", "methodId"),
}

AGENT_REQUESTS: dict[str, _Shown] = {
    "fs/read_text_file": _says("to read {}", "path"),
    "fs/write_text_file": _says("to write {}", "path"),
    "terminal/create": _run,
}

RESULTS: dict[str, _Shown] = {
    "initialize": _initialized,
    "session/new": _says("session {} opened", "sessionId"),
    "session/fork": _says("session {} opened", "sessionId"),
    "session/prompt": _says("end of turn ({})", "stopReason"),
}

UPDATES: dict[str, _Shown] = {
    "session_info_update": _session_info,
    "config_option_update": _says("config options updated"),
    "plan_removed": _says("plan removed"),
}


# -- values, shown ------------------------------------------------------------------------


def blocks_text(blocks: Any) -> str:
    """The text of content blocks: text as it is, other blocks named."""
    blocks = list_of(blocks)
    text = ""
    for block in blocks[:MAX_ITEMS]:
        part = block_text(block)
        named = not (isinstance(block, dict) and block.get("type") == "text")
        text += " " + part if named and text and not text[-1].isspace() else part
    if len(blocks) > MAX_ITEMS:
        text += f" [... and {len(blocks) - MAX_ITEMS} more blocks]"
    return cut(text, MAX_TEXT_CHARS, keep="\n\t")


def block_text(block: Any) -> str:
    if not isinstance(block, dict):
        return "[?]"
    kind = block.get("type")
    if kind == "text":
        return text_of(block.get("text"))
    if kind == "resource_link":
        return f"[resource_link {text_of(block.get('uri'))[:MAX_NAME_CHARS]}]"
    if kind == "resource":
        resource = block.get("resource")
        uri = resource.get("uri") if isinstance(resource, dict) else None
        return f"[resource {text_of(uri)[:MAX_NAME_CHARS]}]"
    return f"[{text_of(kind)[:MAX_NAME_CHARS] or '?'}]"


def outcome_text(result: dict[str, Any], options: dict[str, str]) -> str:
    """A permission answer's outcome: the option selected (by name when known), or cancelled."""
    outcome = result.get("outcome")
    outcome = outcome if isinstance(outcome, dict) else {}
    if outcome.get("outcome") == "selected":
        option = text_of(outcome.get("optionId"))
        name = options.get(option)
        shown = cut(option, MAX_NAME_CHARS)
        return f'selected "{name}" ({shown})' if name else f"selected {shown}"
    if outcome.get("outcome") == "cancelled":
        return "cancelled"
    return f"outcome {name_text(outcome.get('outcome'))}"


def error_text(error: Any) -> str:
    """A JSON-RPC error: its message, the detail its data gives, its code."""
    if not isinstance(error, dict):
        return "(no error object)"
    data = error.get("data")
    detail = data.get("detail") if isinstance(data, dict) else None
    text = text_of(error.get("message")) + (f": {text_of(detail)}" if detail else "")
    return f"{cut(text, MAX_NAME_CHARS)} ({id_text(error.get('code'))})"


def listed(names: list[str]) -> str:
    shown = ", ".join(cut(name, MAX_NAME_CHARS) for name in names[:MAX_ITEMS])
    more = len(names) - MAX_ITEMS
    return shown + (f", and {more} more" if more > 0 else "") if names else "(none)"


def more_of(total: int) -> list[str]:
    """The line saying how many of ``total`` items were not shown."""
    more = total - MAX_ITEMS
    return [f"{INDENT}... and {more} more"] if more > 0 else []


def name_text(value: Any) -> str:
    """A method or kind, shown."""
    return cut(text_of(value), MAX_NAME_CHARS) if value is not None else "(none)"


def id_text(value: Any) -> str:
    """A request id or a number, shown."""
    if isinstance(value, strictjson.Number):
        return cut(value.text, MAX_NAME_CHARS)
    if isinstance(value, str):
        return cut(value, MAX_NAME_CHARS)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return "null" if value is None else cut(text_of(value), MAX_NAME_CHARS)


def field_text(fields: dict[str, Any], key: str) -> str:
    """A field of a message, shown (a string or a number; "" for anything else)."""
    return cut(text_of(fields.get(key)), MAX_NAME_CHARS)


def decoded(line: bytes) -> str:
    return line[: MAX_TEXT_CHARS * 4].decode("utf-8", "replace")


def cut(text: str, limit: int = MAX_TEXT_CHARS, *, keep: str = "") -> str:
    """``text`` escaped and cut at ``limit`` characters (saying how many more there were)."""
    text = text.replace("\r\n", "\n")
    more = len(text) - limit
    shown = escaped(text[:limit], keep=keep)
    return shown + (f"... ({more} more characters)" if more > 0 else "")
