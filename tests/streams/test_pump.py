"""Tests for relay.streams.pump: real OS pipes and processes against a real WebSocket on
127.0.0.1:0."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys
from collections.abc import Sequence

import pytest
from structlog.testing import capture_logs
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from relay.acp.outcome import Forward, Outcome, Received, Refuse, judge_frame
from relay.acp.refusals import ToAgent
from relay.acp.rewrite import RewriteReport, Rewritten
from relay.core.framing import Dropped
from relay.observe import logs
from relay.observe.logs import Logger
from relay.observe.observer import Counters, PumpObserver
from relay.streams.pump import READ_CHUNK, Ended, Judge, frames_to_lines, lines_to_frames
from relay.streams.wsadapter import TextFrames
from tests.support.pipes import os_pipe
from tests.support.sockets import websocket_pair as socket_pair
from tests.support.waiting import until

LIMIT = 4 * 1024 * 1024
LOG = logs.get_logger("test.pump")


def sent_into(counters: Counters, log: Logger = LOG) -> PumpObserver:
    """An observer counting the lines a lines-to-frames pump sends into ``counters``."""
    return PumpObserver(log, from_socket=Counters(), to_socket=counters)


def forwarded_into(counters: Counters, log: Logger = LOG) -> PumpObserver:
    """An observer counting the frames a frames-to-lines pump forwards into ``counters``."""
    return PumpObserver(log, from_socket=counters, to_socket=Counters())


async def feed(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Write ``data`` into the pipe, then close it (the reader sees EOF)."""
    writer.write(data)
    await writer.drain()
    writer.close()


async def frames(client: ClientConnection, count: int) -> list[bytes]:
    """The next ``count`` frames the client receives, as raw bytes."""
    return [await client.recv(decode=False) for _ in range(count)]


async def pump_out(
    data: bytes, expected: int, max_bytes: int = LIMIT
) -> tuple[list[bytes], Counters]:
    """Feed ``data`` through lines_to_frames; return the first ``expected`` frames and counters."""
    counters = Counters()
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        log = logs.get_logger("test")
        writing = asyncio.create_task(feed(pipe.writer, data))
        pumping = asyncio.create_task(
            lines_to_frames(
                pipe.reader,
                TextFrames(conn),
                max_bytes=max_bytes,
                observer=sent_into(counters, log),
            )
        )
        received = await frames(client, expected)
        await asyncio.gather(writing, pumping)
    return received, counters


# -- lines_to_frames ------------------------------------------------------------------


