"""The one module that reaches past websockets' public API (websockets 17.x, pinned in
pyproject.toml).

The relay's hot path and its view of how a socket ended need a few things websockets'
asyncio connection does not offer publicly: the frames of several lines written in one
system call (:class:`TextFrames`, through the connection's ``send_context``, ``drain``
and ``transport``), a text frame received as the bytes it came in, without a ``str``
made of it (:class:`Receiver`, through its receive queue, ``recv_messages``), the length
of that queue (:func:`frames_waiting`), whether the peer's close frame came first
(:func:`socket_end`, the protocol's ``close_rcvd_then_sent``), and a smaller message limit
for one socket than the server's (:func:`limit_messages`, the protocol's
``max_message_size``). Everything else in the relay uses websockets' documented API; a
new websockets version is checked here.
"""

from __future__ import annotations

import asyncio
import codecs
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import add
from typing import Any

from websockets.asyncio.connection import Connection
from websockets.frames import TEXT, CloseCode
from websockets.protocol import SERVER, State

from relay.acp.outcome import Binary, Received

STALL_CHECK_SECONDS = 0.5  # while a send waits on a full socket, look at its buffer
MIN_STALL_SECONDS = 2.0  # a shorter stall may be this process's own busy loop, not the peer


def stall_timeout(ping_interval: float, ping_timeout: float) -> float:
    """How long a send may see nothing drain before the peer is taken for gone.

    As long as a heartbeat may go unanswered, and never under MIN_STALL_SECONDS.
    """
    return max(ping_interval + ping_timeout, MIN_STALL_SECONDS)


class TextFrames:
    """Sends the lines of one pipe read as text frames in one socket write.

    websockets' ``send()`` writes and drains once per frame. This does what its
    ``send_context()`` (what ``send()`` is built on) does when the connection is open,
    without the context manager's calls: the frames are made, then written (one
    ``writelines``: one system call) and drained once. On a server's socket without
    extensions (the relay serves with compression off) they are made here, as the
    protocol would make them (unmasked, one frame a message): a line is then written as
    it is, where the protocol's ``send_text`` would copy it into each frame it makes. A
    client's frames are masked: the protocol makes them. The protocol's state stays the
    one source of truth: a connection that is not open, or that fails during the drain,
    goes through ``send_context()``, which raises ConnectionClosed as ``send()`` does.
    Past ``send()``, it uses the protocol's ``state``, ``side``, ``extensions``,
    ``send_text`` and ``data_to_send`` and the connection's ``transport``, ``drain`` and
    ``send_context`` (websockets 17.x, pinned in pyproject.toml).

    A peer that stops reading (a silent drop: no FIN, no RST) leaves a send waiting on a
    full socket buffer for good, and websockets' heartbeat cannot tell: its ping waits
    behind the same buffer. With ``stall_timeout``, a send during which nothing at all
    drains for that long aborts the socket, as a missed pong would. A timer checks the
    buffer only while a send waits, so the cost per send is two attribute writes.
    """

    def __init__(
        self,
        ws: Connection,
        stall_timeout: float | None = None,
        on_stall: Callable[[float], None] | None = None,
    ) -> None:
        self.ws = ws
        self.stall_timeout = stall_timeout
        self.on_stall = on_stall  # told the seconds nothing drained, before the abort
        self._sending = False
        self._sends = 0  # sends completed so far: progress the stall check looks for
        self._timer: asyncio.TimerHandle | None = None
        self._seen = (-1, -1)  # (sends, bytes buffered) at the last check
        self._stalled_since = 0.0
        self._encodes = ws.protocol.side is SERVER and not ws.protocol.extensions

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        """Send each of ``frames`` (valid UTF-8) as one text frame, in order."""
        await self._send(frames, None)

    async def send_frames_of(self, heads: Sequence[bytes], bodies: Sequence[bytes]) -> None:
        """Send each ``head + body`` (valid UTF-8), pair by pair, as one text frame, in
        order (:func:`text_frames_of`: the payloads are not made on a server's socket)."""
        await self._send(heads, bodies)

    async def _send(self, frames: Sequence[bytes], bodies: Sequence[bytes] | None) -> None:
        """Send ``frames``, each followed by its body of ``bodies`` when there are bodies."""
        ws = self.ws
        if self.stall_timeout is not None and self._timer is None:
            self._arm()
        self._sending = True
        try:
            protocol = ws.protocol
            if protocol.state is not State.OPEN:
                async with ws.send_context():  # closing or closed: raises ConnectionClosed
                    pass
            # All the frames in one system call (send_context() would write them one by
            # one). OPEN, and only data frames made: no end-of-stream marker among them.
            if bodies is not None and self._encodes:
                ws.transport.writelines(frame_buffers_of(frames, bodies))
            elif self._encodes:
                ws.transport.writelines(frame_buffers(frames))
            else:
                for frame in frames if bodies is None else map(bytes.__add__, frames, bodies):
                    protocol.send_text(frame)
                ws.transport.writelines(protocol.data_to_send())
            try:
                await ws.drain()
            except Exception:
                async with ws.send_context():  # the socket is gone: raises ConnectionClosed
                    pass
                raise
        finally:
            self._sending = False
            self._sends += 1

    def _arm(self) -> None:
        assert self.stall_timeout is not None
        period = min(STALL_CHECK_SECONDS, self.stall_timeout / 4)
        self._timer = asyncio.get_running_loop().call_later(period, self._check)

    def _check(self) -> None:
        """While a send waits: abort the socket once nothing has drained for stall_timeout."""
        self._timer = None
        if not self._sending:
            return  # the next send arms the check again
        now = asyncio.get_running_loop().time()
        seen = (self._sends, self.ws.transport.get_write_buffer_size())
        if seen[0] != self._seen[0] or seen[1] < self._seen[1]:
            self._stalled_since = now  # something went out since the last check
        self._seen = seen
        assert self.stall_timeout is not None
        if now - self._stalled_since >= self.stall_timeout:
            if self.on_stall is not None:
                self.on_stall(now - self._stalled_since)
            self.ws.transport.abort()
            return
        self._arm()


