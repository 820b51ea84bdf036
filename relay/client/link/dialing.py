"""A client's socket to the relay: its configuration, the handshake, and why it failed.

Every client dials here (``connect``, ``watch``, each thread of ``chat``): :func:`ticket_for`
gets the ticket for the next socket, :func:`dial` opens the WebSocket (the ticket in the
header or the query string, the kinds of socket offered) and says what kind the relay's
choice made it (:func:`relay.core.subprotocols.selected_kind`). The I/O edge of
:mod:`relay.client.link.editorerrors`: a failed handshake or an ended socket becomes the
:class:`relay.client.link.editorerrors.Failure` the client will be shown.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidMessage, InvalidStatus
from websockets.typing import Subprotocol

from relay import __version__
from relay.client.link.editorerrors import (
    PLAIN_TO_A_TLS_PORT,
    TLS_TO_A_PLAIN_PORT,
    Cause,
    Close,
    Failure,
    cannot_connect,
    certificate_unverified,
    connection_closed,
    http_refusal,
)
from relay.client.link.ticketsource import TicketSource, TicketUnavailable, fetch_ticket
from relay.config import defaults
from relay.core.subprotocols import SocketKind, selected_kind
from relay.core.ticketurls import with_ticket
from relay.streams.wsadapter import peer_closed_first

CLOSE_TIMEOUT = 2.0  # seconds to wait for the relay's close frame
USER_AGENT = f"acp-relay-connect/{__version__}"

TicketIn = Literal["header", "query"]
Offer = tuple[SocketKind, ...]
"""The kinds of socket a client offers, in its order of preference; none: no subprotocol
at all, plain ACP, which every relay speaks."""
PLAIN_ONLY: Offer = ()
RESUMABLE_OR_PLAIN: Offer = (SocketKind.RESUMABLE, SocketKind.PLAIN)
WATCHING: Offer = (SocketKind.WATCHER,)


@dataclass(frozen=True)
class DialConfig:
    """How a client dials the relay (``connect``, ``watch``, each thread of ``chat``), from
    the dialing flags (:mod:`relay.commands.dialflags`); ``url`` never carries the ticket."""

    url: str
    ticket: TicketSource
    ticket_in: TicketIn = "header"
    headers: tuple[tuple[str, str], ...] = ()
    tls: ssl.SSLContext | None = None
    max_message_bytes: int = defaults.MAX_MESSAGE_BYTES
    ping_interval: float = defaults.PING_INTERVAL
    ping_timeout: float = defaults.PING_TIMEOUT
    open_timeout: float = defaults.OPEN_TIMEOUT
    resume: bool = True  # offer the resume profile (when the ticket can be fetched again)


@dataclass(frozen=True)
class Dialed:
    """A socket the relay accepted, and the kind its choice of subprotocol made it."""

    ws: ClientConnection
    kind: SocketKind


async def ticket_for(config: DialConfig) -> str | Failure:
    """The ticket for the next socket (fetched anew from a command or a file), or why
    there is none."""
    try:
        return await fetch_ticket(config.ticket)
    except TicketUnavailable as exc:
        return cannot_connect(config.url, "ticket", str(exc))


async def dial(config: DialConfig, ticket: str, offer: Offer) -> Dialed | Failure:
    """Open a socket offering ``offer``: the kind the relay made it, or why it could not."""
    try:
        ws = await _open_socket(config, ticket, [kind.value for kind in offer] or None)
    except (InvalidHandshake, OSError) as exc:
        return connect_failure(exc, config, watching=SocketKind.WATCHER in offer)
    except ConnectionClosed:  # closed before the request went out: the next try may do
        return cannot_connect(config.url, "handshake", "the connection closed at once")
    kind = selected_kind(ws.subprotocol)
    assert kind is not None, "websockets refuses a subprotocol that was not offered"
    return Dialed(ws, kind)


async def _open_socket(
    config: DialConfig, ticket: str, subprotocols: Sequence[str] | None = None
) -> ClientConnection:
    """Open the WebSocket to the relay, the ticket in the header or the query string."""
    url, headers = config.url, list(config.headers)
    if config.ticket_in == "query":
        url = with_ticket(url, ticket)
    else:
        headers.append(("Authorization", f"Bearer {ticket}"))
    tls: dict[str, Any] = {} if config.tls is None else {"ssl": config.tls}
    return await connect(
        url,
        additional_headers=headers,
        user_agent_header=USER_AGENT,
        compression=None,
        open_timeout=config.open_timeout,
        ping_interval=config.ping_interval,
        ping_timeout=config.ping_timeout,
        close_timeout=CLOSE_TIMEOUT,
        max_size=config.max_message_bytes,
        subprotocols=None if subprotocols is None else [Subprotocol(p) for p in subprotocols],
        **tls,
    )


def connect_failure(
    exc: InvalidHandshake | OSError, config: DialConfig, *, watching: bool = False
) -> Failure:
    """Why the socket could not be opened, in the words the editor will show (``watching``:
    a watcher's socket, :mod:`relay.client.watch`)."""
    url = config.url
    if isinstance(exc, InvalidStatus):
        response = exc.response
        return http_refusal(
            url,
            response.status_code,
            bytes(response.body or b""),
            response.headers.get("Retry-After"),
            watching=watching,
        )
    if isinstance(exc, InvalidHandshake):
        return cannot_connect(url, "handshake", _handshake_detail(exc, url))
    cause, detail = _os_error_cause(exc, config)
    return cannot_connect(url, cause, detail)


def _os_error_cause(exc: OSError, config: DialConfig) -> tuple[Cause, str]:
    if isinstance(exc, socket.gaierror):
        return "dns", exc.strerror or str(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "tls", certificate_unverified(
            exc.verify_code, exc.verify_message, cacert_given=config.tls is not None
        )
    if isinstance(exc, ssl.SSLError):
        return "tls", _tls_detail(exc)
    if isinstance(exc, TimeoutError):
        return "timeout", f"no answer within {config.open_timeout:g} s (--open-timeout)"
    code = _errno(exc)
    if code == errno.ECONNREFUSED:
        return "refused", os.strerror(code)
    if isinstance(exc, ConnectionResetError | ConnectionAbortedError):
        hint = " (for a relay without TLS use ws://)" if config.url.startswith("wss:") else ""
        return "reset", f"the connection was reset during the handshake{hint}"
    return "network", os.strerror(code) if code else str(exc)


def _tls_detail(exc: ssl.SSLError) -> str:
    reason = (exc.reason or str(exc)).replace("_", " ").lower()
    if exc.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "HTTP_REQUEST"):
        return f"{reason}: {TLS_TO_A_PLAIN_PORT}"
    return reason


def _handshake_detail(exc: InvalidHandshake, url: str) -> str:
    """websockets' words, or what a ws:// URL's first answer says of a TLS port: a hang-up
    before any HTTP (a TLS server refusing plain text), or Go's plain-text answer to it."""
    if not (url.startswith("ws:") and isinstance(exc, InvalidMessage)):
        return str(exc)
    if isinstance(exc.__cause__, EOFError):
        return f"the server hung up without an HTTP answer: {PLAIN_TO_A_TLS_PORT}"
    answered = re.search(r"HTTP/1\.0 400\b.*", str(exc.__cause__))
    if answered:
        return f"the server answered {answered[0]}: {PLAIN_TO_A_TLS_PORT}"
    return str(exc)


def _errno(exc: OSError) -> int | None:
    """The errno, also for asyncio's "Multiple exceptions" error when all agree."""
    if exc.errno:
        return exc.errno
    found = {int(n) for n in re.findall(r"\[Errno (\d+)\]", str(exc))}
    return found.pop() if len(found) == 1 else None


def close_failure(ws: ClientConnection, config: DialConfig) -> Failure:
    """Why the open socket ended, from the close frames received and sent."""
    protocol = ws.protocol
    received, sent = protocol.close_rcvd, protocol.close_sent
    return connection_closed(
        config.url,
        received=None if received is None else Close(int(received.code), received.reason),
        sent=None if sent is None else Close(int(sent.code), sent.reason),
        relay_first=peer_closed_first(ws),
        ping_timeout=config.ping_timeout,
    )
