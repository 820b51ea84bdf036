"""A TCP proxy on 127.0.0.1 that a test can cut: reset both sides, or drop every packet.

Real sockets both ways: the client connects to the proxy's port, the proxy to the target.
``reset()`` aborts every proxied connection with RST (SO_LINGER 0) on both sides;
``blackhole()`` stops forwarding in both directions without closing anything (a silent
drop: no FIN, no RST, just nothing), until ``restore()`` or the peers give up;
``refusing = True`` closes each new connection as soon as it is accepted, as a proxy
whose backend is down does, until set back to False.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from contextlib import suppress
from dataclasses import dataclass, field
from typing import cast


@dataclass
class _Pair:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class NetCut:
    """A cuttable TCP proxy to ``target_port`` on 127.0.0.1."""

    def __init__(self, target_port: int, *, receive_buffer: int | None = None) -> None:
        self.target_port = target_port
        self.receive_buffer = receive_buffer  # SO_RCVBUF of the proxy's sockets, if set
        self.port = 0
        self.dropping = False
        self.refusing = False  # close new connections at once
        self._pairs: list[_Pair] = []
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()

    async def __aenter__(self) -> NetCut:
        listener = self._socket()
        listener.bind(("127.0.0.1", 0))
        self._server = await asyncio.start_server(self._accept, sock=listener)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self.reset()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _socket(self) -> socket.socket:
        """A TCP socket with the small receive buffer asked for (accepted ones inherit it),
        IPPROTO_TCP so that asyncio turns Nagle off: the proxy must not delay small writes."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        if self.receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
        return sock

    def url(self, path: str = "/acp") -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        upstream = self._socket()
        upstream.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(upstream, ("127.0.0.1", self.target_port))
            up_reader, up_writer = await asyncio.open_connection(sock=upstream)
        except OSError:
            upstream.close()
            writer.close()
            return
        pair = _Pair(writer, up_writer)
        pair.tasks = [
            asyncio.create_task(self._copy(reader, up_writer)),
            asyncio.create_task(self._copy(up_reader, writer)),
        ]
        self._pairs.append(pair)

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(OSError, asyncio.CancelledError):
            while True:
                await self._flowing.wait()  # a blackhole reads nothing: the sender fills up
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()  # what was read as the cut came is held
                writer.write(data)
                await writer.drain()
            writer.write_eof()

    def reset(self) -> None:
        """Abort every proxied connection with a TCP reset on both sides."""
        for pair in self._pairs:
            for writer in (pair.client, pair.server):
                _abort_with_reset(writer)
            for task in pair.tasks:
                task.cancel()
        self._pairs.clear()
        self._flowing.set()

    def blackhole(self) -> None:
        """Forward nothing more, either way, and close nothing: packets vanish."""
        self._flowing.clear()
        for pair in self._pairs:
            for writer in (pair.client, pair.server):
                _reading(writer).pause_reading()

    def restore(self) -> None:
        """Forward again (what arrived meanwhile was held, not lost: as TCP would)."""
        for pair in self._pairs:
            for writer in (pair.client, pair.server):
                _reading(writer).resume_reading()
        self._flowing.set()


def _abort_with_reset(writer: asyncio.StreamWriter) -> None:
    """Close the socket with a TCP reset (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _reading(writer: asyncio.StreamWriter) -> asyncio.ReadTransport:
    """A socket stream's transport reads as well as writes (uvloop's is no ReadTransport
    subclass, but has its methods)."""
    return cast(asyncio.ReadTransport, writer.transport)
