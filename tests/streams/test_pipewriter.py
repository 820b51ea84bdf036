"""Tests for relay.streams.pipewriter: lines into a real pipe, in order, batched, bounded waits."""

from __future__ import annotations

import asyncio

from relay.streams.pipewriter import COALESCE_BYTES, LineWriter
from tests.support.pipes import os_pipe


async def available(reader: asyncio.StreamReader) -> bytes:
    """What the pipe holds now (after letting its transport read), without waiting for more."""
    for _ in range(3):
        await asyncio.sleep(0)
    data = b""
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(1 << 20), 0.05)
        except TimeoutError:
            return data
        if not chunk:
            return data
        data += chunk


async def test_a_batch_is_its_first_line_at_once_then_the_rest_in_one_write() -> None:
    """With caller_flushes, the first line goes out at once; the next wait for flush()."""
    async with os_pipe() as pipe, asyncio.timeout(5):
        lines = LineWriter(pipe.writer, caller_flushes=True)
        for line in (b"a", b"b", b"c"):
            assert await lines.write(line)
        assert await available(pipe.reader) == b"a\n"
        lines.flush()
        assert await available(pipe.reader) == b"b\nc\n"
        assert await lines.write(b"d")  # a new batch: at once again
        assert await available(pipe.reader) == b"d\n"


async def test_without_first_at_once_a_batch_is_one_write_at_flush() -> None:
    """With caller_flushes and no first_at_once, every line of a batch waits for flush(),
    then the batch goes out whole, in order."""
    async with os_pipe() as pipe, asyncio.timeout(5):
        lines = LineWriter(pipe.writer, caller_flushes=True, first_at_once=False)
        for line in (b"a", b"b", b"c"):
            assert await lines.write(line)
        assert await available(pipe.reader) == b""
        lines.flush()
        assert await available(pipe.reader) == b"a\nb\nc\n"
        assert await lines.write(b"d")
        lines.flush()
        assert await available(pipe.reader) == b"d\n"


async def test_without_caller_flushes_the_batch_ends_when_the_loop_turns() -> None:
    """Lines joined in one turn of the loop go out on the next one, by themselves."""
    async with os_pipe() as pipe, asyncio.timeout(5):
        lines = LineWriter(pipe.writer)
        for line in (b"a", b"b", b"c"):
            assert await lines.write(line)
        assert await available(pipe.reader) == b"a\nb\nc\n"


async def test_a_large_line_goes_after_the_joined_ones() -> None:
    """A line of COALESCE_BYTES or more is written by itself, after what was joined."""
    big = b"x" * COALESCE_BYTES
    async with os_pipe() as pipe, asyncio.timeout(5):
        lines = LineWriter(pipe.writer, caller_flushes=True)
        reading = asyncio.create_task(pipe.reader.readexactly(4 + len(big) + 1))
        for line in (b"a", b"b", big):
            assert await lines.write(line)
        assert await reading == b"a\nb\n" + big + b"\n"


async def test_write_says_false_once_the_pipe_is_closed() -> None:
    """A pipe whose writer closed takes no more lines: write() returns False."""
    async with os_pipe() as pipe, asyncio.timeout(5):
        lines = LineWriter(pipe.writer, caller_flushes=True)
        pipe.writer.close()
        assert not await lines.write(b"late")
