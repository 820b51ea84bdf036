"""``acp-relay connect``: the editor's side, stdin and stdout bridged to a relay's WebSocket.

Turns the flags and ``$ACP_RELAY_TICKET`` into a :class:`relay.client.link.dialing.DialConfig`
(the options :mod:`relay.config.dialoptions`'s, read by :mod:`relay.commands.dialflags`, so a
mistake is one line and exit status 2), then runs the bridge.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import replace

import uvloop

from relay.client.editor.bridge import run_bridge
from relay.client.link.dialing import DialConfig
from relay.commands.dialflags import dial_config
from relay.config import convert, defaults
from relay.config.dialoptions import DIALING, TICKET_ENV, TICKET_SOURCES
from relay.config.options import Option, add_options
from relay.core.redaction import Redactor
from relay.observe import logs

CONNECTION: tuple[Option, ...] = (
    *DIALING,
    Option(
        "resume",
        "offer the resume profile: a lost connection is resumed within the "
        "relay's grace, the editor seeing a pause only (needs --ticket-command or "
        "--ticket-file: each socket needs a fresh ticket)",
        True,
        None,
        convert.boolean,
        is_flag=True,
        negatable=True,
        default_text="on",
        layered=False,
    ),
    Option(
        "log-format",
        "log format on stderr: json, console or auto",
        "auto",
        "FORMAT",
        convert.log_format,
        default_text="auto: console on a terminal, else json",
        layered=False,
    ),
    Option(
        "log-level",
        "log level: debug, info, warning or error",
        defaults.LOG_LEVEL,
        "LEVEL",
        convert.log_level,
        layered=False,
    ),
)

OPTIONS = (*TICKET_SOURCES, *CONNECTION)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``connect`` subcommand."""
    parser = commands.add_parser(
        "connect",
        help="be the agent for an editor: bridge stdin/stdout to a relay's WebSocket",
        description="Launched by an editor as if it were the agent: each stdin line goes to "
        "the relay at URL as one WebSocket message, each message comes back as one stdout "
        "line. When the relay cannot be reached or the connection ends, every request gets "
        "a JSON-RPC error saying why. The ticket comes from --ticket-command, --ticket-file, "
        f"--ticket or ${TICKET_ENV}.",
    )
    parser.add_argument("url", metavar="URL", help="the relay's endpoint, ws:// or wss://")
    add_options(parser.add_mutually_exclusive_group(), TICKET_SOURCES)
    add_options(parser, CONNECTION)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Bridge this process's stdin and stdout to the relay until stdin closes."""
    config = connect_config(args, os.environ)
    redacting = Redactor()
    if config.ticket.value is not None:
        redacting.add_ticket(config.ticket.value)
    logs.configure(args.log_level, args.log_format, redacting=redacting)
    return uvloop.run(run_bridge(config))


def connect_config(args: argparse.Namespace, env: Mapping[str, str]) -> DialConfig:
    """The bridge's configuration from the flags and $ACP_RELAY_TICKET; UsageError if wrong."""
    return replace(dial_config(args, env), resume=args.resume)
