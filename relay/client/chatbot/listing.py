"""``@bot sessions``: the agent's earlier sessions, asked on a connection of its own.

I/O for :class:`relay.chat.earlier.SessionLister`: a plain socket to the bot's relay (a
ticket from its source, as for a thread), ``initialize`` then ``session/list`` for the
bot's ``--cwd``, and the socket closed (its agent goes with it), all within
``--open-timeout`` twice over; what went wrong is said in words, never with the ticket.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress

from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay.chat.earlier import Listed, SessionLister
from relay.client.link.dialing import DialConfig, dial, ticket_for
from relay.client.link.editorerrors import Failure
from relay.observe import logs


async def list_sessions(dial_config: DialConfig, cwd: str, version: str) -> list[Listed] | str:
    """The agent's sessions in ``cwd``, or why they cannot be listed."""
    ticket = await ticket_for(dial_config)
    if isinstance(ticket, Failure):
        return ticket.message
    logs.redactor().add_ticket(ticket)
    dialed = await dial(dial_config, ticket, ())
    if isinstance(dialed, Failure):
        return dialed.message.replace(ticket, "[ticket]")
    ws, lister = dialed.ws, SessionLister(cwd, version)
    try:
        async with asyncio.timeout(2 * dial_config.open_timeout):
            await ws.send(lister.start().decode())
            async for frame in ws:
                got = lister.line(frame.encode() if isinstance(frame, str) else frame)
                if isinstance(got, bytes):
                    await ws.send(got.decode())
                elif got is not None:
                    return got
        return "the agent's connection closed before it listed its sessions"
    except TimeoutError:
        return f"the agent did not list its sessions within {2 * dial_config.open_timeout:g} s"
    except ConnectionClosed:
        return "the agent's connection closed before it listed its sessions"
    finally:
        with suppress(ConnectionClosed, TimeoutError):
            async with asyncio.timeout(dial_config.open_timeout):
                await ws.close(CloseCode.NORMAL_CLOSURE)
        ws.transport.abort()
