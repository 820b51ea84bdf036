"""A session's controls: read from what the agent offers, kept current, changed by request."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.chat.controls import (
    Asked,
    Change,
    Choice,
    Controls,
    Refused,
    Usage,
    applied,
    change,
    commands_text,
    controls_of_session,
    controls_of_state,
    controls_state,
    settings_line,
    updated,
    usage_text,
)
from relay.core import strictjson

CONFIG: list[dict[str, Any]] = [
    {
        "id": "mode",
        "name": "Session Mode",
        "category": "mode",
        "type": "select",
        "currentValue": "ask",
        "options": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}],
    },
    {
        "id": "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": "m1",
        "options": [
            {"group": "fast", "name": "Fast", "options": [{"value": "m1", "name": "Model 1"}]},
            {"group": "big", "name": "Big", "options": [{"value": "m2", "name": "Model 2"}]},
        ],
    },
    {"id": "think", "name": "Thinking", "type": "boolean", "currentValue": False},
    {"id": "odd", "name": "Odd", "type": "slider", "currentValue": 3},
]
GEMINI: dict[str, Any] = {
    "modes": {
        "currentModeId": "default",
        "availableModes": [
            {"id": "default", "name": "Default"},
            {"id": "autoEdit", "name": "Auto Edit"},
            {"id": "yolo", "name": "YOLO"},
        ],
    },
    "models": {
        "currentModelId": "gemini-2.5-pro",
        "availableModels": [
            {"modelId": "gemini-2.5-pro", "name": "Gemini 2.5 Pro"},
            {"modelId": "gemini-2.5-flash", "name": "Gemini 2.5 Flash"},
        ],
    },
}


def read(value: Any) -> Any:
    """As the relay reads an agent's line: strict JSON, numbers as spelled."""
    return strictjson.loads(json.dumps(value).encode())


def test_config_options_are_read_in_order_groups_flattened_unknown_types_ignored() -> None:
    """configOptions: select and boolean kept in the agent's order, a slider dropped."""
    controls = controls_of_session(read({"sessionId": "s", "configOptions": CONFIG}))
    assert [c.control_id for c in controls.options] == ["mode", "model", "think"]
    model = controls.options[1]
    assert model.choices == (Choice("m1", "Model 1"), Choice("m2", "Model 2"))
    assert controls.options[2].current == "false"
    assert settings_line(controls) == (
        "⚙️ Session Mode: Ask · Model: Model 1 · Thinking: off "
        "(change: !mode ID, !model VALUE, !set OPTION VALUE; approvers only)"
    )


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        (
            Asked("mode", "code"),
            Change(
                "session/set_config_option",
                {"sessionId": "s", "configId": "mode", "value": "code"},
                "Session Mode → Code",
            ),
        ),
        (
            Asked("model", "Model 2"),
            Change(
                "session/set_config_option",
                {"sessionId": "s", "configId": "model", "value": "m2"},
                "Model → Model 2",
            ),
        ),
        (
            Asked("think", "true", by_category=False),
            Change(
                "session/set_config_option",
                {"sessionId": "s", "configId": "think", "value": True, "type": "boolean"},
                "Thinking → on",
            ),
        ),
        (Asked("mode", "yolo"), Refused("Session Mode has no value 'yolo'; its values: ask, code")),
        (
            Asked("odd", "1", by_category=False),
            Refused("this agent has no option 'odd'; its options: mode, model, think"),
        ),
    ],
)
def test_a_change_names_an_offered_value_or_is_refused_with_the_choices(
    asked: Asked, expected: Change | Refused
) -> None:
    """!mode, !model and !set become session/set_config_option, checked against the values."""
    controls = controls_of_session(read({"configOptions": CONFIG}))
    assert change(controls, "s", asked) == expected


def test_an_agent_with_only_modes_and_models_gets_their_own_requests() -> None:
    """gemini-cli's modes and models (no configOptions): session/set_mode and set_model."""
    controls = controls_of_session(read(GEMINI))
    assert change(controls, "s", Asked("mode", "yolo")) == Change(
        "session/set_mode", {"sessionId": "s", "modeId": "yolo"}, "Mode → YOLO"
    )
    assert change(controls, "s", Asked("model", "gemini-2.5-flash")) == Change(
        "session/set_model",
        {"sessionId": "s", "modelId": "gemini-2.5-flash"},
        "Model → Gemini 2.5 Flash",
    )
    assert isinstance(change(controls, "s", Asked("effort", "x", by_category=False)), Refused)
    assert settings_line(controls).startswith("⚙️ Mode: Default · Model: Gemini 2.5 Pro")


def test_an_agent_offering_nothing_is_said_so() -> None:
    """No modes, no models, no options: every change refused, nothing offered."""
    controls = controls_of_session(read({"sessionId": "s"}))
    assert not controls.offered()
    assert change(controls, "s", Asked("model", "x")) == Refused(
        "this agent offers no model to choose"
    )


