"""The demo agent's stdin and stdout when one of them is a file: ``< replay.ndjson`` or
``> answers.ndjson``.

The ACP SDK opens stdin and stdout with asyncio's pipe transports, which take pipes,
sockets and terminals and refuse a regular file. A file never makes a reader or a writer
wait long, so here stdin is read from the file as it is and stdout written to it at once;
the other of the two, a pipe or a terminal, is opened as the SDK opens it.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from asyncio.streams import FlowControlMixin

STDIN_LIMIT = 50 * 1024 * 1024  # the longest line read, as the SDK's own default
READ_CHUNK = 1 << 16


def stdio_problem() -> str | None:
    """Why stdin or stdout cannot carry ACP, or None: a pipe, socket, terminal or file will."""
    for fd, name in ((0, "stdin"), (1, "stdout")):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return f"{name} is closed"
        if not (_is_file(fd) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            return f"{name} must be a pipe, a socket, a terminal or a file"
    return None


def has_a_file() -> bool:
    """Whether stdin or stdout is a regular file (else the SDK opens both itself)."""
    return _is_file(0) or _is_file(1)


async def file_stdio() -> tuple[asyncio.StreamWriter, asyncio.StreamReader]:
    """Stdout as a writer and stdin as a reader (the order ``acp.run_agent`` takes them),
    each a file or a pipe."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDIN_LIMIT, loop=loop)
    if _is_file(0):
        feeding = loop.create_task(_feed(reader, 0))
        _tasks.add(feeding)
        feeding.add_done_callback(_tasks.discard)
    else:
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        await loop.connect_read_pipe(lambda: protocol, sys.stdin)
    if _is_file(1):
        transport: asyncio.WriteTransport = FileWriter(1)
        flow = FlowControlMixin(loop)
    else:
        transport, flow = await loop.connect_write_pipe(FlowControlMixin, sys.stdout)
    return asyncio.StreamWriter(transport, flow, None, loop), reader


_tasks: set[asyncio.Task[None]] = set()  # the stdin feeder, held until it is done


class FileWriter(asyncio.WriteTransport):
    """A transport that writes each message to a file at once: a file takes it whole."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False


async def _feed(reader: asyncio.StreamReader, fd: int) -> None:
    """The file's bytes into ``reader``, then its end, a chunk at a time."""
    while chunk := os.read(fd, READ_CHUNK):
        reader.feed_data(chunk)
        await asyncio.sleep(0)  # let the agent read between chunks of a long file
    reader.feed_eof()


def _is_file(fd: int) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        return False