def frames_waiting(ws: Connection) -> Callable[[], int] | None:
    """How many received frames wait in websockets' queue for ``recv()``, as a function.

    ``recv()`` returns a waiting frame without going through the event loop; when none
    waits it will, and the lines joined meanwhile should go out first. This reads
    websockets' receive queue (the 17.x asyncio implementation's ``recv_messages``);
    None when it has no such queue, and then :class:`LineWriter` flushes on the loop's
    next turn instead.
    """
    queue = getattr(getattr(getattr(ws, "recv_messages", None), "frames", None), "queue", None)
    length = getattr(queue, "__len__", None)  # the deque's own: no Python call
    return length if callable(length) else None


UTF8_PIECE = 1 << 20  # a non-ASCII message is checked this many bytes at a time
_UTF8_DECODER = codecs.getincrementaldecoder("utf-8")


class Receiver:
    """Receives the messages of a socket: a text message as its UTF-8 bytes, a binary one
    as :class:`relay.acp.outcome.Binary`.

    websockets' ``recv()`` decodes a text message into a ``str`` (which the relay would
    encode back into bytes: the message held three times, with the frame websockets
    keeps, and up to four bytes a character when one is not ASCII). ``recv(decode=False)``
    returns the payload as it came, but says nothing of the frame's type. So this looks
    at the first frame waiting in websockets' receive queue (the 17.x asyncio
    ``Assembler``'s ``frames``, a ``SimpleQueue``, waiting for one as its ``get`` does):
    a whole text frame that is valid UTF-8 is taken with ``decode=False``, and websockets'
    parser, which keeps the last frame it made until the next, lets go of its payload.
    Anything else (a binary or fragmented message, invalid UTF-8) goes through ``recv()``,
    which closes the socket with 1007 for invalid UTF-8 as before.

    :meth:`take` gives a whole text frame that has come already at once, without a
    coroutine: it takes the frame off that queue as the ``Assembler``'s ``get`` does
    (and resumes the socket's reading, paused past its high-water mark, through the
    ``Assembler``'s ``maybe_resume``), without ``recv()``'s and ``get``'s calls.
    """

    def __init__(self, ws: Connection) -> None:
        self.recv = ws.recv
        self._messages: Any = getattr(ws, "recv_messages", None)
        self._frames: Any = getattr(self._messages, "frames", None)
        self._queue: deque[Any] | None = getattr(self._frames, "queue", None)  # None: recv()

    async def __call__(self) -> Received:
        """The next message; ConnectionClosed once the socket is closed."""
        queue = self._queue
        if queue is not None:
            if not queue and not self._messages.closed:
                frames = self._frames
                frames.get_waiter = waiter = frames.loop.create_future()
                try:
                    await waiter
                except EOFError:
                    pass  # the socket closed: recv() raises ConnectionClosed
                finally:
                    waiter.cancel()
                    frames.get_waiter = None
                    # The future keeps the EOFError, whose traceback keeps this frame: a
                    # cycle holding the socket until the collector's next full pass.
                    del waiter
            message = self.take()
            if message is not None:
                return message
        other = await self.recv()
        return other.encode() if isinstance(other, str) else Binary(len(other))

    def take(self) -> bytes | None:
        """The next message now, if it is a whole text frame (valid UTF-8) received already:
        its bytes; None when none has come or the next is of another kind (then await the
        receiver)."""
        queue = self._queue
        if not queue:
            return None
        head = queue[0]
        data = head.data
        if head.opcode is not TEXT or not head.fin or not (data.isascii() or is_utf8(data)):
            return None
        queue.popleft()
        messages = self._messages
        if messages.paused and len(queue) <= messages.low:
            messages.maybe_resume()
        head.data = b""  # the parser holds ``head`` until its next frame
        return data if data.__class__ is bytes else bytes(data)  # unmasked: a bytearray


