"""Pumps between a byte pipe (one message per line) and a WebSocket (one per text frame).

Used by ``serve`` (agent pipes <-> client socket) and ``connect`` (editor stdio <->
relay socket). Backpressure both ways: a line is read from the pipe only after the
previous frame was handed to a socket with room for it, and a frame is received only
after the previous line was drained into the pipe. Nothing is queued without bound.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from relay.framing import DroppedLine, FrameRefused, Line, LineSplitter, frame_to_line, utf8_problem

READ_CHUNK = 1 << 18

LineTransform = Callable[[bytes], bytes | FrameRefused]


@dataclass
class Counters:
    """Messages and bytes carried in one direction."""

    messages: int = 0
    bytes: int = 0
    dropped: int = 0

    def add(self, size: int) -> None:
        self.messages += 1
        self.bytes += size


class Ended(enum.Enum):
    """Why a frames-to-lines pump stopped."""

    SOCKET_CLOSED = "socket closed"
    PIPE_CLOSED = "pipe closed"


async def lines_to_frames(
    reader: asyncio.StreamReader,
    ws: Connection,
    *,
    max_bytes: int,
    counters: Counters,
    log: Any,
    observe: Callable[[bytes], bool] | None = None,
) -> None:
    """Send each line of ``reader`` as one text frame, byte-identical, until EOF.

    Lines over ``max_bytes`` or not valid UTF-8 are dropped with an error log.
    ``observe`` is shown each line until it returns False (then never again).
    Raises ConnectionClosed if the socket goes first.
    """
    splitter = LineSplitter(max_bytes)
    while chunk := await reader.read(READ_CHUNK):
        for line in splitter.feed(chunk):
            if observe is not None and isinstance(line, bytes) and not observe(line):
                observe = None
            await _send_line(ws, line, counters, log)
    last = splitter.finish()
    if last is not None:
        await _send_line(ws, last, counters, log)


async def _send_line(ws: Connection, line: Line, counters: Counters, log: Any) -> None:
    if isinstance(line, DroppedLine):
        _drop(log, counters, line.size, line.reason)
        return
    problem = utf8_problem(line)
    if problem is not None:
        _drop(log, counters, len(line), problem)
        return
    await ws.send(line, text=True)
    counters.add(len(line))


def _drop(log: Any, counters: Counters, size: int, reason: str) -> None:
    counters.dropped += 1
    log.error("line dropped", size=size, reason=reason, after_message=counters.messages)


async def frames_to_lines(
    ws: Connection,
    writer: asyncio.StreamWriter,
    *,
    transform: LineTransform,
    counters: Counters,
    log: Any,
) -> Ended:
    """Write each text frame of ``ws`` as one line into ``writer`` until either side closes.

    Binary frames are ignored with a warning. A frame that cannot be one line, or that
    ``transform`` refuses, is answered on the socket and not forwarded.
    """
    while True:
        try:
            frame = await ws.recv()
        except ConnectionClosed:
            return Ended.SOCKET_CLOSED
        if isinstance(frame, bytes):
            log.warning("binary frame ignored", size=len(frame))
            continue
        line = _to_line(frame.encode(), transform)
        if line is None:
            continue
        if isinstance(line, FrameRefused):
            log.warning("frame refused", reason=line.reason)
            if not await _reply(ws, line.reply):
                return Ended.SOCKET_CLOSED
            continue
        if not await _write_line(writer, line):
            return Ended.PIPE_CLOSED
        counters.add(len(line))


def _to_line(frame: bytes, transform: LineTransform) -> bytes | FrameRefused | None:
    line = frame_to_line(frame)
    if isinstance(line, bytes):
        return transform(line)
    return line


async def _reply(ws: Connection, reply: bytes) -> bool:
    try:
        await ws.send(reply, text=True)
    except ConnectionClosed:
        return False
    return True


async def _write_line(writer: asyncio.StreamWriter, line: bytes) -> bool:
    if writer.is_closing():
        return False
    try:
        writer.writelines((line, b"\n"))
        await writer.drain()
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True