async def test_lines_arrive_as_identical_frames_in_order() -> None:
    """Each line becomes one text frame with the same bytes, in order, terminators removed."""
    big = b'{"text":"' + "é✓".encode() * (READ_CHUNK // 2) + b'"}'  # spans several reads
    lines = [b'{"jsonrpc":"2.0","id":1}', '{"t":"héllo ✓ 🎉"}'.encode(), big, b"{ }"]
    data = lines[0] + b"\n\n" + lines[1] + b"\r\n" + lines[2] + b"\n" + lines[3] + b"\n"
    received, counters = await pump_out(data, len(lines))
    assert received == lines
    assert (counters.messages, counters.bytes, counters.dropped) == (
        4,
        sum(map(len, lines)),
        0,
    )


async def test_unterminated_last_line_is_sent_at_eof() -> None:
    """A last line without a newline is still sent when the pipe ends."""
    received, counters = await pump_out(b'{"a":1}\n{"b":2}', 2)
    assert received == [b'{"a":1}', b'{"b":2}']
    assert counters.messages == 2


async def test_bad_lines_dropped_counted_and_logged() -> None:
    """Over-limit and invalid UTF-8 lines are dropped, counted and logged with size and position."""
    data = b'{"n":1}\n\xff\xfe\n' + b"y" * 40 + b'\n{"n":2}\n' + b"z" * 33
    with capture_logs() as events:
        received, counters = await pump_out(data, 2, max_bytes=32)
    assert received == [b'{"n":1}', b'{"n":2}']
    assert (counters.messages, counters.bytes, counters.dropped) == (2, 14, 3)
    assert [(e["event"], e["log_level"], e["size"], e["after_message"]) for e in events] == [
        ("line dropped", "error", 2, 1),
        ("line dropped", "error", 40, 1),
        ("line dropped", "error", 33, 2),
    ]
    assert [e["reason"] for e in events] == [
        "invalid UTF-8 at byte 0: invalid start byte",
        "line of 40 bytes over the limit",
        "line of 33 bytes over the limit",
    ]


async def test_real_process_stdout_becomes_frames() -> None:
    """Lines a real process writes to its stdout arrive as frames, all of them, in order."""
    script = "for i in range(2000): print('{\"i\":%d}' % i)"
    counters = Counters()
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None
        pumping = asyncio.create_task(
            lines_to_frames(
                proc.stdout, TextFrames(conn), max_bytes=LIMIT, observer=sent_into(counters, LOG)
            )
        )
        received = await frames(client, 2000)
        await pumping
        assert await proc.wait() == 0
    assert received == [b'{"i":%d}' % i for i in range(2000)]
    assert counters.messages == 2000


async def test_lines_to_frames_raises_when_socket_is_gone() -> None:
    """If the socket closes first, the pump raises ConnectionClosed instead of hanging."""
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        await client.close()
        await conn.wait_closed()
        pipe.writer.write(b"{}\n")
        with pytest.raises(ConnectionClosed):
            await lines_to_frames(
                pipe.reader, TextFrames(conn), max_bytes=LIMIT, observer=sent_into(Counters(), LOG)
            )


class Told:
    """An observer that keeps every verdict it is told, in order."""

    def __init__(self) -> None:
        self.verdicts: list[object] = []

    def lines(self, verdicts: Sequence[object], sent: Sequence[bytes] | None = None) -> None:
        self.verdicts.extend(verdicts)


async def test_translated_lines_go_on_translated_and_answered_ones_go_back() -> None:
    """The translate hook's lines are sent instead, its answers carried back (not sent), and
    the observer is told each line's final verdict in order."""
    report = RewriteReport("fs/read_text_file")
    answers: list[bytes] = []

    def translate(lines: list[bytes]) -> list[bytes | Rewritten | ToAgent] | None:
        out: list[bytes | Rewritten | ToAgent] = []
        for line in lines:
            if line == b"box":
                out.append(Rewritten(b"editor", report))
            elif line == b"ask":
                out.append(ToAgent(b"no", "withheld", report))
            else:
                out.append(line)
        return out if out != lines else None

    async def answer(replies: Sequence[bytes]) -> None:
        answers.extend(replies)

    told = Told()
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        writing = asyncio.create_task(feed(pipe.writer, b"a\nbox\nask\n" + b"x" * 9 + b"\nb\n"))
        pumping = asyncio.create_task(
            lines_to_frames(
                pipe.reader,
                TextFrames(conn),
                max_bytes=8,
                observer=told,
                translate=translate,
                answer=answer,
            )
        )
        received = await frames(client, 3)
        await asyncio.gather(writing, pumping)
    assert received == [b"a", b"editor", b"b"]
    assert answers == [b"no"]
    assert told.verdicts == [
        b"a",
        Rewritten(b"editor", report),
        ToAgent(b"no", "withheld", report),
        Dropped(9, "line of 9 bytes over the limit"),
        b"b",
    ]


# -- frames_to_lines ------------------------------------------------------------------


async def read_lines(reader: asyncio.StreamReader, count: int) -> list[bytes]:
    return [await reader.readline() for _ in range(count)]


async def test_frames_become_lines_in_order() -> None:
    """Text frames are written as lines byte-identical; blank and binary frames are not."""
    sent = ['{"jsonrpc":"2.0","id":1}', '{"t":"héllo ✓ 🎉"}', '{"big":"' + "x" * 300_000 + '"}']
    counters = Counters()
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        with capture_logs() as events:
            pumping = asyncio.create_task(
                frames_to_lines(
                    conn,
                    pipe.writer,
                    judge=judge_frame,
                    observer=forwarded_into(counters, logs.get_logger("test")),
                )
            )
            await client.send(sent[0])
            await client.send("")
            await client.send(b"\x00binary")
            for frame in sent[1:]:
                await client.send(frame)
            lines = await read_lines(pipe.reader, 3)
            await client.close()
            assert await pumping is Ended.SOCKET_CLOSED
    assert lines == [s.encode() + b"\n" for s in sent]
    assert (counters.messages, counters.bytes) == (3, sum(len(s.encode()) for s in sent))
    assert [(e["event"], e["size"]) for e in events] == [("binary frame ignored", 7)]


async def test_a_burst_ending_in_a_refusal_leaves_no_line_behind() -> None:
    """Frames received at once are joined into the pipe; a refusal last does not hold them."""
    burst = [f'{{"id":{i}}}'.encode() for i in range(50)]
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        pumping = asyncio.create_task(
            frames_to_lines(
                conn, pipe.writer, judge=judge_frame, observer=forwarded_into(Counters())
            )
        )
        await TextFrames(client).send_frames([*burst, b"not json\nat all"])  # one write
        lines = await read_lines(pipe.reader, len(burst))
        reply = json.loads(await client.recv())
        await client.close()
        assert await pumping is Ended.SOCKET_CLOSED
    assert lines == [line + b"\n" for line in burst]
    assert reply["error"]["code"] == -32700


async def test_the_tap_is_told_a_burst_in_one_call_before_the_pump_waits() -> None:
    """Frames received together reach the tap as one batch, in order, and the tap has them
    by the time the pipe's reader has them (told before the pump waits again)."""
    burst = [f'{{"id":{i}}}'.encode() for i in range(50)]
    told: list[list[bytes]] = []
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        pumping = asyncio.create_task(
            frames_to_lines(
                conn,
                pipe.writer,
                judge=judge_frame,
                observer=forwarded_into(Counters()),
                tap=lambda outcomes: told.append([outcome.line for outcome in outcomes]),
            )
        )
        await TextFrames(client).send_frames(burst)  # one write
        lines = await read_lines(pipe.reader, len(burst))
        assert [line for batch in told for line in batch] == burst
        await client.close()
        assert await pumping is Ended.SOCKET_CLOSED
    assert lines == [line + b"\n" for line in burst]
    assert len(told) < len(burst)  # batches, not a call per frame


class Switching:
    """A judge that refuses every frame once it forwarded one: ``now`` changes in between."""

    def __init__(self) -> None:
        self.now: Judge = self.first

    def first(self, frame: Received) -> Outcome:
        self.now = self.refuse
        return judge_frame(frame)

    def refuse(self, frame: Received) -> Outcome:
        return Refuse(b'{"refused":true}', "switched", b"")


async def test_a_judge_that_changes_between_frames_judges_the_next_frame() -> None:
    """Given a judging whose ``now`` changes, the pump asks it anew for each frame."""
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        pumping = asyncio.create_task(
            frames_to_lines(
                conn, pipe.writer, judge=Switching(), observer=forwarded_into(Counters())
            )
        )
        await client.send('{"id":1}')
        await client.send('{"id":2}')
        line = await pipe.reader.readline()
        reply = await client.recv()
        await client.close()
        assert await pumping is Ended.SOCKET_CLOSED
    assert (line, reply) == (b'{"id":1}\n', '{"refused":true}')


async def test_frame_with_newlines_is_compacted_or_refused() -> None:
    """Pretty JSON becomes one compact line; a non-JSON frame with a newline gets -32700."""
    counters = Counters()
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        pumping = asyncio.create_task(
            frames_to_lines(conn, pipe.writer, judge=judge_frame, observer=forwarded_into(counters))
        )
        await client.send('{\n  "id": 1,\n  "method": "a"\n}')
        await client.send("not json\nat all")
        reply = json.loads(await client.recv())
        await client.send('{"id":2}')
        lines = await read_lines(pipe.reader, 2)
        await client.close()
        assert await pumping is Ended.SOCKET_CLOSED
    assert lines == [b'{"id":1,"method":"a"}\n', b'{"id":2}\n']
    assert (reply["id"], reply["error"]["code"]) == (None, -32700)
    assert counters.messages == 2


async def test_refused_frame_is_answered_and_not_written() -> None:
    """A Refuse outcome's reply is sent back to the client and its line never reaches the pipe."""

    def judge(frame: Received) -> Outcome:
        outcome = judge_frame(frame)
        if not isinstance(outcome, Forward):
            return outcome
        if b"forbidden" in outcome.line:
            reply = b'{"jsonrpc":"2.0","id":7,"error":{"code":-32602}}'
            return Refuse(reply, "no way", outcome.frame)
        return Forward(outcome.line.replace(b"old", b"newer"), outcome.frame)

    counters = Counters()
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        with capture_logs() as events:
            pumping = asyncio.create_task(
                frames_to_lines(
                    conn,
                    pipe.writer,
                    judge=judge,
                    observer=forwarded_into(counters, logs.get_logger("test")),
                )
            )
            await client.send('{"id":6,"p":"old"}')
            await client.send('{"id":7,"p":"forbidden"}')
            reply = await client.recv(decode=False)
            await client.send('{"id":8}')
            lines = await read_lines(pipe.reader, 2)
            await client.close()
            assert await pumping is Ended.SOCKET_CLOSED
    assert reply == b'{"jsonrpc":"2.0","id":7,"error":{"code":-32602}}'
    assert lines == [b'{"id":6,"p":"newer"}\n', b'{"id":8}\n']
    assert (counters.messages, counters.bytes) == (2, len(b'{"id":6,"p":"newer"}{"id":8}'))
    assert [(e["event"], e["reason"]) for e in events] == [("frame refused", "no way")]


@pytest.mark.parametrize("how", ["close", "abort"])
async def test_peer_gone_ends_with_socket_closed(how: str) -> None:
    """When the client closes cleanly or drops the TCP connection, the pump ends SOCKET_CLOSED."""
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        pumping = asyncio.create_task(
            frames_to_lines(
                conn, pipe.writer, judge=judge_frame, observer=forwarded_into(Counters())
            )
        )
        await client.send("{}")
        assert await pipe.reader.readline() == b"{}\n"
        if how == "close":
            await client.close()
        else:
            client.transport.abort()
        assert await pumping is Ended.SOCKET_CLOSED


async def test_pipe_reader_gone_ends_with_pipe_closed() -> None:
    """When nobody reads the pipe any more, the next frame ends the pump PIPE_CLOSED."""
    counters = Counters()
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        pumping = asyncio.create_task(
            frames_to_lines(conn, pipe.writer, judge=judge_frame, observer=forwarded_into(counters))
        )
        await client.send('{"n":1}')
        assert await pipe.reader.readline() == b'{"n":1}\n'
        pipe.read_end.close()
        await until(pipe.writer.is_closing)  # the write end notices the hang-up
        await client.send('{"n":2}')
        assert await pumping is Ended.PIPE_CLOSED
    assert counters.messages == 1


async def test_pump_blocked_on_full_pipe_ends_when_reader_goes() -> None:
    """A pump waiting for a full pipe to drain ends PIPE_CLOSED as soon as the reader goes."""
    frame = '{"x":"' + "x" * 100_000 + '"}'
    counters = Counters()
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        pipe.read_end.pause_reading()  # a reader that does not read
        pumping = asyncio.create_task(
            frames_to_lines(conn, pipe.writer, judge=judge_frame, observer=forwarded_into(counters))
        )
        for _ in range(4):
            await client.send(frame)
        transport = pipe.writer.transport
        await until(lambda: transport.get_write_buffer_size() > 0)  # full: the pump waits
        assert not pumping.done()
        pipe.read_end.close()
        assert await pumping is Ended.PIPE_CLOSED
    assert counters.messages <= 1


@pytest.mark.slow
@pytest.mark.parametrize("how", ["reset", "close"])
async def test_pump_blocked_on_full_pipe_ends_when_the_peer_goes(how: str) -> None:
    """A pump waiting on a pipe nobody reads still sees the peer go, and ends SOCKET_CLOSED."""
    frame = '{"x":"' + "x" * 100_000 + '"}'
    async with socket_pair() as (conn, client), os_pipe() as pipe, asyncio.timeout(5):
        pipe.read_end.pause_reading()  # a reader that does not read
        pumping = asyncio.create_task(
            frames_to_lines(
                conn, pipe.writer, judge=judge_frame, observer=forwarded_into(Counters())
            )
        )
        for _ in range(4):
            await client.send(frame)
        transport = pipe.writer.transport
        await until(lambda: transport.get_write_buffer_size() > 0)  # full: the pump waits
        if how == "reset":
            sock = client.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.transport.abort()
        assert await pumping is Ended.SOCKET_CLOSED


async def test_process_exit_ends_with_pipe_closed() -> None:
    """When the agent process exits, frames after that end the pump PIPE_CLOSED."""
    script = "import sys; sys.stdout.write(sys.stdin.readline())"
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        pumping = asyncio.create_task(
            frames_to_lines(
                conn, proc.stdin, judge=judge_frame, observer=forwarded_into(Counters())
            )
        )
        await client.send('{"first":1}')
        assert await proc.stdout.read() == b'{"first":1}\n'
        assert await proc.wait() == 0
        while not pumping.done():
            await client.send('{"later":1}')
            await asyncio.sleep(0.01)
        assert pumping.result() is Ended.PIPE_CLOSED
