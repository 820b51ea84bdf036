"""``acp-relay watch``: attach to a connection as a watcher and print its conversation.

Opens the relay's endpoint offering ``acp-relay.watch.v1`` with a watcher's ticket, got
where ``connect`` gets its own and dialed the same way (:mod:`relay.client.link.dialing`:
TLS, ``--cacert``, ``--header``, the same words for a failed handshake). Each frame is
then written to stdout as it comes: readable (:class:`relay.acp.transcript.Transcript`)
or, raw, as one NDJSON object (:func:`relay.core.watchprofile.raw_record`). Read-only:
nothing is ever sent to the relay but the close.

Stdout is written with backpressure: a reader that does not keep up stops the reading of
the socket, and the relay closes a watcher that falls that far behind (4429). How it
ended is the exit status (:data:`EXIT_STATUSES`, documented in ``--help`` and
docs/sharing.md).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from contextlib import suppress
from dataclasses import dataclass, replace

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay.acp.transcript import Transcript
from relay.client.link.dialing import WATCHING, DialConfig, close_failure, dial, ticket_for
from relay.client.link.editorerrors import Failure
from relay.core.redaction import REDACTED
from relay.core.subprotocols import SocketKind
from relay.core.watchprofile import (
    HEADER_ROOM,
    WATCH_PROFILE,
    closed_record,
    raw_record,
    read_frame,
)
from relay.streams.stdio import stdout_stream
from relay.streams.wsadapter import peer_closed_first

ENDED = 0  # the connection ended (1000), or the watch was stopped here
FAILED = 1  # could not attach, or the socket was lost
FELL_BEHIND = 3  # the relay dropped this watcher for reading too slowly (4429)
RELAY_STOPPED = 4  # the relay shut down (1001)
EXIT_STATUSES = {1000: ENDED, 4429: FELL_BEHIND, 1001: RELAY_STOPPED}  # by the relay's close


@dataclass(frozen=True)
class WatchConfig:
    """What ``watch`` needs: the socket's configuration, and how to print."""

    dial: DialConfig
    raw: bool = False


class Watch:
    """One watcher's socket and its stdout, from the ticket to the close."""

    def __init__(self, config: WatchConfig, out: asyncio.StreamWriter) -> None:
        self.config = config
        self.dial = replace(
            config.dial, max_message_bytes=config.dial.max_message_bytes + HEADER_ROOM
        )
        self.out = out
        self.transcript = Transcript()
        self.ws: ClientConnection | None = None
        self.ticket: str | None = None

    async def run(self) -> int:
        """Attach, then print each frame until the socket closes; the exit status."""
        refused = await self._attach()
        if refused is not None:
            return self._failed(refused)
        assert self.ws is not None
        with suppress(ConnectionClosed):
            while True:
                frame = await self.ws.recv(decode=False)
                if not await self._print(self._shown(frame)):
                    await self.ws.close(CloseCode.NORMAL_CLOSURE)
                    return ENDED  # stdout is gone: nobody is watching
        return await self._ended(self.ws)

    async def stopped(self) -> int:
        """Ctrl-C or SIGTERM: close the socket with 1000, end the text, exit 0."""
        if self.ws is not None:
            await self.ws.close(CloseCode.NORMAL_CLOSURE)
        if not self.config.raw:
            await self._print(self.transcript.stopped().encode())
        return ENDED

    async def _attach(self) -> str | None:
        """Get the ticket and open the socket; None when attached, else why not."""
        ticket = await ticket_for(self.dial)
        if isinstance(ticket, Failure):
            return ticket.message
        self.ticket = ticket
        dialed = await dial(self.dial, ticket, WATCHING)
        if isinstance(dialed, Failure):
            return dialed.message
        self.ws = ws = dialed.ws
        if dialed.kind is not SocketKind.WATCHER:
            await ws.close(CloseCode.NORMAL_CLOSURE)
            return (
                f"relay at {self.dial.url} does not offer watching: it chose "
                f"{ws.subprotocol or 'no subprotocol'}, not {WATCH_PROFILE} (a relay "
                "older than watchers, or a proxy that drops Sec-WebSocket-Protocol)"
            )
        return None

    def _shown(self, frame: bytes) -> bytes:
        read = read_frame(frame)
        if self.config.raw:
            return raw_record(read) + b"\n"
        return self.transcript.show(read).encode()

    async def _ended(self, ws: ClientConnection) -> int:
        """The socket closed: the relay's close ends the text; a lost socket is an error."""
        received = ws.protocol.close_rcvd
        if received is not None and peer_closed_first(ws):
            code, reason = int(received.code), received.reason
            if self.config.raw:
                await self._print(closed_record(code, reason) + b"\n")
            else:
                await self._print(self.transcript.closed(code, reason).encode())
            return EXIT_STATUSES.get(code, FAILED)
        why = close_failure(ws, self.dial).message
        if not self.config.raw:
            await self._print(self.transcript.lost(why).encode())
        return self._failed(why)

    def _failed(self, message: str) -> int:
        """Say why on stderr, in one line, never with the ticket; the exit status."""
        if self.ticket:
            message = message.replace(self.ticket, REDACTED)
        print(f"acp-relay watch: {message}", file=sys.stderr, flush=True)
        return FAILED

    async def _print(self, data: bytes) -> bool:
        """Write to stdout and wait while it is full; False once it is gone."""
        if self.out.is_closing():
            return False
        self.out.write(data)
        try:
            await self.out.drain()
        except ConnectionError:
            return False
        return True


async def run_watch(config: WatchConfig) -> int:
    """Watch until the socket closes, stdout goes, or SIGINT or SIGTERM; the exit status."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with stdout_stream() as out:
        watch = Watch(config, out)
        watching = asyncio.create_task(watch.run())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({watching, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if watching.done():
            return watching.result()
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        return await watch.stopped()
