"""A session's controls as the agent offers them: its mode, its configuration options (the
model among them), its slash commands and what it has used, and the requests that change
them.

Pure. The agent says what it offers in the answer that opens a session (``modes``,
``configOptions``, or the older ``models`` some agents still send alone) and keeps it
current with ``current_mode_update``, ``config_option_update``,
``available_commands_update`` and ``usage_update``. A person changes a control with
``!mode ID``, ``!set OPTION VALUE`` or ``!model VALUE``: a value is checked against what
the agent offered, and the request sent is the one the agent offers for it
(``session/set_config_option`` where it sent ``configOptions``, else ``session/set_mode``
or ``session/set_model``). Nothing the agent did not offer is offered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from relay.acp.values import list_of, text_of
from relay.chat.text import safe_line
from relay.core import strictjson

MAX_CONTROLS = 32  # configuration options kept
MAX_CHOICES = 200  # values kept per option
MAX_COMMANDS = 100


@dataclass(frozen=True)
class Choice:
    """One value an option (or a mode, or a model) may take."""

    value: str
    name: str


@dataclass(frozen=True)
class Control:
    """One configuration option: its id, name, category, current value and choices."""

    control_id: str
    name: str
    category: str
    current: str
    choices: tuple[Choice, ...]
    boolean: bool = False

    def choice(self, value: str) -> Choice | None:
        """The choice ``value`` names, by value or (case aside) by name."""
        for choice in self.choices:
            if choice.value == value:
                return choice
        folded = value.casefold()
        return next((c for c in self.choices if c.name.casefold() == folded), None)

    def current_name(self) -> str:
        found = next((c for c in self.choices if c.value == self.current), None)
        return found.name if found is not None else self.current


@dataclass(frozen=True)
class Usage:
    """What the session has used: context tokens of its window, and its cost when given."""

    used: int
    size: int
    cost: str = ""  # e.g. "0.42 USD"


@dataclass(frozen=True)
class Controls:
    """Everything a thread shows of a session's controls, as the agent last said."""

    options: tuple[Control, ...] = ()  # configOptions, in the agent's order
    mode: Control | None = None  # the older ``modes`` (when no option has category mode)
    model: Control | None = None  # the older ``models`` (when no option has category model)
    commands: tuple[Choice, ...] = ()  # name and description of each slash command
    usage: Usage | None = None

    def offered(self) -> bool:
        return bool(self.options or self.mode or self.model)

    def by_category(self, category: str) -> Control | None:
        return next((c for c in self.options if c.category == category), None)


# -- what the agent says ------------------------------------------------------------------


def controls_of_session(result: Mapping[str, Any], before: Controls | None = None) -> Controls:
    """The controls a session-opening answer (``session/new``, load, resume) offers."""
    controls = before or Controls()
    options = _options(result.get("configOptions"))
    return replace(
        controls,
        options=options if options is not None else controls.options,
        mode=_modes(result.get("modes")) or controls.mode,
        model=_models(result.get("models")) or controls.model,
    )


def updated(controls: Controls, update: Mapping[str, Any]) -> Controls | None:
    """``controls`` after a ``session/update``'s ``update`` object; None when it is not one
    of the controls' (the caller shows it otherwise)."""
    kind = update.get("sessionUpdate")
    if kind == "current_mode_update":
        mode_id = text_of(update.get("currentModeId"))
        mode_option = controls.by_category("mode")
        if mode_option is not None:
            return _with_option(controls, replace(mode_option, current=mode_id))
        if controls.mode is not None and mode_id:
            return replace(controls, mode=replace(controls.mode, current=mode_id))
        return controls
    if kind in ("config_option_update", "config_options_update"):  # the docs' spelling too
        options = _options(update.get("configOptions"))
        return controls if options is None else replace(controls, options=options)
    if kind == "available_commands_update":
        return replace(controls, commands=_commands(update.get("availableCommands")))
    if kind == "usage_update":
        return replace(controls, usage=_usage(update) or controls.usage)
    return None


def _with_option(controls: Controls, option: Control) -> Controls:
    options = tuple(option if c.control_id == option.control_id else c for c in controls.options)
    return replace(controls, options=options)


def _options(value: Any) -> tuple[Control, ...] | None:
    if not isinstance(value, list):
        return None
    found = []
    for item in value[:MAX_CONTROLS]:
        if not isinstance(item, dict) or not text_of(item.get("id")):
            continue
        boolean = item.get("type") == "boolean"
        if not boolean and item.get("type", "select") != "select":
            continue  # a type the client does not know: ignored, as the spec asks
        current = item.get("currentValue")
        found.append(
            Control(
                control_id=text_of(item.get("id")),
                name=text_of(item.get("name")) or text_of(item.get("id")),
                category=text_of(item.get("category")),
                current=("true" if current else "false") if boolean else text_of(current),
                choices=_BOOLEAN if boolean else _choices(item.get("options")),
                boolean=boolean,
            )
        )
    return tuple(found)


