"""The relay's listening socket, bound before the rest of the server is loaded.

A supervisor that boots or thaws a box for a waiting user polls the relay's port; the
relay's own modules (websockets, structlog, the connection code) take most of its
start-up to import. ``serve`` therefore binds its address as soon as the settings are
checked, with only the standard library, and hands the socket to the server once that
is loaded: a client that connects in between waits in the backlog and gets its answer
when the server runs, never a refusal. The socket is set up as asyncio's
``create_server`` would set it up.
"""

from __future__ import annotations

import errno
import os
import socket

from relay.config.errors import UsageError
from relay.core.origins import bracketed

BACKLOG = 100  # asyncio's create_server default, which the server used before


def bind_early(host: str, port: int) -> socket.socket | None:
    """A listening socket on ``host:port``; None when the host names several addresses
    (``localhost`` as 127.0.0.1 and ::1: the server binds each itself, later)."""
    try:
        found = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
        )
    except OSError as exc:
        raise cannot_listen(host, port, exc) from exc
    addresses = {(family, address) for family, _, _, _, address in found}
    if len(addresses) != 1:
        return None
    ((family, address),) = addresses
    # IPPROTO_TCP spelled out: asyncio turns Nagle off (TCP_NODELAY) only on sockets that
    # say so, and the accepted ones copy it; a welcome and its records, written apart,
    # would otherwise wait for the peer's delayed acknowledgement (40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise cannot_listen(host, port, exc) from exc
    return sock


def cannot_listen(host: str, port: int, exc: OSError, flag: str = "--listen") -> UsageError:
    """The start-up error for an address the relay cannot listen on (given by ``flag``)."""
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.EADDRINUSE:
        why += (
            ": another relay or program holds it (stop it, or take any free port with "
            f"{flag} {bracketed(host)}:0)"
        )
    return UsageError(f"cannot listen on {bracketed(host)}:{port} ({flag}): {why}")