def is_utf8(data: bytes, piece: int = UTF8_PIECE) -> bool:
    """Whether ``data`` is valid UTF-8; a message over ``piece`` bytes is decoded a piece at
    a time (its ``str`` is never made whole)."""
    if data.isascii():
        return True
    try:
        if len(data) <= piece:
            data.decode()
            return True
        view, decoder = memoryview(data), _UTF8_DECODER()
        for start in range(0, len(data), piece):
            decoder.decode(view[start : start + piece])
        decoder.decode(b"", True)
    except UnicodeDecodeError:
        return False
    return True


def limit_messages(ws: Connection, max_bytes: int) -> None:
    """Take no message over ``max_bytes`` on ``ws`` from its next frame on.

    The server's ``max_size`` is one for every socket; this sets one socket's own, which
    websockets' parser reads before each frame (the protocol's ``max_message_size``): a
    frame whose header announces more, or a fragment taking its message past it, closes
    the socket with 1009 before its payload is read. Call it before the upgrade is
    answered (a peer's frames come after), e.g. in ``process_request``.
    """
    ws.protocol.max_message_size = max_bytes


def peer_closed_first(ws: Connection) -> bool:
    """Whether the peer's close frame came before this side sent its own."""
    return bool(ws.protocol.close_rcvd_then_sent)


@dataclass(frozen=True)
class SocketEnd:
    """How a socket ended, as the peer's close frame says: ``clean`` when the peer closed
    it with 1000 before the relay sent a close (the client is done, not lost)."""

    clean: bool
    why: str


def socket_end(ws: Connection) -> SocketEnd:
    """How ``ws`` ended (call once it is closed): the words are for a log line only."""
    protocol = ws.protocol
    close = protocol.close_rcvd
    if close is None:
        return SocketEnd(False, "lost (no close frame)")
    if close.code == CloseCode.NORMAL_CLOSURE and protocol.close_rcvd_then_sent is not False:
        return SocketEnd(True, "closed by the client")
    return SocketEnd(
        False, f"closed with {close.code}" + (f": {close.reason}" if close.reason else "")
    )


_SHORT_HEADERS = [bytes((0x81, size)) for size in range(126)]  # FIN, text, unmasked
_MEDIUM_HEADER = struct.Struct("!BBH").pack
_LONG_HEADER = struct.Struct("!BBQ").pack
_HEADERS_KEPT = 4096  # headers of this many sizes are kept: a bound on the table


