"""Lines into a byte pipe (the agent's stdin, or the editor's stdout), batched, with bounded waits.

:class:`LineWriter` adds the ``\n`` to each line and writes it into an asyncio stream's
transport: the first line of a batch at once, the next ones joined into one write; a
full pipe makes it wait (which is the pumps' backpressure), and while it waits it asks
now and then whether the socket's peer is still there. Used by :mod:`relay.streams.pump`,
:mod:`relay.server.connections.carriers` and :mod:`relay.client.link.resuming`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

COALESCE_BYTES = 1 << 16  # lines up to this size are joined into one pipe write
PEER_CHECK_SECONDS = 0.5  # while a full pipe stalls the socket's reading, look at the peer


class LineWriter:
    """Writes lines into a pipe; small lines of one batch go out in one write.

    Frames that are already received come out of ``recv()`` without a pause: the first
    line of a batch is written at once, the lines after it are joined and written when
    the batch ends, saving a system call per message under load without delaying a lone
    message. The batch ends when the loop turns (``call_soon``) or, with
    ``caller_flushes``, when the caller calls :meth:`flush` (``frames_to_lines`` does so
    when no received frame is waiting: no extra turn of the loop per message). A caller
    that flushes before anything it waits for may also ask for no ``first_at_once``:
    then the first line is joined too, and a batch is one write (a system call less per
    batch; a lone message is not delayed, the flush coming before the wait). At most
    ``COALESCE_BYTES`` wait in the join; a full pipe makes :meth:`write` wait, which
    stops the reading of the socket.

    While it waits, a timer (one per writer, only while writes wait) asks ``peer_gone``
    every ``PEER_CHECK_SECONDS`` of one uninterrupted wait; when it says yes, the wait
    ends and :meth:`write` returns False with ``peer_lost`` set. A timer, not a timeout
    around each wait: waits on a pipe that is merely busy are frequent under load.
    """

    def __init__(
        self,
        writer: asyncio.StreamWriter,
        peer_gone: Callable[[int], bool] = lambda _checks: False,
        *,
        caller_flushes: bool = False,
        first_at_once: bool = True,
    ) -> None:
        self.writer = writer
        self._transport = writer.transport  # what StreamWriter's write and is_closing call
        self.peer_gone = peer_gone
        self.peer_lost = False  # write() returned False because ``peer_gone`` said so
        self.caller_flushes = caller_flushes
        # Without it (the caller flushes before it waits), a batch is one write.
        self.first_at_once = first_at_once or not caller_flushes
        self._joined = bytearray()
        self.batch_open = False  # a line of this batch went out: the next ones are joined
        self._loop: asyncio.AbstractEventLoop | None = None  # asked once: each ask is a getpid()
        self._waits = 0  # waits for the pipe so far
        self._waiting: asyncio.Task[Any] | None = None  # the task waiting for the pipe now
        self._timer: asyncio.TimerHandle | None = None
        self._seen_wait = -1  # the wait the timer saw last time
        self._checks = 0  # checks during the current wait

    async def write(self, line: bytes) -> bool:
        """Queue one line (``\n`` added), waiting while the pipe is full; False once the pipe
        is closed or the peer gone."""
        if not self.put(line):
            return False
        return not self.backed_up() or await self.drained()

    def put(self, line: bytes) -> bool:
        """Queue one line (``\n`` added) without waiting; False once the pipe is closed. The
        caller then waits for :meth:`drained` while :meth:`backed_up` (as :meth:`write`
        does), so that nothing is queued without bound."""
        transport = self._transport
        if transport.is_closing():
            return False
        if len(line) >= COALESCE_BYTES:
            self.flush()
            transport.writelines((line, b"\n"))
        elif self.batch_open or not self.first_at_once:  # joined: out when the batch ends
            self.batch_open = True
            joined = self._joined
            joined += line
            joined += b"\n"
            if len(joined) >= COALESCE_BYTES:
                self._write_joined()
        else:
            self._open_batch(line)
        return True

    def backed_up(self) -> bool:
        """Whether the pipe holds bytes it has not taken yet (the next line must wait)."""
        return bool(self._transport.get_write_buffer_size())

    async def drained(self) -> bool:
        """Wait until the pipe takes what is buffered; False if it closed or the peer went."""
        try:
            return await self._drain()
        except (BrokenPipeError, ConnectionResetError):
            return False

    async def _drain(self) -> bool:
        """Wait until the pipe takes what is buffered; False if the peer went meanwhile."""
        self._waits += 1
        self._waiting = task = asyncio.current_task()
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(PEER_CHECK_SECONDS, self._tick)
        try:
            await self.writer.drain()
        except asyncio.CancelledError:
            if self.peer_lost and task is not None and task.uncancel() == 0:
                return False  # cancelled by _tick alone
            raise
        finally:
            self._waiting = None
        return True

    def _tick(self) -> None:
        self._timer = None
        waiting = self._waiting
        if waiting is None:
            return  # not waiting now: the next wait starts the timer again
        if self._seen_wait != self._waits:  # a wait that began since the last tick
            self._seen_wait, self._checks = self._waits, 0
        else:  # the same wait, a whole period long
            self._checks += 1
            if self.peer_gone(self._checks):
                self.peer_lost = True
                waiting.cancel()
                return
        self._timer = asyncio.get_running_loop().call_later(PEER_CHECK_SECONDS, self._tick)

    def _open_batch(self, line: bytes) -> None:
        # The first line of a batch goes out at once (no added latency for a lone message);
        # the ones after it in the same batch are joined.
        self.batch_open = True
        if not self.caller_flushes:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self.flush)
        self._transport.writelines((line, b"\n"))

    def flush(self) -> None:
        """Write the joined lines now; the next line starts a new batch."""
        self.batch_open = False
        if self._joined:
            self._write_joined()

    def _write_joined(self) -> None:
        if self._joined and not self._transport.is_closing():
            joined, self._joined = self._joined, bytearray()
            self._transport.write(joined)


async def write_lines(writer: asyncio.StreamWriter, lines: Sequence[bytes]) -> None:
    """``lines`` into ``writer`` as whole lines, beside a :class:`LineWriter`'s (the relay's
    own answers to the agent, a watcher's); a full pipe is waited on, a closed one ignored
    (its reader is going)."""
    if writer.is_closing():
        return
    writer.writelines([part for line in lines for part in (line, b"\n")])
    with suppress(ConnectionError):
        await writer.drain()
