"""The listening socket bound before the server loads (relay.server.http.listener), on real
sockets."""

from __future__ import annotations

import asyncio
import socket

import pytest

from relay.config.errors import UsageError
from relay.server.http.listener import bind_early
from relay.server.serving import Relay
from tests.support.http import http_get
from tests.support.live import relay_config


def test_an_ip_address_is_bound_and_takes_connections_at_once() -> None:
    """127.0.0.1 port 0: a listening, non-blocking socket that a client can connect to
    before anything accepts."""
    sock = bind_early("127.0.0.1", 0)
    assert sock is not None
    with sock, socket.create_connection(sock.getsockname(), timeout=5):
        assert (sock.family, sock.getblocking()) == (socket.AF_INET, False)


def test_accepted_sockets_send_small_writes_at_once() -> None:
    """Sockets accepted from the early socket have Nagle off (TCP_NODELAY), also on
    asyncio's own loop (uvloop sets it on any TCP socket, asyncio only on IPPROTO_TCP ones)."""
    sock = bind_early("127.0.0.1", 0)
    assert sock is not None

    async def accepted_nodelay() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_client(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            raw = writer.get_extra_info("socket")
            accepted.set_result(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        async with await asyncio.start_server(on_client, sock=sock):
            _, writer = await asyncio.open_connection(*sock.getsockname())
            async with asyncio.timeout(5):
                nodelay = await accepted
            writer.close()
            return nodelay

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        assert runner.run(accepted_nodelay()) != 0


def test_an_ipv6_address_is_bound_for_ipv6_only() -> None:
    """[::1]: an IPv6 socket with IPV6_V6ONLY set, as asyncio's create_server sets it."""
    try:
        sock = bind_early("::1", 0)
    except UsageError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    assert sock is not None
    with sock:
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1


def test_a_host_with_several_addresses_is_left_to_the_server() -> None:
    """A name that resolves to more than one address is not bound early (None); one that
    resolves to one address is."""
    found = socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sock = bind_early("localhost", 0)
    several = len({(family, address) for family, _, _, _, address in found}) > 1
    assert (sock is None) == several
    if sock is not None:
        sock.close()


def test_an_address_in_use_is_a_usage_error_naming_the_flag() -> None:
    """A port already taken stops start-up with exit 2, says which address and flag, what
    may hold it and how to take any free port."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(UsageError) as caught:
            bind_early("127.0.0.1", port)
    assert str(caught.value) == (
        f"cannot listen on 127.0.0.1:{port} (--listen): Address already in use: another relay "
        "or program holds it (stop it, or take any free port with --listen 127.0.0.1:0)"
    )


async def test_a_client_that_connected_early_is_answered_once_the_relay_runs() -> None:
    """A connection made to the early socket before the relay starts waits in the backlog
    and gets its answer; the relay serves on that socket's port."""
    sock = bind_early("127.0.0.1", 0)
    assert sock is not None
    port = sock.getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    relay = Relay(relay_config(("cat",)))
    await relay.start(sock)
    try:
        async with asyncio.timeout(5):
            answer = await reader.read()
        again = await http_get(port, "/healthz")
        serving = relay.port
    finally:
        writer.close()
        await relay.shutdown()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert (serving, again.status) == (port, 200)