class _Headers(dict[int, bytes]):
    """A text frame's header by its payload's size (under 64 KiB), made once per size: the
    headers of a batch are then looked up in one ``map``, not made line by line."""

    def __missing__(self, size: int) -> bytes:
        header = _SHORT_HEADERS[size] if size < 126 else _MEDIUM_HEADER(0x81, 126, size)
        if len(self) < _HEADERS_KEPT:
            self[size] = header
        return header


_HEADERS = _Headers()


def text_frames(payloads: Sequence[bytes]) -> bytes:
    """``payloads`` (valid UTF-8) as unmasked text frames, one after the other: what a
    server without extensions sends (RFC 6455, section 5.2)."""
    return b"".join(frame_buffers(payloads))


def frame_buffers(payloads: Sequence[bytes]) -> list[bytes]:
    """The bytes of :func:`text_frames`, as buffers for one ``writelines``: the headers and
    the payloads under 64 KiB joined, each larger payload a buffer of its own (written as
    it is: a large message is not copied)."""
    if not payloads:
        return []
    if max(map(len, payloads)) < 1 << 16:  # nearly always: the batch in C-speed calls
        parts: list[bytes] = [b""] * (2 * len(payloads))
        parts[::2] = map(_HEADERS.__getitem__, map(len, payloads))
        parts[1::2] = payloads
        return [b"".join(parts)]
    return _large_frame_buffers(payloads)


def text_frames_of(heads: Sequence[bytes], bodies: Sequence[bytes]) -> bytes:
    """:func:`text_frames` of the payloads ``head + body``, pair by pair (a record's or a
    watcher's frame is a header of the relay's and an agent line)."""
    return b"".join(frame_buffers_of(heads, bodies))


def frame_buffers_of(heads: Sequence[bytes], bodies: Sequence[bytes]) -> list[bytes]:
    """:func:`frame_buffers` of the payloads ``head + body``, pair by pair: when every
    payload is under 64 KiB (nearly always), without making them, headers, heads and
    bodies joined in a few C-speed calls; otherwise each payload made and a large one
    written as it is, as :func:`frame_buffers` does."""
    sizes = list(map(add, map(len, heads), map(len, bodies)))
    if not sizes or max(sizes) >= 1 << 16:
        return frame_buffers(list(map(bytes.__add__, heads, bodies)))
    parts: list[bytes] = [b""] * (3 * len(sizes))
    parts[::3] = map(_HEADERS.__getitem__, sizes)
    parts[1::3] = heads
    parts[2::3] = bodies
    return [b"".join(parts)]


def _large_frame_buffers(payloads: Sequence[bytes]) -> list[bytes]:
    """:func:`frame_buffers` of a batch with a payload of 64 KiB or more."""
    buffers: list[bytes] = []
    parts: list[bytes] = []
    for payload in payloads:
        size = len(payload)
        if size < 126:
            parts += (_SHORT_HEADERS[size], payload)
        elif size < 1 << 16:
            parts += (_MEDIUM_HEADER(0x81, 126, size), payload)
        else:  # 64 KiB or more: written as it is
            parts.append(_LONG_HEADER(0x81, 127, size))
            buffers += (b"".join(parts), payload)
            parts = []
    if parts:
        buffers.append(b"".join(parts))
    return buffers


class EncodedFrames:
    """Writes frames already encoded (:func:`text_frames`) on a server socket, past its
    protocol: the same frames to several watchers are encoded once, and a watcher's writes
    never wait (a full buffer is its lag, for the caller to judge by :meth:`buffered`).

    The socket must have no extension (the relay serves with compression off), so that a
    frame's bytes are its payload's; nothing is written once the protocol is past OPEN
    (its close frame must be the last thing sent).
    """

    def __init__(self, ws: Connection) -> None:
        if ws.protocol.extensions:
            raise ValueError("frames are encoded for a socket without extensions")
        self.ws = ws

    def write(self, data: bytes) -> bool:
        """Write ``data``; False when the socket is closing or closed (nothing written)."""
        if self.ws.protocol.state is not State.OPEN:
            return False
        self.ws.transport.write(data)
        return True

    def buffered(self) -> int:
        """Bytes written and not yet taken by the kernel."""
        return self.ws.transport.get_write_buffer_size()
