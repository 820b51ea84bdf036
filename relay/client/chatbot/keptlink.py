"""What a chat thread's relay connection keeps in the state file, so a restart loses nothing.

A :class:`KeptLink` is a thread's :class:`relay.client.link.resuming.ResumingLink` with
the state file (:mod:`relay.client.chatbot.store`) beside it: each line to the agent is
kept before it is sent, under the number the link gives it; at each checkpoint where the
link stands is kept with what the thread shows, and only then are the records received
acknowledged to the relay (:class:`Kept`), so a bot killed at any moment resumes from
what it kept and the relay still has the rest. A thread whose link is not open (yet, or
ever) has :class:`Unlinked`: a decision is kept, nothing is sent.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

from websockets.exceptions import ConnectionClosed

from relay.client.chatbot.store import State
from relay.client.link.resuming import ResumingLink
from relay.core.resumeprofile import ack_frame
from relay.core.windows import Received
from relay.observe.tasks import Tasks


class Kept(Received):
    """The records received, acknowledged only up to the last one the state file keeps."""

    def __init__(self, kept: int = 0) -> None:
        super().__init__()
        self.last = self.acked = self.kept = kept

    def due(self) -> bool:
        return self.kept - self.acked >= self.ack_every

    def ack(self) -> int | None:
        if self.kept <= self.acked:
            return None
        self.acked = self.kept
        return self.kept


class KeptLink:
    """A thread's open link, what it sends kept in the state file first."""

    def __init__(
        self, link: ResumingLink, received: Kept, state: State, root: str, tasks: Tasks
    ) -> None:
        self.link = link
        self.tasks = tasks
        self.received = received  # the link's, acknowledged as the state file keeps it
        self.state = state
        self.root = root
        self._sending = asyncio.Lock()  # a line's number is the link's next until it is sent
        # Lines kept after the last checkpoint: the session restored from that checkpoint
        # makes them again as the relay replays what came after it; kept (and sent, or sent
        # again by resend) already, they are not sent a second time.
        self.replayed: list[bytes] = []

    async def run(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> bool:
        """Carry the connection until the thread ends (True) or it cannot go on (False)."""
        return await self.link.run(upstream, stop)

    async def send(self, lines: list[bytes]) -> None:
        """Keep each line in the state file, then send it (numbered as the link numbers it);
        a line the restored session made again is not sent twice."""
        fresh = []
        for line in lines:
            if line in self.replayed:
                self.replayed.remove(line)
            else:
                fresh.append(line)
        await self.resend(fresh)

    async def resend(self, lines: list[bytes]) -> None:
        """Keep and send ``lines`` as they are: what the relay lacks after a restart."""
        link = self.link
        async with self._sending:
            for line in lines:
                self.state.outgoing(self.root, link.sent.last + 1, line)
                await link.send_lines([line])

    async def answer(self, line: bytes, request: str, decision: str) -> bool:
        """The answer to a permission request, kept with its decision, then sent; False when
        the request was decided already."""
        link = self.link
        async with self._sending:
            if not self.state.decide(request, decision, (link.sent.last + 1, line)):
                return False
            await link.send_lines([line])
        return True

    def checkpoint(self, view: dict[str, Any]) -> None:
        """Keep where the link stands and what the thread shows (``view``); then acknowledge
        the records that kept."""
        link, received = self.link, self.received
        acked_by_relay = link.sent.last - len(link.sent)
        self.state.checkpoint(self.root, link.sent.last, received.last, acked_by_relay, view)
        received.kept = received.last
        ack = received.ack()
        if ack is not None and link.attached.is_set():
            self.tasks.spawn(self._ack(ack), "acknowledge what the state file keeps")

    async def _ack(self, ack: int) -> None:
        with suppress(ConnectionClosed):
            await self.link.frames.send_frames([ack_frame(ack)])

    def drop(self) -> None:
        """The bot stops: the socket goes without a close, the relay keeps the connection."""
        self.link.drop()


class Unlinked:
    """A thread without a link (not open yet, or never): a decision is kept, nothing sent."""

    def __init__(self, state: State) -> None:
        self.state = state

    async def run(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> bool:
        return False  # nothing to carry

    async def send(self, lines: list[bytes]) -> None:
        """No relay to send to."""

    async def answer(self, line: bytes, request: str, decision: str) -> bool:
        return self.state.decide(request, decision)

    def checkpoint(self, view: dict[str, Any]) -> None:
        """No link to keep."""

    def drop(self) -> None:
        """No socket to let go."""
