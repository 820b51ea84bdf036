"""Value converters for options: a raw value in, a typed value out, or a ValueError saying why.

Pure. A raw value is the text of a flag or environment variable, or any TOML value from
a config file; the messages name the problem and the expected form, never the source
(the caller adds that). ``serve``, ``connect`` and ``ticket`` share these.
"""

from __future__ import annotations

import enum
import math
import re
import shlex
from collections.abc import Callable, Sequence
from typing import TypeVar

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")

_SIZE_UNITS = {"": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3}
# A connection's id as the relay makes it (a UUID, lower case): its Acp-Connection-Id.
_CONNECTION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CONNECTION_ID_EXAMPLE = "6f1c2a7e-0f3b-4f52-9d0e-8f2b3c4d5e6f"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

T = TypeVar("T")
Member = TypeVar("Member", bound=enum.Enum)
Number = TypeVar("Number", int, float)


def text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def from_text(parse: Callable[[str], T]) -> Callable[[object], T]:
    """A converter of a string value by ``parse``, refusing other TOML types."""

    def convert(value: object) -> T:
        return parse(text(value))

    return convert


def non_empty(value: object) -> str:
    result = text(value)
    if not result.strip():
        raise ValueError("must not be empty")
    return result


def connection_id(value: object) -> str:
    """A connection's whole id (in any case; given back in lower case, as the relay names
    it), or a ValueError saying what one looks like and where it shows."""
    given = text(value)
    found = given.strip().lower()
    if not _CONNECTION_ID.fullmatch(found):
        raise ValueError(
            f"{given!r} is not a connection id: one is 36 characters such as "
            f"{CONNECTION_ID_EXAMPLE}, the Acp-Connection-Id of the connection's 101; the "
            "relay's log shows it whole as connection_id on the connection's lines, and the "
            "dev console under share"
        )
    return found


def strings(value: object) -> list[str]:
    """A TOML array of strings (or the list argparse collects for a repeated flag)."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f'expected an array of strings such as ["a", "b"], got {value!r}')
    return list(value)


def shell_words(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"cannot split {value!r} like a shell: {exc}") from None


def command(value: object) -> tuple[str, ...]:
    """A command line: a TOML array as is, or a string split like a shell (never run by one)."""
    argv = strings(value) if isinstance(value, list) else shell_words(text(value))
    if not argv:
        raise ValueError("the agent command is empty; give a program, e.g. 'my-agent --acp'")
    return tuple(argv)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number of seconds such as 2.5, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number of seconds such as 2.5, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number of seconds, got {value!r}")
    return number


def positive_seconds(value: object) -> float:
    """Seconds greater than 0: a timeout, an interval, a ticket's lifetime."""
    try:
        number = _number(value)
    except ValueError:
        number = 0.0
    if number <= 0:
        raise ValueError(
            f"expected seconds greater than 0, a finite number of seconds such as 2.5, "
            f"got {value!r}"
        )
    return number


def seconds(value: object) -> float:
    """Seconds, 0 or more: a grace period that may be none."""
    number = _number(value)
    if number < 0:
        raise ValueError(f"must be 0 or more, got {value!r}")
    return number


def at_most(
    base: Callable[[object], Number], most: Number, shown: str
) -> Callable[[object], Number]:
    """The ``base`` converter (seconds, a size) also refusing more than ``most``, which the
    error names as ``shown`` (e.g. "604800 s (a week)")."""

    def convert(value: object) -> Number:
        result = base(value)
        if result > most:
            raise ValueError(f"must be at most {shown}, got {value!r}")
        return result

    return convert


def positive_int(value: object) -> int:
    number = count(value)
    if number < 1:
        raise ValueError(f"must be at least 1, got {value!r}")
    return number


def count(value: object) -> int:
    """A whole number, 0 or more."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value)
    raise ValueError(f"expected a whole number such as 64, got {value!r}")


def parse_size(value: str | int) -> int:
    """Bytes from ``1048576``, ``"1048576"``, ``"16MiB"``, ``"512 KiB"`` or ``"1GiB"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 16MiB, got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        digits, unit = _split_size(value)
        if not digits or unit.lower() not in _SIZE_UNITS:
            raise ValueError(
                f"expected bytes as a whole number or with a KiB, MiB or GiB suffix "
                f"such as 16MiB, got {value!r}"
            )
        size = int(digits) * _SIZE_UNITS[unit.lower()]
    if size < 1:
        raise ValueError(f"must be at least 1 byte, got {value!r}")
    return size


def _split_size(value: str) -> tuple[str, str]:
    stripped = value.strip()
    end = len(stripped) - len(stripped.lstrip("0123456789"))
    return stripped[:end], stripped[end:].strip()


def size(value: object) -> int:
    if not isinstance(value, str | int):
        raise ValueError(f"expected a size such as 16MiB, got {value!r}")
    return parse_size(value)


def size_at_least(minimum: int, shown: str) -> Callable[[object], int]:
    """A size converter that also refuses fewer than ``minimum`` bytes (``shown``, e.g. 1KiB)."""

    def convert(value: object) -> int:
        result = size(value)
        if result < minimum:
            raise ValueError(f"must be at least {minimum} bytes ({shown}), got {value!r}")
        return result

    return convert


def boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    word = text(value).strip().lower()
    if word in _TRUE | _FALSE:
        return word in _TRUE
    raise ValueError(f"expected 1/true/yes/on or 0/false/no/off, got {value!r}")


def choice(value: object, choices: Sequence[str]) -> str:
    """One of ``choices``, case-insensitively; returned in lower case."""
    word = text(value).strip().lower()
    if word not in choices:
        raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
    return word


def one_of(*choices: str) -> Callable[[object], str]:
    """A converter accepting one of ``choices`` (see :func:`choice`)."""

    def convert(value: object) -> str:
        return choice(value, choices)

    return convert


def member_of(kind: type[Member]) -> Callable[[object], Member]:
    """A converter accepting the value of one of ``kind``'s members (see :func:`choice`),
    and giving the member: the choice is parsed here, once."""
    values = tuple(str(member.value) for member in kind)

    def convert(value: object) -> Member:
        return kind(choice(value, values))

    return convert


def log_level(value: object) -> str:
    return choice(value, LOG_LEVELS)


def log_format(value: object) -> str | None:
    """json, console, or None for auto (console on a terminal, else json)."""
    word = choice(value, (*LOG_FORMATS, "auto"))
    return None if word == "auto" else word


def url_path(value: object) -> str:
    result = text(value)
    if not result.startswith("/") or any(c.isspace() or c in "?#" for c in result):
        raise ValueError(f"must start with / and have no spaces, ? or #, e.g. /acp; got {result!r}")
    return result


def env_entry(value: object) -> tuple[str, str]:
    """``NAME=VALUE`` as a pair; NAME is a portable environment variable name."""
    item = text(value)
    name, sep, entry = item.partition("=")
    if not sep or not is_env_name(name):
        raise ValueError(
            f"bad entry {item!r}: expected NAME=VALUE, NAME made of letters, digits "
            "and _ and not starting with a digit"
        )
    return name, entry


def is_env_name(name: str) -> bool:
    return (
        bool(name) and name.isascii() and name.replace("_", "a").isalnum() and not name[0].isdigit()
    )