_BOOLEAN = (Choice("true", "on"), Choice("false", "off"))


def _choices(value: Any) -> tuple[Choice, ...]:
    """Select values, flat or in groups (``{group, name, options}``)."""
    flat: list[Any] = []
    for item in list_of(value):
        if isinstance(item, dict) and "group" in item:
            flat.extend(list_of(item.get("options")))
        else:
            flat.append(item)
    choices = [
        Choice(text_of(c.get("value")), text_of(c.get("name")) or text_of(c.get("value")))
        for c in flat[:MAX_CHOICES]
        if isinstance(c, dict) and text_of(c.get("value"))
    ]
    return tuple(choices)


def _modes(value: Any) -> Control | None:
    """The older ``modes``: ``{currentModeId, availableModes: [{id, name}]}``."""
    return _older(value, "mode", ("availableModes", "id", "currentModeId"))


def _models(value: Any) -> Control | None:
    """The older ``models``: ``{currentModelId, availableModels: [{modelId, name}]}``."""
    return _older(value, "model", ("availableModels", "modelId", "currentModelId"))


def _older(value: Any, kind: str, keys: tuple[str, str, str]) -> Control | None:
    """A control the agent offers in its older shape, as one select option."""
    if not isinstance(value, dict):
        return None
    listed, id_key, current_key = keys
    choices = tuple(
        Choice(text_of(m.get(id_key)), text_of(m.get("name")) or text_of(m.get(id_key)))
        for m in list_of(value.get(listed))[:MAX_CHOICES]
        if isinstance(m, dict) and text_of(m.get(id_key))
    )
    current = text_of(value.get(current_key))
    return Control(kind, kind.capitalize(), kind, current, choices) if choices else None


def _commands(value: Any) -> tuple[Choice, ...]:
    return tuple(
        Choice(text_of(c.get("name")), text_of(c.get("description")))
        for c in list_of(value)[:MAX_COMMANDS]
        if isinstance(c, dict) and text_of(c.get("name"))
    )


def _usage(update: Mapping[str, Any]) -> Usage | None:
    used, size = _count(update.get("used")), _count(update.get("size"))
    if used is None or size is None:
        return None
    cost = update.get("cost")
    amount = cost.get("amount") if isinstance(cost, dict) else None
    currency = text_of(cost.get("currency")) if isinstance(cost, dict) else ""
    spent = f"{text_of(amount) or amount} {currency}".strip() if _is_number(amount) else ""
    return Usage(used, size, safe_line(spent, 40))


def _count(value: Any) -> int | None:
    """A token count: a whole number, not negative, of a sane size (else None)."""
    text = value.text if isinstance(value, strictjson.Number) else None
    if text is not None:
        return int(text) if text.isdigit() and len(text) <= 15 else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**15:
        return value
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, strictjson.Number | int | float) and not isinstance(value, bool)


# -- what a person asks -------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """A request to send the agent (its method and params), and the words saying it."""

    method: str
    params: dict[str, Any]
    words: str


@dataclass(frozen=True)
class Refused:
    """A change the agent does not offer (why, and the choices)."""

    why: str


@dataclass(frozen=True)
class Asked:
    """Which control a person names: ``mode``, ``model`` or an option's id (``!set``)."""

    control: str
    value: str
    by_category: bool = field(default=True)


def change(controls: Controls, session_id: str, asked: Asked) -> Change | Refused:
    """The request that sets what ``asked`` names, checked against what the agent offers."""
    control, older = _named(controls, asked)
    if control is None:
        return Refused(_not_offered(controls, asked))
    choice = control.choice(asked.value)
    if choice is None:
        listed = ", ".join(c.value for c in control.choices[:30]) or "none"
        return Refused(
            safe_line(f"{control.name} has no value {asked.value!r}; its values: {listed}", 600)
        )
    words = safe_line(f"{control.name} → {choice.name}")
    if older == "mode":
        return Change("session/set_mode", {"sessionId": session_id, "modeId": choice.value}, words)
    if older == "model":
        params = {"sessionId": session_id, "modelId": choice.value}
        return Change("session/set_model", params, words)
    value: Any = choice.value == "true" if control.boolean else choice.value
    params = {"sessionId": session_id, "configId": control.control_id, "value": value}
    if control.boolean:
        params["type"] = "boolean"
    return Change("session/set_config_option", params, words)


