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
from typing import Any, Protocol

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from relay.framing import DroppedLine, FrameRefused, Line, LineSplitter, frame_to_line, utf8_problem

READ_CHUNK = 1 << 18
COALESCE_BYTES = 1 << 16  # lines up to this size are joined into one pipe write

LineTransform = Callable[[bytes], bytes | FrameRefused]
# Trace hooks (relay.tracefile), None when --trace-dir is off: checked once per batch or frame.
AgentLineHook = Callable[[Line], None]
ClientFrameHook = Callable[[bytes, bytes | FrameRefused | None], None]


class FrameSink(Protocol):
    """Where :func:`lines_to_frames` sends: a WebSocket, or anything that sends like one."""

    async def send(self, message: bytes, *, text: bool | None = None) -> None: ...


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
    ws: FrameSink,
    *,
    max_bytes: int,
    counters: Counters,
    log: Any,
    observe: Callable[[bytes], bool] | None = None,
    trace: AgentLineHook | None = None,
) -> None:
    """Send each line of ``reader`` as one text frame, byte-identical, until EOF.

    Lines over ``max_bytes`` or not valid UTF-8 are dropped with an error log.
    ``observe`` is shown each line until it returns False (then never again).
    ``trace`` is shown each line once it was sent (or dropped).
    Raises ConnectionClosed if the socket goes first.
    """
    splitter = LineSplitter(max_bytes)
    while chunk := await reader.read(READ_CHUNK):
        lines = splitter.feed(chunk)
        if observe is not None and not all(map(observe, _whole(lines))):
            observe = None
        await _send_lines(ws, lines, counters, log)
        if trace is not None:
            for line in lines:
                trace(line)
    last = splitter.finish()
    if last is not None:
        await _send_lines(ws, [last], counters, log)
        if trace is not None:
            trace(last)


def _whole(lines: list[Line]) -> list[bytes]:
    return [line for line in lines if isinstance(line, bytes)]


async def _send_lines(ws: FrameSink, lines: list[Line], counters: Counters, log: Any) -> None:
    """Send the lines of one read as text frames, written to the socket together."""
    frames: list[bytes] = []
    for line in lines:
        if isinstance(line, DroppedLine):
            _drop(log, counters, line.size, line.reason, counters.messages + len(frames))
        elif (problem := utf8_problem(line)) is not None:
            _drop(log, counters, len(line), problem, counters.messages + len(frames))
        else:
            frames.append(line)
    if frames:
        await _send_frames(ws, frames)
    for frame in frames:
        counters.add(len(frame))


async def _send_frames(ws: FrameSink, frames: list[bytes]) -> None:
    if isinstance(ws, Connection):
        # One send_context for the batch: one write and one drain instead of one per line.
        async with ws.send_context():
            for frame in frames:
                ws.protocol.send_text(frame)
    else:
        for frame in frames:
            await ws.send(frame, text=True)


def _drop(log: Any, counters: Counters, size: int, reason: str, after_message: int) -> None:
    counters.dropped += 1
    log.error("line dropped", size=size, reason=reason, after_message=after_message)


async def frames_to_lines(
    ws: Connection,
    writer: asyncio.StreamWriter,
    *,
    transform: LineTransform,
    counters: Counters,
    log: Any,
    trace: ClientFrameHook | None = None,
) -> Ended:
    """Write each text frame of ``ws`` as one line into ``writer`` until either side closes.

    Binary frames are ignored with a warning. A frame that cannot be one line, or that
    ``transform`` refuses, is answered on the socket and not forwarded. ``trace`` is
    shown each text frame with what became of it.
    """
    lines = LineWriter(writer)
    while True:
        try:
            frame = await ws.recv()
        except ConnectionClosed:
            lines.flush()
            return Ended.SOCKET_CLOSED
        if isinstance(frame, bytes):
            log.warning("binary frame ignored", size=len(frame))
            continue
        data = frame.encode()
        line = _to_line(data, transform)
        if trace is not None:
            trace(data, line)
        if line is None:
            continue
        if isinstance(line, FrameRefused):
            log.warning("frame refused", reason=line.reason)
            if not await _reply(ws, line.reply):
                return Ended.SOCKET_CLOSED
            continue
        if not await lines.write(line):
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


class LineWriter:
    """Writes lines into a pipe; small lines of one loop iteration go out in one write.

    Frames that are already received come out of ``recv()`` without a pause, so the lines
    made of them are joined and written once the loop turns (``call_soon``), saving a
    system call per message under load. At most ``COALESCE_BYTES`` wait in the join; a
    full pipe makes :meth:`write` wait, which stops the reading of the socket.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._joined = bytearray()
        self._scheduled = False

    async def write(self, line: bytes) -> bool:
        """Queue one line (``\n`` added); False once the pipe is closed."""
        if self.writer.is_closing():
            return False
        if len(line) >= COALESCE_BYTES:
            self.flush()
            self.writer.writelines((line, b"\n"))
        else:
            self._join(line)
        try:
            if self.writer.transport.get_write_buffer_size():  # the pipe is full: wait
                await self.writer.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def _join(self, line: bytes) -> None:
        self._joined += line
        self._joined += b"\n"
        if len(self._joined) >= COALESCE_BYTES:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write the joined lines now."""
        self._scheduled = False
        if self._joined and not self.writer.is_closing():
            joined, self._joined = self._joined, bytearray()
            self.writer.write(joined)
