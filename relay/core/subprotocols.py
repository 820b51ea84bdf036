"""The subprotocols the relay speaks, and what each makes of a socket: decided here, once.

Pure. A socket is plain ACP (``acp.v1``, or no subprotocol at all), resumable (the resume
profile, :mod:`relay.core.resumeprofile`) or a watcher's (the watch profile,
:mod:`relay.core.watchprofile`). The server selects one at the upgrade
(:func:`relay.core.handshake.check_upgrade`), a client reads the relay's choice
(:func:`selected_kind`); both carry a :class:`SocketKind` from there, and no other module
compares subprotocol names. Apart from the upgrade's checks, so that the client side
loads none of admission's.
"""

from __future__ import annotations

import enum

from relay.core.resumeprofile import PROFILE
from relay.core.watchprofile import WATCH_PROFILE

ACP_V1 = "acp.v1"


class SocketKind(enum.Enum):
    """What a socket is, by the subprotocol selected (its value)."""

    PLAIN = ACP_V1  # plain ACP: acp.v1, or no subprotocol at all
    RESUMABLE = PROFILE  # the resume profile: the connection outlives the socket
    WATCHER = WATCH_PROFILE  # a watcher of another socket's connection


def selected_kind(subprotocol: str | None) -> SocketKind | None:
    """The kind of socket a relay's choice of ``subprotocol`` makes (None selected: plain);
    None for a subprotocol the relay does not speak."""
    if subprotocol is None:
        return SocketKind.PLAIN
    try:
        return SocketKind(subprotocol)
    except ValueError:
        return None
