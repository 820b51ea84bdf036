"""relay.streams.wsadapter: what the relay takes from websockets' internals, on real sockets."""

from __future__ import annotations

import asyncio
import sys
from contextlib import suppress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import State

from relay.acp.outcome import Binary, Received
from relay.streams.wsadapter import (
    UTF8_PIECE,
    Receiver,
    SocketEnd,
    TextFrames,
    frame_buffers,
    frames_waiting,
    is_utf8,
    limit_messages,
    socket_end,
    stall_timeout,
    text_frames,
    text_frames_of,
)
from tests.support.netcut import NetCut
from tests.support.sockets import websocket_pair as socket_pair
from tests.support.waiting import until


async def frames(client: ClientConnection, count: int) -> list[bytes]:
    """The next ``count`` frames the client receives, as raw bytes."""
    return [await client.recv(decode=False) for _ in range(count)]


async def test_frames_waiting_counts_what_recv_would_return_at_once() -> None:
    """frames_waiting gives the number of received frames not yet taken by recv()."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        waiting = frames_waiting(conn)
        assert waiting is not None
        assert waiting() == 0
        await TextFrames(client).send_frames([b"{}", b"{}", b"{}"])
        await until(lambda: waiting() == 3)
        await conn.recv()
        assert waiting() == 2


async def sends_until_closed(sender: TextFrames, frames: list[bytes]) -> None:
    """Send ``frames`` again and again until the socket is closed."""
    with suppress(ConnectionClosed):
        while True:
            await sender.send_frames(frames)


async def test_send_to_a_peer_that_stopped_reading_aborts_after_the_stall_timeout() -> None:
    """A send on which nothing drains for stall_timeout aborts the socket instead of hanging."""
    big = [b'{"x":"' + b"x" * 60_000 + b'"}'] * 20
    accepted: asyncio.Future[ServerConnection] = asyncio.get_running_loop().create_future()

    async def handler(conn: ServerConnection) -> None:
        accepted.set_result(conn)
        await conn.wait_closed()

    async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        cut = NetCut(port, receive_buffer=65536)
        async with cut as net, connect(net.url("/"), max_size=None) as client:
            conn = await accepted
            net.blackhole()  # a silent drop: nothing read, nothing closed
            loop = asyncio.get_running_loop()
            started = loop.time()
            async with asyncio.timeout(10):
                await sends_until_closed(TextFrames(conn, stall_timeout=0.4), big)
            waited = loop.time() - started
            assert conn.state is State.CLOSED
            client.transport.abort()
    assert 0.4 <= waited < 3


async def test_a_slow_reader_is_not_taken_for_a_dead_one() -> None:
    """A peer that reads in short bursts keeps its socket, however long the sends take."""
    frame = b'{"x":"' + b"x" * 50_000 + b'"}'
    accepted: asyncio.Future[ServerConnection] = asyncio.get_running_loop().create_future()

    async def handler(conn: ServerConnection) -> None:
        accepted.set_result(conn)
        await conn.wait_closed()

    async def trickle(net: NetCut) -> None:
        """The behaviour under test: the peer's reads come in short bursts."""
        while True:
            net.blackhole()
            await asyncio.sleep(0.15)
            net.restore()
            await asyncio.sleep(0.01)

    async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        cut = NetCut(port, receive_buffer=65536)
        async with cut as net, connect(net.url("/"), max_size=None, compression=None) as client:
            conn = await accepted
            sender = TextFrames(conn, stall_timeout=0.3)
            throttle = asyncio.create_task(trickle(net))
            receiving = asyncio.create_task(frames(client, 200))
            started = asyncio.get_running_loop().time()
            async with asyncio.timeout(30):
                for _ in range(200):
                    await sender.send_frames([frame])
                assert len(await receiving) == 200
            throttle.cancel()
            net.restore()
            assert asyncio.get_running_loop().time() - started > 0.3  # sends did wait


@pytest.mark.parametrize(
    ("interval", "timeout", "expected"), [(30, 30, 60), (0.2, 0.1, 2.0), (1.5, 1, 2.5)]
)
def test_stall_timeout_is_the_heartbeat_and_never_under_two_seconds(
    interval: float, timeout: float, expected: float
) -> None:
    """A send may stall as long as a heartbeat may go unanswered, and at least 2 s."""
    assert stall_timeout(interval, timeout) == expected


async def test_socket_end_clean_when_the_client_closes_with_1000() -> None:
    """A close frame 1000 from the peer, before the relay's own: the client is done."""
    async with socket_pair() as (conn, client):
        await client.close(1000)
        await conn.wait_closed()
        assert socket_end(conn) == SocketEnd(True, "closed by the client")


async def test_socket_end_lost_when_the_relay_closed_first() -> None:
    """The relay's own close (1001 at shutdown, say) is no clean close by the client."""
    async with socket_pair() as (conn, client):
        await conn.close(1001, "going away")
        await client.wait_closed()
        end = socket_end(conn)
        assert not end.clean
        assert end.why.startswith("closed with 1001")


