"""``acp-relay watch``: a live conversation on a terminal, as a watcher of its connection.

Turns the flags and ``$ACP_RELAY_TICKET`` into a :class:`relay.client.watch.WatchConfig`
(the ticket and the socket as ``connect`` takes them: :mod:`relay.commands.dialflags`), then
watches until the connection ends.
"""

from __future__ import annotations

import argparse
import os

import uvloop

from relay.client.watch import WatchConfig, run_watch
from relay.commands.dialflags import dial_config
from relay.config import convert
from relay.config.dialoptions import DIALING, TICKET_ENV, TICKET_SOURCES
from relay.config.options import Option, add_options

PRINTING: tuple[Option, ...] = (
    Option(
        "raw",
        "print each frame as one JSON object per line, for scripts: "
        '{"seq","from","line"} with the line exactly as it crossed, {"from":"relay",'
        '"message"}, the first {"type":"watching"} frame and a last {"type":"closed"}',
        False,
        None,
        convert.boolean,
        is_flag=True,
        default_text="off",
        layered=False,
    ),
)

OPTIONS = (*TICKET_SOURCES, *DIALING, *PRINTING)

EXIT_STATUSES = """\
exit status:
  0  the connection ended (1000), or Ctrl-C / SIGTERM stopped watching
  1  could not attach (no ticket, relay unreachable, ticket refused, nothing to
     watch), or the socket was lost; one line on stderr says why
  2  a usage error (a bad flag, no ticket source)
  3  fell behind: the relay dropped this watcher (4429); attach again with a new ticket
  4  the relay shut down (1001)
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``watch`` subcommand."""
    parser = commands.add_parser(
        "watch",
        help="watch a connection live: its conversation, readable on a terminal",
        description="Attach to a running connection of the relay at URL as a watcher "
        "(the acp-relay.watch.v1 subprotocol) and print its conversation: first what the "
        "relay kept of it, then each line as it comes: the user's prompts, the agent's "
        "words and thoughts, tool calls and their status, permission requests and who "
        "answered them, plans, and the relay's notices. Read-only: it never answers. The "
        "ticket is a watcher's, minted with `acp-relay ticket --watch CONNECTION_ID`, from "
        f"--ticket-command, --ticket-file, --ticket or ${TICKET_ENV}.",
        epilog=EXIT_STATUSES,
        formatter_class=_EpilogAsWritten,
    )
    parser.add_argument("url", metavar="URL", help="the relay's endpoint, ws:// or wss://")
    add_options(parser.add_mutually_exclusive_group(), TICKET_SOURCES)
    add_options(parser, (*DIALING, *PRINTING))
    parser.set_defaults(func=run)


class _EpilogAsWritten(argparse.HelpFormatter):
    """The description wrapped as usual, the exit statuses' table (lines of its own) kept."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" not in text:
            return super()._fill_text(text, width, indent)
        return "".join(indent + line for line in text.splitlines(keepends=True))


def run(args: argparse.Namespace) -> int:
    """Watch the connection the ticket names until it ends."""
    config = WatchConfig(dial=dial_config(args, os.environ, watching=True), raw=args.raw)
    return uvloop.run(run_watch(config))
