"""A minimal client of the resume profile (``acp-relay.resume.v1``), for the relay's tests.

It speaks the profile as ``docs/resume.md`` writes it down, over a plain websockets
client: open or resume, numbered messages, records read and acknowledged. It keeps what
a real client keeps (its last record, the messages the relay may lack) and nothing more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from relay.core.resumeprofile import PROFILE

Record = tuple[int, bytes]


@dataclass
class ResumeState:
    """What a client keeps across sockets."""

    connection: str = ""
    secret: str = ""
    ack: int = 0  # the last record received
    sent: int = 0  # the last message sent
    unacked: dict[int, bytes] = field(default_factory=dict)  # messages the relay may lack
    welcome: dict[str, Any] = field(default_factory=dict)


def first_frame(state: ResumeState) -> str:
    """A socket's first frame: resume the connection ``state`` names, or open a new one."""
    if not state.connection:
        return json.dumps({"type": "open"})
    return json.dumps(
        {
            "type": "resume",
            "connection": state.connection,
            "secret": state.secret,
            "ack": state.ack,
            "sent": state.sent,
        }
    )


class ResumeClient:
    """One socket of a resumable connection."""

    def __init__(self, ws: ClientConnection, state: ResumeState) -> None:
        self.ws = ws
        self.state = state

    @classmethod
    async def open(cls, url: str, state: ResumeState | None = None, **kwargs: Any) -> ResumeClient:
        """Connect offering the profile; resume ``state`` if it names a connection."""
        state = state if state is not None else ResumeState()
        ws = await connect(url, subprotocols=[PROFILE], max_size=None, **kwargs)  # type: ignore[list-item]
        client = cls(ws, state)
        await ws.send(first_frame(state))
        welcome = json.loads(await ws.recv())
        assert welcome["type"] == "welcome", welcome
        state.connection, state.secret, state.welcome = (
            welcome["connection"],
            welcome["secret"],
            welcome,
        )
        for seq in [s for s in state.unacked if s <= welcome["received"]]:
            del state.unacked[seq]
        for seq in sorted(state.unacked):  # what the relay lacks, again, in order
            await ws.send(b'{"seq":%d}\n%b' % (seq, state.unacked[seq]), text=True)
        return client

    async def send(self, message: bytes) -> int:
        """Send ``message`` as the next numbered message; its number."""
        self.state.sent += 1
        seq = self.state.sent
        self.state.unacked[seq] = message
        await self.ws.send(b'{"seq":%d,"ack":%d}\n%b' % (seq, self.state.ack, message), text=True)
        return seq

    async def ack(self) -> None:
        await self.ws.send(b'{"ack":%d}' % self.state.ack, text=True)

    async def record(self) -> Record | None:
        """The next record (seq, line), or None for a control frame (an ack); raises on close."""
        data = await self.ws.recv(decode=False)
        head, sep, line = data.partition(b"\n")
        header = json.loads(head)
        if "ack" in header:
            for seq in [s for s in self.state.unacked if s <= header["ack"]]:
                del self.state.unacked[seq]
        if not sep:
            return None
        seq = int(header["seq"])
        if seq <= self.state.ack:
            return None  # a replayed record the client already has: ignored, as it must be
        assert seq == self.state.ack + 1, f"record {self.state.ack + 1} missing, got {seq}"
        self.state.ack = seq
        return seq, line

    async def close(self, code: int = 1000) -> None:
        await self.ws.close(code)