def _named(controls: Controls, asked: Asked) -> tuple[Control | None, str]:
    """The control ``asked`` names, and which older request sets it ('' for an option)."""
    if asked.by_category:
        option = controls.by_category(asked.control)
        if option is not None:
            return option, ""
        older = controls.mode if asked.control == "mode" else controls.model
        return (older, asked.control) if older is not None else (None, "")
    found = next((c for c in controls.options if c.control_id == asked.control), None)
    if found is None:
        folded = asked.control.casefold()
        found = next((c for c in controls.options if c.name.casefold() == folded), None)
    return found, ""


def _not_offered(controls: Controls, asked: Asked) -> str:
    if asked.by_category:
        return f"this agent offers no {asked.control} to choose"
    ids = ", ".join(c.control_id for c in controls.options) or "none"
    return safe_line(f"this agent has no option {asked.control!r}; its options: {ids}", 600)


def settings_line(controls: Controls) -> str:
    """One line: each control and its current value, and how to change them."""
    parts = [f"{c.name}: {c.current_name()}" for c in controls.options]
    if controls.mode is not None and controls.by_category("mode") is None:
        parts.insert(0, f"Mode: {controls.mode.current_name()}")
    if controls.model is not None and controls.by_category("model") is None:
        parts.append(f"Model: {controls.model.current_name()}")
    how = ["!mode ID"] if controls.mode or controls.by_category("mode") else []
    how += ["!model VALUE"] if controls.model or controls.by_category("model") else []
    how += ["!set OPTION VALUE"] if controls.options else []
    return safe_line(f"⚙️ {' · '.join(parts)} (change: {', '.join(how)}; approvers only)", 1500)


def usage_text(usage: Usage) -> str:
    """What the session has used, in words."""
    share = f" ({usage.used * 100 // usage.size} %)" if usage.size else ""
    cost = f"; cost so far {usage.cost}" if usage.cost else ""
    return f"Context: {usage.used:,} of {usage.size:,} tokens{share}{cost}"


def commands_text(commands: tuple[Choice, ...]) -> str:
    """The agent's slash commands, one per line (a prompt that starts with / sends one)."""
    lines = [safe_line(f"/{c.value}" + (f" — {c.name}" if c.name else "")) for c in commands]
    return "\n".join(["The agent's commands (send one as a prompt):", *lines])


def applied(controls: Controls, asked: Asked) -> Controls:
    """``controls`` with what ``asked`` named set to its value (the agent accepted it)."""
    control, older = _named(controls, asked)
    choice = control.choice(asked.value) if control is not None else None
    if control is None or choice is None:
        return controls
    now = replace(control, current=choice.value)
    if older == "mode":
        return replace(controls, mode=now)
    if older == "model":
        return replace(controls, model=now)
    return _with_option(controls, now)


# -- kept across a restart ----------------------------------------------------------------


def asked_state(asked: Asked) -> dict[str, Any]:
    """A change waiting in a session's queue, as JSON values (the queue is kept)."""
    return {"set": [asked.control, asked.value, asked.by_category]}


def asked_of(item: dict[str, Any]) -> Asked:
    """A change :func:`asked_state` kept."""
    control, value, by_category = item["set"]
    return Asked(str(control), str(value), bool(by_category))


def controls_state(controls: Controls) -> dict[str, Any]:
    """The controls as JSON values (for the thread's snapshot)."""

    def control(c: Control | None) -> list[Any] | None:
        if c is None:
            return None
        choices = [[x.value, x.name] for x in c.choices]
        return [c.control_id, c.name, c.category, c.current, choices, c.boolean]

    usage = controls.usage
    return {
        "options": [control(c) for c in controls.options],
        "mode": control(controls.mode),
        "model": control(controls.model),
        "commands": [[c.value, c.name] for c in controls.commands],
        "usage": None if usage is None else [usage.used, usage.size, usage.cost],
    }


def controls_of_state(kept: Any) -> Controls:
    """The controls :func:`controls_state` kept (none for an older snapshot)."""
    if not isinstance(kept, dict):
        return Controls()

    def control(c: list[Any] | None) -> Control | None:
        if c is None:
            return None
        control_id, name, category, current, choices, boolean = c
        return Control(
            control_id, name, category, current, tuple(Choice(v, n) for v, n in choices), boolean
        )

    usage = kept.get("usage")
    return Controls(
        options=tuple(c for c in (control(x) for x in kept.get("options", [])) if c),
        mode=control(kept.get("mode")),
        model=control(kept.get("model")),
        commands=tuple(Choice(v, n) for v, n in kept.get("commands", [])),
        usage=None if usage is None else Usage(*usage),
    )
