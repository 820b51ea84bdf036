"""The dialing options of the commands that dial a relay (``connect``, ``watch``, ``chat``):
their tables, and the checks of their values that need nothing but the values.

Pure. Where the ticket comes from (:data:`TICKET_SOURCES`, at most one of them) and how
the socket is opened (:data:`DIALING`); the relay's URL, the extra headers and a ticket
command's words are checked here, a mistake being a :class:`relay.config.errors.UsageError`
that says the fix and never echoes a header's value or a ticket. What needs the files
(``--ticket-file``, ``--cacert``) is :mod:`relay.commands.dialflags`'s.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from urllib.parse import urlsplit

from relay.config import convert, defaults
from relay.config.errors import UsageError
from relay.config.options import Option
from relay.core.ticketurls import without_ticket

TICKET_ENV = defaults.TICKET_ENV
_HEADER_NAME_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")

# At most one of these; with none, a ?ticket= in the URL, else $ACP_RELAY_TICKET.
TICKET_SOURCES: tuple[Option, ...] = (
    Option(
        "ticket-command",
        "command that prints a fresh ticket, split like a shell but "
        "never run by one; run at each connect",
        None,
        "COMMAND",
        convert.text,
        layered=False,
    ),
    Option("ticket-file", "file holding the ticket", None, "FILE", convert.text, layered=False),
    Option(
        "ticket",
        f"the ticket itself; shows in process listings, prefer ${TICKET_ENV}",
        None,
        "TICKET",
        convert.text,
        layered=False,
    ),
)

DIALING: tuple[Option, ...] = (
    Option(
        "ticket-in",
        "send the ticket as Authorization: Bearer (header) or ?ticket= (query)",
        "header",
        "WHERE",
        convert.one_of("header", "query"),
        layered=False,
    ),
    Option(
        "header",
        "extra header on the upgrade request, e.g. for a proxy",
        (),
        "'NAME: VALUE'",
        convert.text,
        repeatable=True,
        layered=False,
    ),
    Option(
        "cacert",
        "PEM CA bundle trusted for wss:// instead of the system's",
        None,
        "FILE",
        convert.text,
        layered=False,
    ),
    Option(
        "max-message-bytes",
        "largest message either way, in bytes or with KiB/MiB/GiB",
        defaults.MAX_MESSAGE_BYTES,
        "SIZE",
        convert.size,
        default_text="64MiB",
        layered=False,
    ),
    Option(
        "ping-interval",
        "seconds between heartbeat pings",
        defaults.PING_INTERVAL,
        "SECONDS",
        convert.positive_seconds,
        layered=False,
    ),
    Option(
        "ping-timeout",
        "seconds without a pong before the relay counts as gone",
        defaults.PING_TIMEOUT,
        "SECONDS",
        convert.positive_seconds,
        layered=False,
    ),
    Option(
        "open-timeout",
        "seconds to reach the relay and finish the handshake",
        defaults.OPEN_TIMEOUT,
        "SECONDS",
        convert.positive_seconds,
        layered=False,
    ),
)


# Where a watcher's ticket comes from, for `watch` to say when it has none.
WATCHERS_TICKET = (
    "a watcher's ticket is minted where the relay's secret is, with `acp-relay ticket "
    "--watch CONNECTION_ID` (e.g. --ticket-command 'acp-relay ticket --watch "
    "CONNECTION_ID'; the id is the relay log's connection_id)"
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


def headers(texts: Iterable[str], ticket_in: str) -> tuple[tuple[str, str], ...]:
    """The ``--header`` values as pairs; one that would replace a ticket sent as a header
    (Authorization, with ``--ticket-in header``) is refused."""
    pairs = tuple(header(text) for text in texts)
    if ticket_in == "header" and any(name.lower() == "authorization" for name, _ in pairs):
        raise UsageError(
            "--header Authorization would replace the ticket; use --ticket-in query with it"
        )
    return pairs


def header(text: str) -> tuple[str, str]:
    """``Name: value`` as a pair; the value (maybe a credential) is never echoed."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not name or not set(name.lower()) <= _HEADER_NAME_CHARS:
        # Nothing of it is shown: with no colon, the whole text may be a pasted credential.
        raise UsageError(
            "--header expects 'Name: value' (a header name, a colon, the value); the one "
            "given has no colon, no name or characters a header name cannot have (not shown: "
            "it may hold a credential)"
        )
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"--header {name}: the value has a line break or NUL")
    return name, value.strip()


def command_words(text: str) -> tuple[str, ...]:
    """``--ticket-command`` split like a shell (it is never run by one)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"cannot split --ticket-command like a shell: {exc}") from None
    if not words:
        raise UsageError("--ticket-command is empty")
    return tuple(words)
