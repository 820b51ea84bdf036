"""This process's stdio as asyncio streams: ``connect``'s stdin and stdout, with backpressure.

The editor that launched ``acp-relay connect`` holds the other ends of its stdin and
stdout. :func:`editor_stdio` opens them as an asyncio reader and writer with flow control
(a stdout the editor does not read makes ``drain`` wait), and afterwards flushes stdout
and puts both descriptors back as they were. A pipe or socket is used directly; anything
else (a terminal, a file, /dev/null) through an OS pipe and a copying thread
(:func:`_is_pipe` says why). ``acp-relay watch`` writes to :func:`stdout_stream` alone.
"""

from __future__ import annotations

import asyncio
import io
import os
import stat
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from relay.config.errors import UsageError
from relay.streams.pump import READ_CHUNK

STDOUT_FLUSH_TIMEOUT = 5.0  # seconds at exit for stdout to drain, then for its copier thread


@asynccontextmanager
async def editor_stdio() -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """Stdin and stdout as asyncio pipes (with backpressure); flushed and restored after."""
    async with stdout_stream() as writer, _stdin_stream() as reader:
        yield reader, writer


@asynccontextmanager
async def stdout_stream() -> AsyncIterator[asyncio.StreamWriter]:
    """Stdout as an asyncio pipe (``drain`` waits for a reader that lags); flushed and put
    back as it was after."""
    loop = asyncio.get_running_loop()
    copiers: list[threading.Thread] = []
    blocking = _blocking(1)
    write_end, protocol = await loop.connect_write_pipe(_StdoutProtocol, _stdout_file(copiers))
    writer = asyncio.StreamWriter(write_end, protocol, None, loop)
    try:
        yield writer
    finally:
        writer.close()  # after what is buffered is written
        with suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(protocol.closed), STDOUT_FLUSH_TIMEOUT)
        write_end.abort()
        for thread in copiers:
            await asyncio.to_thread(thread.join, STDOUT_FLUSH_TIMEOUT)
        with suppress(OSError):
            os.set_blocking(1, blocking)


@asynccontextmanager
async def _stdin_stream() -> AsyncIterator[asyncio.StreamReader]:
    """Stdin as an asyncio pipe; put back as it was after."""
    loop = asyncio.get_running_loop()
    blocking = _blocking(0)
    reader = asyncio.StreamReader(limit=READ_CHUNK)
    read_end, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), _stdin_file()
    )
    try:
        yield reader
    finally:
        read_end.close()
        with suppress(OSError):
            os.set_blocking(0, blocking)


class _StdoutProtocol(asyncio.streams.FlowControlMixin):
    """Flow control for stdout (``drain``), and ``closed`` once the pipe is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self.closed.done():
            self.closed.set_result(None)


def _blocking(fd: int) -> bool:
    try:
        return os.get_blocking(fd)
    except OSError:
        raise UsageError(f"{'stdin' if fd == 0 else 'stdout'} is not open") from None


def _stdin_file() -> io.FileIO:
    """Stdin as a file asyncio can read as a pipe (see :func:`_is_pipe`); its copier is not
    waited for (it may be blocked reading a terminal)."""
    if _is_pipe(0):
        return os.fdopen(os.dup(0), "rb", buffering=0)
    read_fd, write_fd = os.pipe()
    _start_copier(0, write_fd, close=write_fd)
    return os.fdopen(read_fd, "rb", buffering=0)


def _stdout_file(copiers: list[threading.Thread]) -> io.FileIO:
    """Stdout as a file asyncio can write as a pipe (see :func:`_is_pipe`)."""
    if _is_pipe(1):
        return os.fdopen(os.dup(1), "wb", buffering=0)
    read_fd, write_fd = os.pipe()
    copiers.append(_start_copier(read_fd, 1, close=read_fd))
    return os.fdopen(write_fd, "wb", buffering=0)


def _is_pipe(fd: int) -> bool:
    """Pipes and sockets are used directly, through a copy of the descriptor.

    Anything else (a terminal, a file, /dev/null) goes through an OS pipe and a copying
    thread: the event loop must not make a terminal it shares with stderr non-blocking,
    and uvloop cannot take files or /dev/null at all.
    """
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _start_copier(source: int, target: int, *, close: int) -> threading.Thread:
    thread = threading.Thread(target=_copy, args=(source, target, close), daemon=True)
    thread.start()
    return thread


def _copy(source: int, target: int, close: int) -> None:
    """Copy bytes from ``source`` to ``target`` until EOF or an error, then close ``close``."""
    try:
        while chunk := os.read(source, READ_CHUNK):
            view = memoryview(chunk)
            while view:
                view = view[os.write(target, view) :]
    except OSError:
        pass
    finally:
        os.close(close)
