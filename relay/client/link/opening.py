"""A link opened: the relay's choice of subprotocol decides its kind, here and only here.

``connect`` offers the resume profile when it can fetch a ticket again for each socket
(``--ticket-command``, ``--ticket-file``), else plain ACP only; the relay's choice
(:func:`relay.client.link.dialing.dial`) makes the link a
:class:`relay.client.link.resuming.ResumingLink`, once the relay has welcomed it, or a
:class:`relay.client.link.plain.PlainLink`. ``acp-relay chat`` needs the profile: a relay
that does not select it is refused (:func:`resumable_socket`). Either way the client is
given a :class:`relay.client.link.ends.Link`, or the failure to show.
"""

from __future__ import annotations

import asyncio
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay.client.link.dialing import (
    PLAIN_ONLY,
    RESUMABLE_OR_PLAIN,
    DialConfig,
    dial,
)
from relay.client.link.editorerrors import Failure, cannot_connect
from relay.client.link.ends import ClientSide, Link
from relay.client.link.plain import PlainLink
from relay.client.link.resuming import ResumingLink, start_profile
from relay.core.resumeprofile import ProfileError, Welcome
from relay.core.subprotocols import SocketKind

OPEN: dict[str, Any] = {"type": "open"}  # the profile's first frame for a new connection
ONE_OFF_TICKET = (
    "the connection was lost and cannot be resumed: the ticket is a one-off value "
    "(--ticket, ACP_RELAY_TICKET or a ticket in the URL), and each socket needs a fresh "
    "one; give --ticket-command or --ticket-file to resume"
)


async def open_link(client: ClientSide, ticket: str, pipe: asyncio.StreamWriter) -> Link | Failure:
    """``connect``'s link with ``ticket``: resumable if the relay selects the profile (offered
    when the ticket can be had again), else plain, the relay's frames as lines into ``pipe``."""
    config, log = client.config, client.log
    may_resume = config.resume and config.ticket.value is None
    dialed = await dial(config, ticket, RESUMABLE_OR_PLAIN if may_resume else PLAIN_ONLY)
    if isinstance(dialed, Failure):
        return dialed
    ws = dialed.ws
    link: Link
    if dialed.kind is SocketKind.RESUMABLE:
        welcome = await welcomed(ws, OPEN, config)
        if isinstance(welcome, Failure):
            return welcome
        link = ResumingLink(client, ws, welcome)
        log.info("resumable", grace=welcome.grace, window=welcome.window)
    else:  # plain: a watcher's socket is not offered
        if may_resume:
            log.info("the relay does not offer resuming", subprotocol=ws.subprotocol)
        one_off = config.resume and not may_resume
        link = PlainLink(client, ws, pipe, unresumable=ONE_OFF_TICKET if one_off else None)
    connection_id = ws.response.headers.get("Acp-Connection-Id") if ws.response else None
    log.info("connected", connection_id=connection_id)
    return link


async def resumable_socket(
    config: DialConfig, ticket: str, needed_by: str
) -> ClientConnection | Failure:
    """A socket the relay made resumable, for a client that cannot do without
    (``needed_by`` says which); a plain one is closed, and the failure says why."""
    dialed = await dial(config, ticket, RESUMABLE_OR_PLAIN)
    if isinstance(dialed, Failure):
        return dialed
    if dialed.kind is not SocketKind.RESUMABLE:
        await dialed.ws.close(CloseCode.NORMAL_CLOSURE)
        why = f"the relay does not offer resuming, which {needed_by} needs"
        return cannot_connect(config.url, "handshake", why)
    return dialed.ws


async def welcomed(
    ws: ClientConnection, first: dict[str, Any], config: DialConfig
) -> Welcome | Failure:
    """The relay's welcome to ``first`` on a resumable ``ws``, within ``--open-timeout``; or
    why there is none (a socket that broke the profile is closed with 1002, one that said
    nothing in time is aborted)."""
    try:
        async with asyncio.timeout(config.open_timeout):
            return await start_profile(ws, first)
    except (ConnectionClosed, ProfileError, TimeoutError) as exc:
        if isinstance(exc, TimeoutError):
            ws.transport.abort()
        return cannot_connect(config.url, "handshake", _why(exc))


def _why(exc: BaseException) -> str:
    """The words for a failed opening of the resume profile."""
    if isinstance(exc, ConnectionClosed) and exc.rcvd is not None:
        return f"the relay closed the socket: {exc.rcvd.reason or exc.rcvd.code}"
    if isinstance(exc, TimeoutError):
        return "no welcome from the relay within --open-timeout"
    return str(exc)
