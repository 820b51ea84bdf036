"""A watcher of a connection (``acp-relay.watch.v1``), as docs/sharing.md writes it down.

It connects with a watcher's ticket, reads the first frame, then each frame: a line of
the conversation (its number, where it came from, the line as it was) or a JSON-RPC
message of the relay's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from relay.core.watchprofile import WATCH_PROFILE
from tests.support.live import LiveRelay, make_ticket


@dataclass(frozen=True)
class Said:
    """A line of the conversation as a watcher saw it."""

    seq: int
    origin: str  # "client", "agent" or "watcher"
    line: bytes


@dataclass(frozen=True)
class Told:
    """A message of the relay's own (a notification, or the error answering a frame)."""

    message: dict[str, Any]


class Watcher:
    """One watcher's socket."""

    def __init__(self, ws: ClientConnection, first: dict[str, Any]) -> None:
        self.ws = ws
        self.first = first

    @classmethod
    async def open(
        cls,
        live: LiveRelay | str,
        connection: str,
        *,
        may_answer: bool = False,
        subject: str = "lead",
        **kwargs: Any,
    ) -> Watcher:
        """Attach to ``connection`` of ``live`` (a relay in this loop, or the endpoint URL of
        one in a subprocess) with a fresh watcher's ticket."""
        ticket = make_ticket(subject=subject, watch=connection, may_answer=may_answer)
        ws = await connect(
            live if isinstance(live, str) else live.url(),
            subprotocols=[WATCH_PROFILE],  # type: ignore[list-item]
            additional_headers={"Authorization": f"Bearer {ticket}"},
            max_size=None,
            **kwargs,
        )
        first = json.loads(await ws.recv())
        assert first["type"] == "watching", first
        return cls(ws, first)

    async def frame(self) -> Said | Told:
        """The next frame."""
        data = await self.ws.recv(decode=False)
        head, _, line = data.partition(b"\n")
        header = json.loads(head)
        if header["from"] == "relay":
            return Told(json.loads(line))
        return Said(header["seq"], header["from"], line)

    async def said(self, count: int) -> list[Said]:
        """The next ``count`` lines of the conversation (the relay's own messages skipped)."""
        got: list[Said] = []
        while len(got) < count:
            frame = await self.frame()
            if isinstance(frame, Said):
                got.append(frame)
        return got

    async def told(self, method: str) -> dict[str, Any]:
        """The next message of the relay's own with ``method`` (lines skipped)."""
        while True:
            frame = await self.frame()
            if isinstance(frame, Told) and frame.message.get("method") == method:
                return frame.message

    async def close(self) -> None:
        await self.ws.close()
