"""The plain link: ACP over one socket (``acp.v1``, or no subprotocol), ended with it.

Each of the client's lines goes as one text frame and each of the relay's frames comes
back as one line, through the pumps ``serve`` uses (:mod:`relay.streams.pump`), with the
same limits and backpressure. When the socket is lost the link is over: the client is
told why (:func:`relay.client.link.dialing.close_failure`), and, when it wanted to resume
and could not, why not (said once, when the relay did not close the socket itself).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import suppress

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from relay.acp.outcome import judge_frame
from relay.client.link.ends import ClientSide
from relay.streams.pump import Ended, frames_to_lines
from relay.streams.wsadapter import TextFrames, stall_timeout


class PlainLink:
    """The client's lines as text frames on one socket, the relay's frames as lines into
    ``pipe`` (the editor's stdout)."""

    def __init__(
        self,
        client: ClientSide,
        ws: ClientConnection,
        pipe: asyncio.StreamWriter,
        *,
        unresumable: str | None = None,
    ) -> None:
        self.client = client
        self.ws = ws
        self.pipe = pipe
        self.unresumable = unresumable  # why a lost socket is not resumed, when it was wanted
        config = client.config
        stall = stall_timeout(config.ping_interval, config.ping_timeout)
        self.frames = TextFrames(ws, stall, client.observer.send_stalled)

    async def send_lines(self, lines: Sequence[bytes]) -> None:
        """Send the lines of one read together; requests are noted as in flight before they
        are sent, so their responses always find them noted."""
        note_request = self.client.note_request
        for line in lines:
            note_request(line)
        with suppress(ConnectionClosed):  # the receiving pump sees it and fails the requests
            await self.frames.send_frames(lines)

    async def run(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> bool:
        """Pump both ways while the socket is open; True when the client ended it."""
        lost = await self.client.carry(self.ws, self._receive(), upstream, stop)
        if lost is None:
            return True
        if self.unresumable is not None and self.ws.protocol.close_rcvd is None:
            self.client.log.warning(self.unresumable)
        await self.client.fail(lost)
        return False

    async def _receive(self) -> bool:
        """The relay's frames as the client's lines: True once the socket is gone, False
        when the pipe is."""
        observer = self.client.observer
        ended = await frames_to_lines(self.ws, self.pipe, judge=judge_frame, observer=observer)
        return ended is Ended.SOCKET_CLOSED

    def drop(self) -> None:
        """Abort the socket: the relay ends the connection with it."""
        self.ws.transport.abort()
