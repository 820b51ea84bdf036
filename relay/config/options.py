"""One command-line option: its flag, environment variable, config key and converter.

Pure. :mod:`relay.config.settings` holds ``serve``'s table of them; ``connect`` and ``ticket``
declare their flags with the same :class:`Option`. Apart from the table, so that
``connect`` loads none of ``serve``'s settings (path rules, MCP servers, TOML) to start.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from relay.config import convert

ENV_PREFIX = "ACP_RELAY_"


@dataclass(frozen=True)
class Option:
    """One option: flag ``--name``; when layered also env ``ACP_RELAY_NAME`` and TOML key.

    ``convert`` takes one raw value (of each item, for a repeatable option). A layered
    option's flag is kept raw and resolved with the other layers by
    :func:`relay.config.settings.resolve`; a flag-only option (``connect``, ``ticket``) is converted
    by argparse itself.
    """

    name: str
    help: str
    default: object
    metavar: str | None
    convert: Callable[[object], object]
    repeatable: bool = False
    is_flag: bool = False
    default_text: str | None = None
    negatable: bool = False  # a boolean flag with a --no- form (its default is on)
    attribute: str | None = None  # the Settings field, when not named like the option
    is_path: bool = False  # a relative path is taken against the working directory
    layered: bool = True  # False: a flag only, no environment variable nor config key

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def field(self) -> str:
        return self.attribute or self.dest

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()

    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, float) and self.default.is_integer():
            return str(int(self.default))
        return "none" if self.default in (None, ()) else str(self.default)

    def help_text(self) -> str:
        notes = ["repeatable"] if self.repeatable else []
        if self.layered or self.default is not None or self.default_text is not None:
            notes.append(f"default: {self.shown_default()}")
        if self.layered:
            notes.append(f"env {self.env}" + (", split like a shell" if self.repeatable else ""))
        return f"{self.help} ({'; '.join(notes)})" if notes else self.help

    def parse(self, value: object) -> Any:
        """The typed value of a raw one; a repeatable option's is a tuple of its items'."""
        if self.repeatable:
            return tuple(self.convert(item) for item in convert.strings(value))
        return self.convert(value)

    def default_value(self) -> Any:
        return None if self.default is None else self.parse(self.default)


def add_options(parser: argparse._ActionsContainer, options: Iterable[Option]) -> None:
    """One flag per option: a layered one stays out of the Namespace unless given (see
    :func:`relay.config.settings.resolve`); a flag-only one is converted by argparse and has its
    default."""
    for each in options:
        parser.add_argument(each.flag, **_argument(each))


def _argument(option: Option) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"dest": option.dest, "help": option.help_text().replace("%", "%%")}
    kwargs["default"] = argparse.SUPPRESS if option.layered else option.default_value()
    if option.negatable:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif option.is_flag:
        kwargs["action"] = "store_true"
    else:
        kwargs["metavar"] = option.metavar
        kwargs["action"] = "append" if option.repeatable else "store"
        if not option.layered:
            kwargs["type"] = _argparse_type(option)
    if option.repeatable and not option.layered:
        kwargs["default"] = list(kwargs["default"] or ())  # argparse appends to it
    return kwargs


def _argparse_type(option: Option) -> Callable[[str], object]:
    def parse(text: str) -> object:
        try:
            return option.convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse
