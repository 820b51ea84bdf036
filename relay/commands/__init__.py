"""Command line: ``acp-relay serve``, ``ticket``, ``connect`` and ``watch``.

The I/O edge of configuration: each command's module (:mod:`relay.commands.serve`,
:mod:`relay.commands.ticket`, :mod:`relay.commands.connect`, :mod:`relay.commands.watch`) reads the
environment and the files its flags name, hands them to the pure
:mod:`relay.config.settings`, then runs. Every command's flags are
:class:`relay.config.options.Option` rows with the defaults of :mod:`relay.config.defaults`.
Diagnostics go to stderr; stdout only carries what a command is asked to print. A
:class:`relay.config.errors.UsageError` is one line on stderr and exit status 2.

Only the module of the command being run is imported: ``serve`` does not load
``connect``'s TLS and stdio code, nor ``connect`` or ``watch`` the server's (both are on
the critical path of a start, see docs/performance.md).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from relay import __version__
from relay.config.errors import UsageError

__all__ = ["build_parser", "main"]

COMMANDS = (
    "serve",
    "ticket",
    "connect",
    "watch",
    "chat",
)  # each a module of this package with register()


class Parser(argparse.ArgumentParser):
    """A parser that takes no abbreviated flag: ``--secret VALUE`` would otherwise be taken
    for ``--secret-file VALUE``, and the error about that file would print the value (a
    secret, when one was typed there)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``acp-relay`` parser: with ``command``, only that subcommand's flags are loaded
    (the others are there by name); without, every subcommand's."""
    parser = Parser(
        prog="acp-relay",
        description="Serve an ACP agent over WebSocket, one agent process per socket.",
    )
    parser.add_argument("--version", action="version", version=f"acp-relay {__version__}")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=Parser
    )  # none: main lists them
    for name in COMMANDS:
        if command is None or name == command:
            importlib.import_module(f"relay.commands.{name}").register(commands)
        else:
            commands.add_parser(name)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs, when its first word that is not a flag names one."""
    word = next((each for each in argv if not each.startswith("-")), None)
    return word if word in COMMANDS else None


def no_command(parser: argparse.ArgumentParser) -> str:
    """What ``acp-relay`` without a command says: each command with its hint, and a start."""
    listed = [
        f"  {choice.dest:<9} {choice.help}"
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in action._choices_actions
    ]
    return "\n".join(
        [
            parser.format_usage().rstrip(),
            "acp-relay: give a command:",
            *listed,
            "Try `acp-relay serve --dev` for a relay with a demo agent and its console;",
            "`acp-relay COMMAND --help` shows a command's options.",
        ]
    )


# Flags a newcomer tries that the commands spell otherwise: what to use instead.
INSTEAD = {
    ("serve", "--port"): "use --listen HOST:PORT (e.g. --listen 127.0.0.1:{value})",
    ("serve", "--host"): "use --listen HOST:PORT (e.g. --listen {value}:8765)",
    ("serve", "--bind"): "use --listen HOST:PORT (e.g. --listen 127.0.0.1:8765)",
}


def unknown_arguments(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> str:
    """What ``acp-relay COMMAND`` says of arguments it does not take: the flag to use
    instead when one is known (``--port``: ``--listen``), or the nearest flag, and where
    the command's options are listed (not the top-level usage)."""
    hints = []
    for at, word in enumerate(unknown):
        flag, equals, value = word.partition("=")
        if not flag.startswith("--"):
            continue
        following = unknown[at + 1] if at + 1 < len(unknown) else ""
        if not equals and not following.startswith("-"):
            value = following
        instead = INSTEAD.get((command, flag))
        if instead is not None:
            hints.append(f"{flag}: {instead.format(value=value or flag[2:].upper())}")
        else:
            close = difflib.get_close_matches(flag, _flags_of(parser, command), n=1)
            if close:
                hints.append(f"{flag}: did you mean {close[0]}?")
    said = "; ".join([f"unrecognized arguments: {shown_unknown(unknown)}", *hints])
    return f"acp-relay {command}: error: {said}\n`acp-relay {command} --help` lists its options"


def shown_unknown(unknown: list[str]) -> str:
    """The unknown arguments as an error may show them: each flag by its name, never the
    value given to it (a mistyped ``--secret VALUE`` must not print the secret)."""
    shown, hidden = [], 0
    for at, word in enumerate(unknown):
        flag, equals, _ = word.partition("=")
        after_flag = at > 0 and unknown[at - 1].startswith("--") and "=" not in unknown[at - 1]
        if flag.startswith("-"):
            shown.append(flag)
            hidden += bool(equals)
        elif after_flag:
            hidden += 1
        else:
            shown.append(word)
    if hidden:
        shown.append(f"(and {hidden} value{'s' if hidden > 1 else ''}, not shown)")
    return " ".join(shown)


def _flags_of(parser: argparse.ArgumentParser, command: str) -> list[str]:
    """Every flag of ``command``'s parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices[command]
            return [flag for each in sub._actions for flag in each.option_strings]
    return []


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``acp-relay``; returns the exit status."""
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:2] == ["chat", "audit"]:  # a subcommand of chat's, beside its URL argument
        from relay.commands.chataudit import main as audit

        return audit(words[2:])
    if chosen_command(words) == "serve":  # before its modules load: see relay.commands.startsignals
        from relay.commands.startsignals import defer_stop_signals

        defer_stop_signals()
    parser = build_parser(chosen_command(words))
    args, unknown = parser.parse_known_args(words)
    if args.command is None:
        print(no_command(parser), file=sys.stderr)
        return 2
    if unknown:
        print(unknown_arguments(parser, args.command, unknown), file=sys.stderr)
        return 2
    try:
        status: int = args.func(args)
    except UsageError as exc:
        print(f"acp-relay: {exc}", file=sys.stderr)
        return 2
    return status
