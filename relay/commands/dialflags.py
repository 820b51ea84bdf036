"""The flags of the commands that dial a relay, ``connect``, ``watch`` and ``chat``, made
into the :class:`relay.client.link.dialing.DialConfig` every client dials with.

The options and the checks of their values are :mod:`relay.config.dialoptions`'s; this
reads what they name: a ``--ticket-file`` that is there now must be a regular text file,
``--cacert`` a PEM bundle. A mistake (no ticket, a URL that is not ``ws://`` or ``wss://``,
an unreadable ``--cacert``) is a :class:`relay.config.errors.UsageError`: one line and
exit status 2. Header values and tickets are never echoed.
"""

from __future__ import annotations

import argparse
import os
import ssl
from collections.abc import Mapping

from relay.client.link.dialing import DialConfig
from relay.client.link.ticketsource import TicketSource
from relay.config.dialoptions import (
    TICKET_ENV,
    WATCHERS_TICKET,
    command_words,
    headers,
    relay_url,
)
from relay.config.errors import UsageError
from relay.config.textfiles import MAX_CACERT_BYTES
from relay.core.ticketurls import ticket_in
from relay.streams.filereader import read_named


def dial_config(
    args: argparse.Namespace, env: Mapping[str, str], *, watching: bool = False
) -> DialConfig:
    """The socket's configuration from the flags and $ACP_RELAY_TICKET (a watcher's when
    ``watching``); UsageError if wrong."""
    url = relay_url(args.url)
    source = ticket_source(args, env, ticket_in(args.url), watching=watching)
    return DialConfig(
        url=url,
        ticket=source,
        ticket_in=args.ticket_in,
        headers=headers(args.header, args.ticket_in),
        tls=_tls_context(url, args.cacert),
        max_message_bytes=args.max_message_bytes,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        open_timeout=args.open_timeout,
    )


def ticket_source(
    args: argparse.Namespace,
    env: Mapping[str, str],
    url_ticket: str | None,
    *,
    watching: bool = False,
) -> TicketSource:
    """Flags first, then a ``?ticket=`` in the URL, then $ACP_RELAY_TICKET (``watching``: a
    watcher's ticket, which the error for none says how to mint)."""
    flagged = args.ticket_command is not None or args.ticket_file or args.ticket is not None
    if url_ticket and flagged:
        raise UsageError("the URL already carries ?ticket=; give the ticket one way only")
    if args.ticket_command is not None:
        return TicketSource(command=command_words(args.ticket_command))
    if args.ticket_file:
        if os.path.exists(args.ticket_file):  # one missing now is looked for at each connect
            read_named(args.ticket_file, "--ticket-file")
        return TicketSource(file=args.ticket_file)
    if args.ticket is not None:
        if not args.ticket.strip():
            raise UsageError("--ticket is empty")
        return TicketSource(value=args.ticket.strip())
    if url_ticket:
        return TicketSource(value=url_ticket)
    if env.get(TICKET_ENV, "").strip():
        return TicketSource(value=env[TICKET_ENV].strip())
    raise UsageError(
        f"no ticket: set {TICKET_ENV}, or give --ticket-command 'CMD' (a fresh ticket at each "
        "connect), --ticket-file FILE or --ticket TICKET (shows in process listings)"
        + (f"; {WATCHERS_TICKET}" if watching else "")
    )


def _tls_context(url: str, cacert: str | None) -> ssl.SSLContext | None:
    """The trust for wss://: the system store, or only ``cacert`` when given."""
    if cacert is None:
        return None
    if not url.startswith("wss:"):
        raise UsageError("--cacert is for wss:// URLs")
    pem = read_named(cacert, "--cacert", MAX_CACERT_BYTES)
    if not pem.strip():  # an empty cadata would mean the system's store, silently
        raise UsageError(f"cannot load --cacert {cacert}: it is empty; give a PEM CA bundle")
    try:
        return ssl.create_default_context(cadata=pem)
    except (ValueError, ssl.SSLError) as exc:
        raise UsageError(f"cannot load --cacert {cacert}: {exc}") from None
