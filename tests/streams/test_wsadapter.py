"""relay.streams.wsadapter: what the relay takes from websockets' internals, on real sockets."""

from __future__ import annotations

import asyncio
from contextlib import suppress

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from relay.streams.wsadapter import SocketEnd, TextFrames, frames_waiting, socket_end, stall_timeout
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
