"""An agent's JSON values read leniently, for what a person is shown of them.

Pure. What a screen shows of a message (the conversation model, the terminal's and the
chat's renderers) is read field by field: a field that is not of the expected type is
shown as nothing, never as an error. A number keeps the writer's own spelling
(:class:`relay.core.strictjson.Number`).
"""

from __future__ import annotations

from typing import Any

from relay.core import strictjson


def text_of(value: Any) -> str:
    """A string of the conversation, or "" for anything else (a number as the writer
    spelled it): every screen reads an agent's values leniently through this."""
    if isinstance(value, strictjson.Number):
        return value.text
    return value if isinstance(value, str) else ""


def list_of(value: Any) -> list[Any]:
    """``value`` if it is a list, else an empty one."""
    return value if isinstance(value, list) else []
