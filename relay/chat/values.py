"""An agent's JSON values read leniently, for what a person is shown of them.

Pure. What the chat shows of an agent's message is read field by field: a field that is
not of the expected type is shown as nothing, never as an error. A number keeps the
agent's own spelling (:class:`relay.core.strictjson.Number`).
"""

from __future__ import annotations

from typing import Any

from relay.core import strictjson


def text_of(value: Any) -> str:
    """``value`` as text: a string as it is, a number as the agent spelled it, else ''."""
    if isinstance(value, strictjson.Number):
        return value.text
    return value if isinstance(value, str) else ""


def list_of(value: Any) -> list[Any]:
    """``value`` if it is a list, else an empty one."""
    return value if isinstance(value, list) else []
