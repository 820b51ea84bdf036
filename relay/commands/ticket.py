"""``acp-relay ticket``: print a single-use ticket (or a URL carrying one) for a control plane.

Reads the relay's own settings the way ``serve`` does (``--config`` or
``ACP_RELAY_CONFIG``, the ``ACP_RELAY_*`` environment): it signs with the first secret of
``--secret-file`` (or ``ACP_RELAY_SECRET_FILE``), else of ``ACP_RELAY_SECRET``; the
audience is the relay's ``--audience`` unless given; the ticket lives as long as the
relay's ``--ticket-ttl`` unless ``--ttl`` says otherwise, with a warning when it says more
than the relay accepts.

:func:`fresh_ticket` mints (:func:`relay.core.tickets.issue`) with the system's clock and
randomness; the dev banner mints with it too. This module loads nothing of ``serve``'s (the
command runs before every connect and every resume of ``connect --ticket-command``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

from relay.commands.preflight import load_secrets
from relay.config import convert
from relay.config.errors import UsageError
from relay.config.serveoptions import option_named
from relay.config.settings import (
    CONFIG_ENV,
    SECRET_ENV,
    Option,
    add_options,
    config_file_path,
    config_file_source,
    resolve_some,
)
from relay.core.tickets import issue
from relay.core.ticketurls import with_ticket
from relay.streams.filereader import read_named

SECRET_FILE = option_named("secret-file")  # serve's: the flag, else ACP_RELAY_SECRET_FILE
AUDIENCE = replace(
    option_named("audience"),  # serve's: the flag, else ACP_RELAY_AUDIENCE, else the file
    help="the relay it is for (its aud)",
    default_text="the relay's --audience, read like serve: env, then --config",
)
RELAY_TTL = option_named("ticket-ttl")  # the relay's limit: env, else the file, else 60 s

OPTIONS: tuple[Option, ...] = (
    Option(
        "config",
        f"the relay's TOML config file (or env {CONFIG_ENV}), read for its "
        "secret-file, audience and ticket-ttl",
        None,
        "FILE",
        convert.text,
        layered=False,
    ),
    SECRET_FILE,
    Option(
        "ttl",
        "seconds the ticket stays valid; the relay refuses a ticket older than its "
        "own --ticket-ttl whatever this says (a warning says so)",
        None,
        "SECONDS",
        convert.positive_seconds,
        default_text="the relay's --ticket-ttl",
        layered=False,
    ),
    Option(
        "subject",
        "who the ticket is for, shown in logs",
        None,
        "SUBJECT",
        convert.text,
        default_text="$USER",
        layered=False,
    ),
    AUDIENCE,
    Option(
        "url", "print the full ws:// URL with ?ticket=", None, "URL", convert.text, layered=False
    ),
    Option(
        "watch",
        "a watcher's ticket instead, for the connection of this id (the 101's "
        "Acp-Connection-Id): it opens no connection of its own, and is taken only with the "
        "acp-relay.watch.v1 subprotocol; the whole id, as connection_id in the relay's log",
        None,
        "CONNECTION_ID",
        convert.connection_id,
        layered=False,
    ),
    Option(
        "may-answer",
        "with --watch: the watcher may answer the agent's permission "
        "requests (the first answer, from anyone, is the one taken)",
        False,
        None,
        convert.boolean,
        is_flag=True,
        layered=False,
        default_text="off",
    ),
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``ticket`` subcommand."""
    parser = commands.add_parser(
        "ticket",
        help="mint a single-use ticket (for a control plane)",
        description="Print a single-use ticket signed with the first secret of "
        f"--secret-file or ${SECRET_ENV}. Reads the relay's settings as serve does (--config, "
        "ACP_RELAY_* variables): its secret, audience and ticket lifetime.",
    )
    add_options(parser, OPTIONS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print a ticket, or a URL carrying one."""
    flags = vars(args)
    path = config_file_path(flags, os.environ)
    text = read_named(path, config_file_source(flags)) if path else None
    relay = resolve_some(
        (SECRET_FILE, AUDIENCE, RELAY_TTL),
        flags,
        os.environ,
        text,
        cwd=os.getcwd(),
        file_name=path,
    )
    signing = load_secrets(relay["secret_file"], os.environ.get(SECRET_ENV))[0]
    subject = args.subject or os.environ.get("USER") or "acp-relay-ticket"
    limit: float = relay["ticket_ttl"]
    ttl: float = limit if args.ttl is None else args.ttl
    if ttl > limit:
        print(f"acp-relay: warning: {ttl_beyond_the_relays(ttl, limit)}", file=sys.stderr)
    if args.may_answer and args.watch is None:
        raise UsageError("--may-answer goes with --watch CONNECTION_ID")
    ticket = fresh_ticket(
        signing,
        subject=subject,
        audience=relay["audience"],
        ttl=ttl,
        watch=args.watch,
        may_answer=args.may_answer,
    )
    print(with_ticket(args.url, ticket) if args.url else ticket)
    return 0


def fresh_ticket(
    secret: str,
    *,
    now: float | None = None,
    subject: str,
    audience: str | None = None,
    ttl: float | None = None,
    watch: str | None = None,
    may_answer: bool = False,
) -> str:
    """A new single-use ticket: the system's randomness, and its clock unless ``now``."""
    return issue(
        secret,
        clock=time.time if now is None else lambda: now,
        randomness=os.urandom,
        subject=subject,
        audience=audience,
        ttl=ttl,
        watch=watch,
        may_answer=may_answer,
    )


def ttl_beyond_the_relays(ttl: float, limit: float) -> str:
    """Why a ``--ttl`` over the relay's ``--ticket-ttl`` does not buy a longer life."""
    return (
        f"--ttl {ttl:g} is longer than the relay's --ticket-ttl of {limit:g} s (read from "
        f"--config, ACP_RELAY_TICKET_TTL or its default): the relay refuses this ticket "
        f"{limit:g} s after it is minted; raise the relay's --ticket-ttl, or give this "
        "command the relay's settings"
    )
