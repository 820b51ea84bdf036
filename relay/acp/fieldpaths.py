"""The field paths of the crossings table: written as text, parsed into steps, walked.

Pure. A field such as ``params.update{sessionUpdate=tool_call|tool_call_update}.locations[].path``
is a list of steps: a key, ``[]`` each element of an array, ``{key=a|b}`` only where that
key is a or b. :func:`walk` finds each place the steps lead to in a message, refusing
before it starts when an array would give more places than its limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any


@dataclass(frozen=True)
class Key:
    name: str


@dataclass(frozen=True)
class Each:
    pass


@dataclass(frozen=True)
class When:
    key: str
    values: frozenset[str]


Step = Key | Each | When
_SEGMENT = re.compile(r"^([A-Za-z_]+)(\[\])?(?:\{([A-Za-z_]+)=([a-z_|]+)\})?$")


@cache
def parse_field(text: str) -> tuple[Step, ...]:
    """``params.update{sessionUpdate=tool_call|tool_call_update}.locations[].path`` as steps:
    a key, ``[]`` each element of an array, ``{key=a|b}`` only where that key is a or b."""
    steps: list[Step] = []
    for segment in text.split(".") if text else ():
        found = _SEGMENT.match(segment)
        if found is None:
            raise ValueError(f"bad field {text!r} at {segment!r}")
        name, each, key, values = found.groups()
        steps.append(Key(name))
        if each:
            steps.append(Each())
        if key:
            steps.append(When(key, frozenset(values.split("|"))))
    return tuple(steps)


class TooManyPlaces(ValueError):
    """A walk would find more places than its limit."""


def walk(
    value: Any, steps: Sequence[Step], where: str = "", limit: int | None = None
) -> Iterator[tuple[Any, Any, str]]:
    """Each place ``steps`` lead to in ``value``: (its container, its key or index, its name).

    TooManyPlaces, before anything else is done, when a step would find over ``limit``.
    """
    if not steps:
        return iter(())
    # Breadth first over (container, key, value, name); the last step's places are the answer.
    places: list[tuple[Any, Any, Any, str]] = [(None, None, value, where)]
    for step in steps:
        places = _step(places, step, limit)
        if not places:
            return iter(())
    return ((container, key, name) for container, key, _value, name in places)


def _step(
    places: list[tuple[Any, Any, Any, str]], step: Step, limit: int | None
) -> list[tuple[Any, Any, Any, str]]:
    found: list[tuple[Any, Any, Any, str]] = []
    for place in places:
        value, where = place[2], place[3]
        if isinstance(step, Key):
            if isinstance(value, dict) and step.name in value:
                name = f"{where}.{step.name}" if where else step.name
                found.append((value, step.name, value[step.name], name))
        elif isinstance(step, Each):
            if isinstance(value, list):
                if limit is not None and len(found) + len(value) > limit:
                    raise TooManyPlaces(f"over {limit} places")  # only Each adds places
                found.extend((value, i, item, f"{where}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, dict) and _is_one_of(value.get(step.key), step.values):
            found.append(place)
    return found


def _is_one_of(value: Any, values: frozenset[str]) -> bool:
    return isinstance(value, str) and value in values