def test_updates_keep_the_controls_current() -> None:
    """current_mode_update, config_option_update, commands and usage each change their part."""
    controls = controls_of_session(read({"configOptions": CONFIG, **GEMINI}))
    moved = updated(
        controls, read({"sessionUpdate": "current_mode_update", "currentModeId": "code"})
    )
    assert moved is not None
    assert moved.by_category("mode") is not None
    assert moved.by_category("mode").current == "code"  # type: ignore[union-attr]
    new_config = [dict(CONFIG[1], currentValue="m2")]
    replaced = updated(
        moved, read({"sessionUpdate": "config_option_update", "configOptions": new_config})
    )
    assert replaced is not None
    assert [c.current for c in replaced.options] == ["m2"]
    listed = updated(
        replaced,
        read(
            {
                "sessionUpdate": "available_commands_update",
                "availableCommands": [
                    {"name": "test", "description": "Run"},
                    {"description": "no name"},
                ],
            }
        ),
    )
    assert listed is not None
    assert (
        commands_text(listed.commands)
        == "The agent's commands (send one as a prompt):\n/test — Run"
    )
    used = updated(
        listed,
        read(
            {
                "sessionUpdate": "usage_update",
                "used": 53000,
                "size": 200000,
                "cost": {"amount": 0.42, "currency": "USD"},
            }
        ),
    )
    assert used is not None
    assert used.usage == Usage(53000, 200000, "0.42 USD")
    assert (
        usage_text(used.usage) == "Context: 53,000 of 200,000 tokens (26 %); cost so far 0.42 USD"
    )
    assert updated(used, read({"sessionUpdate": "agent_message_chunk"})) is None


@pytest.mark.parametrize(
    "update",
    [
        {"sessionUpdate": "usage_update", "used": -1, "size": 10},
        {"sessionUpdate": "usage_update", "used": "9", "size": 10},
        {"sessionUpdate": "usage_update", "used": 1.5, "size": 10},
        {"sessionUpdate": "config_option_update", "configOptions": "all"},
        {"sessionUpdate": "available_commands_update", "availableCommands": None},
    ],
)
def test_malformed_updates_change_nothing_they_cannot_read(update: dict[str, Any]) -> None:
    """A field of the wrong shape leaves what was known (commands: none listed)."""
    before = Controls(usage=Usage(1, 2))
    after = updated(before, read(update))
    assert after is not None
    assert after.usage == before.usage
    assert after.options == before.options


def test_hostile_names_are_escaped_in_what_the_room_reads() -> None:
    """An agent's names with control or bidi characters reach the line escaped."""
    hostile = [
        {
            "id": "m",
            "name": "Mo\u202edel",
            "category": "model",
            "type": "select",
            "currentValue": "x\n",
            "options": [{"value": "x\n", "name": "\x1b[31mred"}],
        }
    ]
    line = settings_line(controls_of_session(read({"configOptions": hostile})))
    assert "\u202e" not in line
    assert "\x1b" not in line
    assert "\n" not in line


NAMES = st.text(min_size=1, max_size=8)


@given(st.lists(st.tuples(NAMES, NAMES), min_size=1, max_size=6, unique_by=lambda t: t[0]), NAMES)
def test_a_change_only_ever_sends_a_value_the_agent_offered(
    values: list[tuple[str, str]], asked: str
) -> None:
    """Whatever is asked, a Change carries one of the option's values, else it is Refused."""
    option = {
        "id": "o",
        "name": "O",
        "category": "model",
        "type": "select",
        "currentValue": values[0][0],
        "options": [{"value": v, "name": n} for v, n in values],
    }
    result = change(
        controls_of_session(read({"configOptions": [option]})), "s", Asked("model", asked)
    )
    if isinstance(result, Change):
        assert result.params["value"] in [v for v, _ in values]
    else:
        assert asked not in [v for v, _ in values]


def test_controls_kept_in_a_snapshot_read_back_the_same() -> None:
    """controls_state and controls_of_state round-trip through JSON; an older snapshot has
    none."""
    controls = controls_of_session(json.loads(json.dumps({
        "configOptions": [{"id": "x", "name": "X", "type": "boolean", "currentValue": True}],
        "modes": {"currentModeId": "a", "availableModes": [{"id": "a", "name": "A"}]},
        "models": {"currentModelId": "m", "availableModels": [{"modelId": "m", "name": "M"}]},
    })))  # fmt: skip
    controls = replace(controls, commands=(Choice("review", "Review"),),
                       usage=Usage(1, 2, "0.1 USD"))  # fmt: skip
    assert controls_of_state(json.loads(json.dumps(controls_state(controls)))) == controls
    assert controls_of_state(None) == Controls()


def test_a_change_accepted_is_applied_to_what_it_named() -> None:
    """applied() sets the named control's current value (older modes too); an unknown value
    or control changes nothing."""
    controls = controls_of_session({
        "modes": {"currentModeId": "a", "availableModes": [{"id": "a"}, {"id": "b"}]}})  # fmt: skip
    assert applied(controls, Asked("mode", "b")).mode.current == "b"  # type: ignore[union-attr]
    assert applied(controls, Asked("mode", "zz")) == controls
    assert applied(controls, Asked("model", "x")) == controls
