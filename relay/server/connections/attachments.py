"""The sockets attached to a connection: who is on one, and how to close it.

A connection (:mod:`relay.server.connections.connection`) outlives its sockets: the controlling
socket may be lost and another resume it. Each is an :class:`Attachment`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from websockets.asyncio.server import ServerConnection

from relay.core.framing import close_reason

_numbers = itertools.count(1)  # how the lifecycle names a socket (relay.core.lifecycle)


class Attachment:
    """One WebSocket attached to a connection: who is on it and how to close it."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.number = next(_numbers)

    @property
    def remote(self) -> str:
        """The client's address as ``host:port``."""
        address = self.ws.remote_address
        if isinstance(address, Sequence) and len(address) >= 2:
            return f"{address[0]}:{address[1]}"
        return str(address)

    @property
    def path(self) -> str:
        """The request target of the upgrade (query string included: redact before logging)."""
        request = self.ws.request
        return request.path if request is not None else ""

    @property
    def close_code(self) -> int | None:
        code = self.ws.close_code
        return None if code is None else int(code)

    @property
    def close_reason(self) -> str | None:
        return self.ws.close_reason

    async def close(self, code: int, reason: str) -> None:
        """Close the socket, the reason cut to what RFC 6455 allows."""
        await self.ws.close(code, close_reason(reason))
