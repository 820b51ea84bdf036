"""A real OS pipe as asyncio streams, for the tests of the pumps and the pipe writer."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

LIMIT = 64 * 1024 * 1024  # the reader's line limit: above any test's line


@dataclass
class Pipe:
    """Both ends of a real OS pipe as asyncio streams."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    read_end: asyncio.ReadTransport


@asynccontextmanager
async def os_pipe() -> AsyncIterator[Pipe]:
    """An os.pipe() wrapped with connect_read_pipe / connect_write_pipe."""
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    reader = asyncio.StreamReader(limit=LIMIT)
    read_end, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    write_end, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(write_end, protocol, None, loop)
    try:
        yield Pipe(reader, writer, read_end)
    finally:
        writer.close()
        read_end.close()
        await asyncio.sleep(0)  # let both transports close their descriptors