@pytest.mark.parametrize(("code", "reason"), [(1001, "bye"), (4000, "")])
async def test_socket_end_lost_when_the_client_closes_otherwise(code: int, reason: str) -> None:
    """Any other code from the client is a loss, and its code and reason are told."""
    async with socket_pair() as (conn, client):
        await client.close(code, reason)
        await conn.wait_closed()
        expected = f"closed with {code}" + (f": {reason}" if reason else "")
        assert socket_end(conn) == SocketEnd(False, expected)


async def test_socket_end_lost_without_a_close_frame() -> None:
    """A reset (no close frame at all) is a loss."""
    async with socket_pair() as (conn, client):
        client.transport.abort()
        await conn.wait_closed()
        assert socket_end(conn) == SocketEnd(False, "lost (no close frame)")


# -- frames as the relay writes them ----------------------------------------------------

SIZES = [0, 1, 125, 126, 65535, 65536, 200_000]


@pytest.mark.parametrize("size", SIZES)
def test_frame_buffers_are_the_frames_websockets_would_make(size: int) -> None:
    """A server's unmasked text frame, header and payload, byte for byte as websockets'."""
    payload = b"x" * size
    made = Frame(Opcode.TEXT, payload).serialize(mask=False)
    assert b"".join(frame_buffers([payload])) == text_frames([payload]) == made


@settings(max_examples=100)
@given(st.lists(st.sampled_from([0, 1, 125, 126, 127, 300, 65535, 65536, 70_000]), max_size=12))
def test_a_batch_of_any_sizes_is_the_frames_websockets_would_make(sizes: list[int]) -> None:
    """A batch's buffers, whatever its sizes (short, medium and long headers mixed), are
    the frames websockets makes of each payload, in order."""
    payloads = [bytes([0x61 + n % 26]) * size for n, size in enumerate(sizes)]
    made = b"".join(Frame(Opcode.TEXT, p).serialize(mask=False) for p in payloads)
    assert b"".join(frame_buffers(payloads)) == text_frames(payloads) == made


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(st.sampled_from([0, 1, 30]), st.sampled_from([0, 1, 95, 96, 200, 65505, 70_000])),
        max_size=10,
    )
)
def test_frames_of_heads_and_bodies_are_the_frames_of_each_pair_joined(
    sizes: list[tuple[int, int]],
) -> None:
    """text_frames_of(heads, bodies) is text_frames of each head + body, whatever the sizes."""
    heads = [b"h" * head for head, _ in sizes]
    bodies = [b"b" * body for _, body in sizes]
    whole = [head + body for head, body in zip(heads, bodies, strict=True)]
    assert text_frames_of(heads, bodies) == text_frames(whole)


def test_frame_headers_of_more_sizes_than_are_kept_are_still_made() -> None:
    """Past the sizes whose headers are kept, a header is made for the frame anyway."""
    payloads = [b"z" * size for size in range(126, 126 + 5000)]
    made = b"".join(Frame(Opcode.TEXT, p).serialize(mask=False) for p in payloads)
    assert text_frames(payloads) == made


def test_frame_buffers_join_small_frames_and_pass_large_payloads_as_they_are() -> None:
    """Small frames go out joined; a payload of 64 KiB or more is its own buffer, the very
    object (never copied)."""
    small, large = b'{"a":1}', b"y" * 65536
    buffers = frame_buffers([small, small, large, small])
    assert len(buffers) == 3
    assert buffers[1] is large
    assert b"".join(buffers) == b"".join(
        Frame(Opcode.TEXT, p).serialize(mask=False) for p in (small, small, large, small)
    )


@pytest.mark.parametrize("size", SIZES)
async def test_a_servers_text_frames_reach_the_client_whole(size: int) -> None:
    """Frames TextFrames makes on a server's socket are read by websockets as sent."""
    payloads = [b'{"n":"' + b"z" * size + b'"}', b"{}"]
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        await TextFrames(conn).send_frames(payloads)
        assert [await client.recv() for _ in payloads] == [p.decode() for p in payloads]


# -- frames as the relay receives them --------------------------------------------------

EMOJI_TEXT = "\U0001f389" + "a" * UTF8_PIECE + "\u00e9\u2713"  # over one piece, not ASCII


@pytest.mark.parametrize(
    "message",
    ['{"id":1}', "", '{"t":"h\u00e9llo \u2713 \U0001f389"}', EMOJI_TEXT],
    ids=["ascii", "empty", "non-ascii", "large-non-ascii"],
)
async def test_receiver_gives_a_text_message_as_its_utf8_bytes(message: str) -> None:
    """A text message comes as the bytes the client encoded, never decoded to a str."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        await client.send(message)
        received = await Receiver(conn)()
    assert received.__class__ is bytes
    assert received == message.encode()


async def test_receiver_gives_a_binary_message_as_its_size() -> None:
    """A binary message is only its size (the relay forwards none)."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        await client.send(b"\x00\x01\x02")
        assert await Receiver(conn)() == Binary(3)


