"""Command line: ``acp-relay serve``, ``ticket``, ``connect`` and ``watch``.

The I/O edge of configuration: each command's module (:mod:`relay.cli.serve`,
:mod:`relay.cli.ticket`, :mod:`relay.cli.connect`, :mod:`relay.cli.watch`) reads the
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
import importlib
import sys
from collections.abc import Sequence

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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``acp-relay`` parser: with ``command``, only that subcommand's flags are loaded
    (the others are there by name); without, every subcommand's."""
    parser = argparse.ArgumentParser(
        prog="acp-relay",
        description="Serve an ACP agent over WebSocket, one agent process per socket.",
    )
    parser.add_argument("--version", action="version", version=f"acp-relay {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")  # none: main lists them
    for name in COMMANDS:
        if command is None or name == command:
            importlib.import_module(f"relay.cli.{name}").register(commands)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``acp-relay``; returns the exit status."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(words))
    args = parser.parse_args(words)
    if args.command is None:
        print(no_command(parser), file=sys.stderr)
        return 2
    try:
        status: int = args.func(args)
    except UsageError as exc:
        print(f"acp-relay: {exc}", file=sys.stderr)
        return 2
    return status
