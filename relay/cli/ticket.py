"""``acp-relay ticket``: print a single-use ticket (or a URL carrying one) for a control plane.

Signs with the first secret of ``--secret-file`` (or ``ACP_RELAY_SECRET_FILE``), else of
``ACP_RELAY_SECRET``, the way ``serve`` finds its secrets.
"""

from __future__ import annotations

import argparse
import os

from relay import convert, defaults
from relay.cli.files import load_secrets
from relay.config import SECRET_ENV, Option, add_options, option_named, resolve_option
from relay.server import fresh_ticket
from relay.urls import with_ticket

SECRET_FILE = option_named("secret-file")  # serve's: the flag, else ACP_RELAY_SECRET_FILE

OPTIONS: tuple[Option, ...] = (
    SECRET_FILE,
    Option("ttl", "seconds the ticket stays valid", defaults.TICKET_TTL, "SECONDS",
           convert.positive_seconds, layered=False),
    Option("subject", "who the ticket is for, shown in logs", None, "SUBJECT", convert.text,
           default_text="$USER", layered=False),
    Option("audience", "the relay it is for (--audience there)", None, "AUD", convert.text,
           layered=False),
    Option("url", "print the full ws:// URL with ?ticket=", None, "URL", convert.text,
           layered=False),
)  # fmt: skip


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``ticket`` subcommand."""
    parser = commands.add_parser(
        "ticket",
        help="mint a single-use ticket (for a control plane)",
        description="Print a single-use ticket signed with the first secret of "
        f"--secret-file or ${SECRET_ENV}.",
    )
    add_options(parser, OPTIONS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print a ticket, or a URL carrying one."""
    secret_file = resolve_option(SECRET_FILE, vars(args), os.environ)
    signing = load_secrets(secret_file, os.environ.get(SECRET_ENV))[0]
    subject = args.subject or os.environ.get("USER") or "acp-relay-ticket"
    ticket = fresh_ticket(signing, subject=subject, audience=args.audience, ttl=args.ttl)
    print(with_ticket(args.url, ticket) if args.url else ticket)
    return 0