async def test_receiver_takes_a_fragmented_message_whole() -> None:
    """A message sent in fragments comes as one, in order after the others."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        receive = Receiver(conn)
        await client.send(['{"a":', '"\u00e9"', "}"])
        await client.send([b"\x00", b"\x01"])
        await client.send("{}")
        assert [await receive() for _ in range(3)] == [
            '{"a":"\u00e9"}'.encode(),
            Binary(2),
            b"{}",
        ]


async def test_take_gives_the_text_messages_received_already_and_leaves_the_rest() -> None:
    """take() gives the whole text messages received already, in order, without waiting;
    None when none has come, or when the next is of another kind (awaited, it comes)."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        receive, waiting = Receiver(conn), frames_waiting(conn)
        assert waiting is not None
        assert receive.take() is None
        for message in ("{}", '{"a":"\u00e9"}', b"\x00"):
            await client.send(message)
        await until(lambda: waiting() == 3)
        assert receive.take() == b"{}"
        assert receive.take() == '{"a":"\u00e9"}'.encode()
        assert receive.take() is None
        assert await receive() == Binary(1)
        assert receive.take() is None


async def test_taking_messages_resumes_a_socket_paused_with_its_queue_full() -> None:
    """A flood that filled websockets' queue (it paused the socket's reading) comes whole
    and in order when its messages are taken with take(): the reading resumes."""
    async with socket_pair() as (conn, client), asyncio.timeout(10):
        receive, waiting = Receiver(conn), frames_waiting(conn)
        assert waiting is not None
        sent = [b'{"n":%d,"pad":"%b"}' % (n, b"x" * 2000) for n in range(500)]  # 1 MB
        sending = asyncio.create_task(TextFrames(client).send_frames(sent))
        await until(lambda: waiting() >= 16)  # websockets' default queue: 16 frames
        got: list[Received] = []
        while len(got) < len(sent):
            got.append(receive.take() or await receive())
        await sending
        assert got == sent


async def test_websockets_lets_go_of_a_received_message() -> None:
    """Once received, a message is held by its receiver alone: websockets' parser, which
    keeps the last frame it made until the next one, no longer holds its payload."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        await client.send('{"big":"' + "x" * 100_000 + '"}')
        received = await Receiver(conn)()
        assert sys.getrefcount(received) == 2  # ``received`` and getrefcount's argument


@pytest.mark.parametrize(
    "payload",
    [b'{"a":"\xff"}', b"a" * UTF8_PIECE + b"\xe2\x9c", b"\xc3\xa9" * UTF8_PIECE + b"\xc3"],
    ids=["small", "cut-at-a-piece", "truncated-at-the-end"],
)
async def test_receiver_closes_1007_on_invalid_utf8(payload: bytes) -> None:
    """A text frame that is not UTF-8 closes the socket with 1007, however large."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        await client.send(payload, text=True)
        with pytest.raises(ConnectionClosed):
            await Receiver(conn)()
        await client.wait_closed()
    assert client.close_code == 1007


@pytest.mark.parametrize(
    "message", ["x" * 101, ["x" * 60, "x" * 41]], ids=["one frame", "fragments"]
)
async def test_a_socket_limited_takes_messages_up_to_its_limit_and_closes_1009_past_it(
    message: str | list[str],
) -> None:
    """A socket's own limit, below the server's: a message of the limit comes through; one
    byte more, in one frame or across fragments, closes the socket with 1009."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        limit_messages(conn, 100)
        await client.send("y" * 100)
        assert await Receiver(conn)() == b"y" * 100
        await client.send(message)
        with pytest.raises(ConnectionClosed):
            await Receiver(conn)()
        await client.wait_closed()
    assert client.close_code == 1009
    assert client.close_reason is not None
    assert client.close_reason.endswith("exceeds limit of 100 bytes")


async def test_receiver_raises_connection_closed_once_the_peer_closes() -> None:
    """A receive waiting when the client closes ends with ConnectionClosed."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        receiving = asyncio.create_task(Receiver(conn)())
        await asyncio.sleep(0)
        await client.close()
        with pytest.raises(ConnectionClosed):
            await receiving


async def test_receiver_cancelled_while_waiting_loses_nothing() -> None:
    """A receive cancelled while it waits leaves the socket as it was: the next one gets the
    next message."""
    async with socket_pair() as (conn, client), asyncio.timeout(5):
        receive = Receiver(conn)
        waiting = asyncio.create_task(receive())
        await asyncio.sleep(0)
        waiting.cancel()
        with suppress(asyncio.CancelledError):
            await waiting
        await client.send("{}")
        assert await receive() == b"{}"


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=9))
def test_is_utf8_agrees_with_decoding_whatever_the_piece(data: bytes, piece: int) -> None:
    """Piece by piece or whole, the answer is the one decoding gives."""
    try:
        data.decode()
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert is_utf8(data, piece) is valid


@given(st.text(max_size=40), st.integers(min_value=1, max_value=9))
def test_is_utf8_takes_every_text(text: str, piece: int) -> None:
    """Any text encoded as UTF-8 is valid, cut into pieces anywhere (surrogates aside)."""
    data = text.encode("utf-8", "replace")
    assert is_utf8(data, piece)
