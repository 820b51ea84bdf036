"""Command line: ``acp-relay serve``, ``acp-relay ticket`` and ``acp-relay connect``.

The I/O edge of configuration: each command's module (:mod:`relay.cli.serve`,
:mod:`relay.cli.ticket`, :mod:`relay.cli.connect`) reads the environment and the files
its flags name, hands them to the pure :mod:`relay.config`, then runs. Every command's
flags are :class:`relay.config.Option` rows with the defaults of :mod:`relay.defaults`.
Diagnostics go to stderr; stdout only carries what a command is asked to print. A
:class:`relay.errors.UsageError` is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from relay import __version__
from relay.cli import connect, serve, ticket
from relay.errors import UsageError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``acp-relay`` parser with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="acp-relay",
        description="Serve an ACP agent over WebSocket, one agent process per socket.",
    )
    parser.add_argument("--version", action="version", version=f"acp-relay {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (serve, ticket, connect):
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``acp-relay``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except UsageError as exc:
        print(f"acp-relay: {exc}", file=sys.stderr)
        return 2
    return status
