"""The flags of the commands that dial a relay, ``connect``, ``watch`` and ``chat``: where
the ticket comes from and how the socket is opened, checked into the
:class:`relay.client.link.dialing.DialConfig` every client dials with.

A mistake (no ticket, a URL that is not ``ws://`` or ``wss://``, an unreadable
``--cacert``, a ``--ticket-file`` that is no regular text file) is a
:class:`relay.config.errors.UsageError`: one line and exit status 2.
Header values and tickets are never echoed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

from relay.client.link.dialing import DialConfig
from relay.client.link.ticketsource import TicketSource
from relay.config import convert, defaults
from relay.config.errors import UsageError
from relay.config.options import Option
from relay.config.textfiles import MAX_CACERT_BYTES
from relay.core.ticketurls import ticket_in, without_ticket
from relay.streams.filereader import read_named

TICKET_ENV = defaults.TICKET_ENV
_HEADER_NAME_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")

# At most one of these; with none, a ?ticket= in the URL, else $ACP_RELAY_TICKET.
TICKET_SOURCES: tuple[Option, ...] = (
    Option("ticket-command", "command that prints a fresh ticket, split like a shell but "
           "never run by one; run at each connect", None, "COMMAND", convert.text,
           layered=False),
    Option("ticket-file", "file holding the ticket", None, "FILE", convert.text,
           layered=False),
    Option("ticket", f"the ticket itself; shows in process listings, prefer ${TICKET_ENV}",
           None, "TICKET", convert.text, layered=False),
)  # fmt: skip

DIALING: tuple[Option, ...] = (
    Option("ticket-in", "send the ticket as Authorization: Bearer (header) or ?ticket= "
           "(query)", "header", "WHERE", convert.one_of("header", "query"), layered=False),
    Option("header", "extra header on the upgrade request, e.g. for a proxy", (),
           "'NAME: VALUE'", convert.text, repeatable=True, layered=False),
    Option("cacert", "PEM CA bundle trusted for wss:// instead of the system's", None,
           "FILE", convert.text, layered=False),
    Option("max-message-bytes", "largest message either way, in bytes or with KiB/MiB/GiB",
           defaults.MAX_MESSAGE_BYTES, "SIZE", convert.size, default_text="64MiB",
           layered=False),
    Option("ping-interval", "seconds between heartbeat pings", defaults.PING_INTERVAL,
           "SECONDS", convert.positive_seconds, layered=False),
    Option("ping-timeout", "seconds without a pong before the relay counts as gone",
           defaults.PING_TIMEOUT, "SECONDS", convert.positive_seconds, layered=False),
    Option("open-timeout", "seconds to reach the relay and finish the handshake",
           defaults.OPEN_TIMEOUT, "SECONDS", convert.positive_seconds, layered=False),
)  # fmt: skip


# Where a watcher's ticket comes from, for `watch` to say when it has none.
WATCHERS_TICKET = (
    "a watcher's ticket is minted where the relay's secret is, with `acp-relay ticket "
    "--watch CONNECTION_ID` (e.g. --ticket-command 'acp-relay ticket --watch "
    "CONNECTION_ID'; the id is the relay log's connection_id)"
)


def dial_config(
    args: argparse.Namespace, env: Mapping[str, str], *, watching: bool = False
) -> DialConfig:
    """The socket's configuration from the flags and $ACP_RELAY_TICKET (a watcher's when
    ``watching``); UsageError if wrong."""
    url = relay_url(args.url)
    source = ticket_source(args, env, ticket_in(args.url), watching=watching)
    headers = tuple(_header(text) for text in args.header)
    if args.ticket_in == "header" and any(name.lower() == "authorization" for name, _ in headers):
        raise UsageError(
            "--header Authorization would replace the ticket; use --ticket-in query with it"
        )
    return DialConfig(
        url=url,
        ticket=source,
        ticket_in=args.ticket_in,
        headers=headers,
        tls=_tls_context(url, args.cacert),
        max_message_bytes=args.max_message_bytes,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        open_timeout=args.open_timeout,
    )


def relay_url(text: str) -> str:
    """``text`` without its ticket, checked to be a ws:// or wss:// URL with a host."""
    url = without_ticket(text)
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("ws", "wss") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number
        valid = False
    if not valid:
        raise UsageError(
            f"expected a ws:// or wss:// URL such as wss://relay.example.com/acp, got {url!r}"
        )
    return url


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
        return TicketSource(command=_command_words(args.ticket_command))
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


def _command_words(text: str) -> tuple[str, ...]:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"cannot split --ticket-command like a shell: {exc}") from None
    if not words:
        raise UsageError("--ticket-command is empty")
    return tuple(words)


def _header(text: str) -> tuple[str, str]:
    """``Name: value`` as a pair; the value (maybe a credential) is never echoed."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not name or not set(name.lower()) <= _HEADER_NAME_CHARS:
        raise UsageError(f"--header expects 'Name: value', got one starting {name[:40]!r}")
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"--header {name}: the value has a line break or NUL")
    return name, value.strip()


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
