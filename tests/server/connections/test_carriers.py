"""relay.server.connections.carriers, the replay window (resume profile): a live relay, real agents,
and a network a proxy cuts on purpose."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress

import pytest
from structlog.testing import capture_logs
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from relay.core.resumeprofile import NO_CONNECTION, PROFILE
from relay.server.connections.carriers import ACK_DELAY
from tests.support.agents import ECHO_AGENT, LONG_LINES, READ_AHEAD, STREAM
from tests.support.figures import record
from tests.support.live import LiveRelay, live_relay, make_ticket, until_detached, until_idle
from tests.support.netcut import NetCut
from tests.support.processes import bytes_written, children_of, fd_count, pid_alive
from tests.support.resume import Record, ResumeClient, ResumeState, first_frame
from tests.support.sockets import closed_with
from tests.support.waiting import until, until_steady

KiB = 1024


def stream(count: int, delay: float = 0.0) -> tuple[str, ...]:
    return (*STREAM, str(count), str(delay))


def index(line: bytes) -> int:
    return int(json.loads(line)["params"]["i"])


async def records(client: ResumeClient, count: int) -> list[Record]:
    """The next ``count`` records (control frames skipped)."""
    got: list[Record] = []
    while len(got) < count:
        item = await client.record()
        if item is not None:
            got.append(item)
    return got


async def read_until_cut(
    client: ResumeClient, got: list[bytes], after: int, cut: Callable[[], None]
) -> None:
    """Read records into ``got``, acking now and then; cut the network after ``after`` of them."""
    try:
        while True:
            item = await client.record()
            if item is None:
                continue
            got.append(item[1])
            if len(got) % 500 == 0:
                await client.ack()
            if len(got) == after:
                cut()
    except ConnectionClosed:
        return


async def read_rest(client: ResumeClient, got: list[bytes], total: int) -> None:
    while len(got) < total:
        item = await client.record()
        if item is not None:
            got.append(item[1])
            if len(got) % 500 == 0:
                await client.ack()


async def read_all(client: ResumeClient) -> None:
    """Read every frame, acknowledging none, until the socket closes."""
    with suppress(ConnectionClosed):
        while True:
            await client.ws.recv()


def resumable(live: LiveRelay) -> str:
    return live.url(make_ticket())


# -- the profile ------------------------------------------------------------------------


async def test_open_welcomes_and_carries_numbered_messages() -> None:
    """An opened connection is welcomed with its id, secret and limits; records are numbered."""
    async with live_relay(ECHO_AGENT, resume_grace=30, resume_buffer=64 * KiB) as live:
        client = await ResumeClient.open(resumable(live))
        welcome = client.state.welcome
        assert client.ws.subprotocol == PROFILE
        assert (welcome["resumed"], welcome["received"], welcome["next"]) == (False, 0, 1)
        assert (welcome["grace"], welcome["window"], welcome["last"]) == (30, 64 * KiB, 0)
        assert len(welcome["secret"]) >= 40
        assert client.ws.response is not None
        assert welcome["connection"] == client.ws.response.headers["Acp-Connection-Id"]
        for i in range(3):
            await client.send(b'{"jsonrpc":"2.0","method":"x","params":{"i":%d}}' % i)
        async with asyncio.timeout(5):
            got = await records(client, 3)
        assert got == [
            (i + 1, b'{"jsonrpc":"2.0","method":"x","params":{"i":%d}}' % i) for i in range(3)
        ]
        await client.close()


async def test_a_silent_agent_still_gets_deliveries_acknowledged_soon() -> None:
    """With nothing to ride on, the relay acknowledges deliveries alone, within ACK_DELAY
    of the first one, even while the client keeps sending."""
    silent = (sys.executable, "-c", "import sys\nfor _ in sys.stdin.buffer: pass")
    async with live_relay(silent, resume_grace=30) as live:
        client = await ResumeClient.open(resumable(live))
        started = time.monotonic()
        for i in range(10):  # never a pause of ACK_DELAY
            await client.send(b'{"jsonrpc":"2.0","method":"x","params":{"i":%d}}' % i)
            await asyncio.sleep(ACK_DELAY * 0.4)
        sent_all = time.monotonic() - started
        async with asyncio.timeout(5):
            assert await client.record() is None  # an ack alone, no record
        # asyncio may end a sleep up to its clock's resolution early: the premise is only
        # that sending went on for several ACK_DELAYs
        assert sent_all >= 3 * ACK_DELAY
        assert 0 < len(client.state.unacked) < 10, "the first ack came while sending went on"
        await client.close()


async def test_a_client_without_the_profile_gets_the_plain_pipe() -> None:
    """No subprotocol offered: frames pass as they are, no envelope, no welcome."""
    async with live_relay(ECHO_AGENT) as live, connect(resumable(live)) as ws:
        assert ws.subprotocol is None
        await ws.send('{"id":1}')
        async with asyncio.timeout(5):
            assert await ws.recv() == '{"id":1}'


async def test_resume_grace_zero_turns_the_profile_off() -> None:
    """With --resume-grace 0 acp.v1 is selected over the profile: the client knows not to resume."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=0) as live,
        connect(resumable(live), subprotocols=[PROFILE, "acp.v1"]) as ws,  # type: ignore[list-item]
    ):
        assert ws.subprotocol == "acp.v1"
        await ws.send('{"id":1}')
        async with asyncio.timeout(5):
            assert await ws.recv() == '{"id":1}'  # the plain pipe: no envelope


# -- cuts -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("how", ["reset", "silent drop"])
async def test_stream_cut_midway_arrives_exactly_once_in_order(how: str) -> None:
    """20,000 records cut mid-way by a reset or a silent drop: each once, in order, same agent."""
    total = 20_000
    relay = live_relay(stream(total, 0.001), resume_grace=30, ping_interval=0.2, ping_timeout=0.3)
    async with relay as live, NetCut(live.relay.port) as net:
        got: list[bytes] = []
        client = await ResumeClient.open(
            net.url() + "?ticket=" + make_ticket(), ping_interval=0.2, ping_timeout=0.3
        )
        cut = net.reset if how == "reset" else net.blackhole
        async with asyncio.timeout(30):
            await read_until_cut(client, got, total // 3, cut)
            await until(lambda: live.relay.busy_report()["detached"] == 1)
            again = await ResumeClient.open(resumable(live), client.state)
            assert again.state.welcome["resumed"] is True
            await read_rest(again, got, total)
        assert [index(line) for line in got] == list(range(total))
        assert len({json.loads(line)["params"]["pid"] for line in got}) == 1
        await again.close()


async def test_resume_welcome_names_the_backlog() -> None:
    """A resume's welcome says which records wait for the client: ``next`` to ``last``; the
    connection's close line then names the last socket's close (1000), not the first's."""
    relay = live_relay(ECHO_AGENT, resume_grace=30)
    async with relay as live, NetCut(live.relay.port) as net:
        client = await ResumeClient.open(net.url() + "?ticket=" + make_ticket())
        for i in range(3):
            await client.send(b'{"id":%d}' % i)
        async with asyncio.timeout(5):
            await records(client, 1)  # records 2 and 3 stay unread: the client lacks them
            net.reset()
            await until_detached(live)
            again = await ResumeClient.open(resumable(live), client.state)
        assert (again.state.welcome["next"], again.state.welcome["last"]) == (2, 3)
        async with asyncio.timeout(5):
            assert await records(again, 2) == [(2, b'{"id":1}'), (3, b'{"id":2}')]
        with capture_logs() as events:
            await again.close()
            await until_idle(live.relay)
    [closed] = [e for e in events if e["event"] == "connection closed"]
    assert closed["close_code"] == 1000


async def test_request_written_during_the_outage_is_delivered_once() -> None:
    """A message sent into a dead socket, and one queued while away, each reach the agent once."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live, NetCut(live.relay.port) as net:
        client = await ResumeClient.open(net.url() + "?ticket=" + make_ticket())
        await client.send(b'{"id":1}')
        async with asyncio.timeout(5):
            assert await records(client, 1) == [(1, b'{"id":1}')]
        net.blackhole()
        await client.send(b'{"id":2}')  # may or may not have reached the relay
        net.reset()
        client.state.sent += 1  # written by the editor while no socket was up
        client.state.unacked[client.state.sent] = b'{"id":3}'
        await until(lambda: live.relay.busy_report()["detached"] == 1)
        again = await ResumeClient.open(resumable(live), client.state)
        async with asyncio.timeout(5):
            got = await records(again, 2)
            await again.ack()
        assert [line for _, line in got] == [b'{"id":2}', b'{"id":3}']
        await again.send(b'{"id":4}')
        async with asyncio.timeout(5):
            assert [line for _, line in await records(again, 1)] == [b'{"id":4}']
        await again.close()


async def test_outage_past_the_grace_ends_the_connection_and_its_agent() -> None:
    """Past the grace the agent is stopped, and a resume gets the same 'no longer' refusal."""
    async with live_relay(stream(1), resume_grace=0.5, kill_grace=0.3) as live:
        async with NetCut(live.relay.port) as net:
            client = await ResumeClient.open(net.url() + "?ticket=" + make_ticket())
            async with asyncio.timeout(5):
                [(_, line)] = await records(client, 1)
            pid = json.loads(line)["params"]["pid"]
            net.reset()
        await until(lambda: not pid_alive(pid), seconds=5)
        await until_idle(live.relay)  # the connection is forgotten just after its agent
        with pytest.raises(ConnectionClosed):
            await ResumeClient.open(resumable(live), client.state)
        assert await refusal(live, client.state) == (4404, NO_CONNECTION)


async def test_clean_close_ends_the_connection_at_once() -> None:
    """A client closing with 1000 means done: the agent goes now, not after the grace."""
    async with live_relay(stream(1), resume_grace=60, kill_grace=0.3) as live:
        client = await ResumeClient.open(resumable(live))
        async with asyncio.timeout(5):
            [(_, line)] = await records(client, 1)
        await client.close(1000)
        await until(lambda: not pid_alive(json.loads(line)["params"]["pid"]), seconds=3)
        await until(lambda: not live.relay.connections, seconds=3)


async def test_going_away_1001_detaches() -> None:
    """A browser leaving with 1001 may come back: the connection waits, the agent runs."""
    async with live_relay(stream(1), resume_grace=60) as live:
        client = await ResumeClient.open(resumable(live))
        async with asyncio.timeout(5):
            [(_, line)] = await records(client, 1)
        await client.close(1001)
        await until(lambda: live.relay.busy_report()["detached"] == 1)
        report = live.relay.busy_report()
        assert (report["busy"], report["connections"]) == (True, 1)
        assert pid_alive(json.loads(line)["params"]["pid"])


# -- who may resume ---------------------------------------------------------------------


async def closed(receive: Callable[[], Awaitable[object]]) -> None:
    """Receive until the socket closes (callers bound the wait)."""
    with suppress(ConnectionClosed):
        while True:
            await receive()


async def refusal(
    live: LiveRelay, state: ResumeState, subject: str = "tester"
) -> tuple[int | None, str | None]:
    """Try to resume ``state`` with a fresh ticket; the close code and reason it got."""
    url = live.url(make_ticket(subject=subject))
    ws = await connect(url, subprotocols=[PROFILE])  # type: ignore[list-item]
    await ws.send(first_frame(state))
    return await closed_with(ws, seconds=5)


async def detached_connection(live: LiveRelay) -> ResumeState:
    client = await ResumeClient.open(resumable(live))
    state = client.state
    await client.close(1001)
    await until(lambda: live.relay.busy_report()["detached"] == 1)
    return state


async def test_wrong_secret_other_subject_and_unknown_connection_get_one_answer() -> None:
    """A probe learns nothing: every refusal is the same close code and words."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live:
        state = await detached_connection(live)
        wrong = ResumeState(state.connection, "x" * 43)
        unknown = ResumeState("no-such-connection", state.secret)
        assert await refusal(live, wrong) == (4404, NO_CONNECTION)
        assert await refusal(live, state, subject="mallory") == (4404, NO_CONNECTION)
        assert await refusal(live, unknown) == (4404, NO_CONNECTION)
        again = await ResumeClient.open(resumable(live), state)  # the owner still can
        assert again.state.welcome["resumed"] is True
        await again.close()


async def test_a_used_ticket_cannot_resume() -> None:
    """Resuming needs a fresh ticket: a replayed one is refused before the upgrade."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live:
        ticket = make_ticket()
        client = await ResumeClient.open(live.url(ticket))
        await client.close(1001)
        with pytest.raises(InvalidStatus) as caught:
            await ResumeClient.open(live.url(ticket), client.state)
        assert caught.value.response.status_code == 401


async def test_the_secret_rotates_at_each_resume() -> None:
    """The secret of one socket cannot resume twice: each resume hands out a new one."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live:
        state = await detached_connection(live)
        old = ResumeState(state.connection, state.secret)
        again = await ResumeClient.open(resumable(live), state)
        assert state.secret != old.secret
        await again.close(1001)
        await until(lambda: live.relay.busy_report()["detached"] == 1)
        assert await refusal(live, old) == (4404, NO_CONNECTION)


async def test_two_resumes_at_once_exactly_one_wins() -> None:
    """Two sockets resuming the same connection together: one is welcomed, one refused."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live:
        state = await detached_connection(live)
        copy = ResumeState(state.connection, state.secret)
        results = await asyncio.gather(
            ResumeClient.open(resumable(live), state),
            ResumeClient.open(resumable(live), copy),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, ResumeClient)]
        losers = [r for r in results if isinstance(r, ConnectionClosed)]
        assert (len(winners), len(losers)) == (1, 1)
        assert losers[0].rcvd is not None
        assert (losers[0].rcvd.code, losers[0].rcvd.reason) == (4404, NO_CONNECTION)
        await winners[0].close()


async def test_resume_fences_the_older_socket() -> None:
    """A resume while the old socket still looks alive closes the old one, saying why."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live, NetCut(live.relay.port) as net:
        client = await ResumeClient.open(net.url() + "?ticket=" + make_ticket())
        net.blackhole()  # the relay cannot tell yet: the old socket stays attached
        again = await ResumeClient.open(resumable(live), client.state)
        net.restore()
        async with asyncio.timeout(5):
            await closed(client.record)
        assert (client.ws.close_code, client.ws.close_reason) == (
            4001,
            "superseded: the connection was resumed on another socket",
        )
        await again.send(b'{"id":1}')
        async with asyncio.timeout(5):
            assert [line for _, line in await records(again, 1)] == [b'{"id":1}']
        await again.close()


async def test_first_frame_must_be_open_or_resume() -> None:
    """A socket of the profile that starts with anything else is closed 1002, saying why."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live:
        async with connect(resumable(live), subprotocols=[PROFILE]) as ws:  # type: ignore[list-item]
            await ws.send('{"jsonrpc":"2.0","id":1,"method":"initialize"}')
            async with asyncio.timeout(5):
                with pytest.raises(ConnectionClosed):
                    await ws.recv()
        assert ws.close_code == 1002
        assert "first frame must be" in (ws.close_reason or "")
        assert not live.relay.connections


# -- bounded ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_full_window_pauses_the_agent_instead_of_losing_output() -> None:
    """A client that never acks fills the window; the agent then waits, and nothing is lost."""
    total, window = 20_000, 64 * KiB
    async with live_relay(stream(total), resume_grace=30, resume_buffer=window) as live:
        client = await ResumeClient.open(resumable(live))
        [connection] = live.relay.connections.values()
        got = [line for _, line in await records(client, 100)]
        await until(lambda: not connection.carrier.outbox.has_room())  # type: ignore[attr-defined]
        kept = connection.carrier.outbox.size  # type: ignore[attr-defined]
        await asyncio.sleep(0.3)  # the behaviour under test: the agent waits, adding nothing
        assert connection.carrier.outbox.size == kept  # type: ignore[attr-defined]
        assert window <= kept < window + 100  # the limit, plus one line at most
        async with asyncio.timeout(30):
            await read_rest(client, got, total)
        assert [index(line) for line in got] == list(range(total))
        await client.close()


async def test_lines_longer_than_the_window_are_not_read_ahead() -> None:
    """Lines longer than the whole window: it keeps one, and the next waits in the agent's
    pipe instead of being assembled beside the window; each comes once room is made."""
    size, window = 2 << 20, 256 * KiB
    agent = (*LONG_LINES, "3", str(size))
    async with live_relay(agent, resume_grace=30, resume_buffer=window) as live:
        state = ResumeState()
        client = await ResumeClient.open(resumable(live), state)
        [connection] = live.relay.connections.values()
        client.ws.transport.abort()  # detached: nothing is acknowledged
        assert await until_detached(live)
        agent_pid = connection.agent.pid  # type: ignore[union-attr]
        written = await until_steady(lambda: bytes_written(agent_pid), interval=0.3)
        outbox = connection.carrier.outbox  # type: ignore[attr-defined]
        assert (len(outbox), outbox.size) == (1, size - 1)
        assert written - size <= READ_AHEAD  # not the next line: at most what the pipe holds
        client = await ResumeClient.open(resumable(live), state)
        got: list[bytes] = []
        async with asyncio.timeout(10):
            while len(got) < 3:
                got += [line for _, line in await records(client, 1)]
                await client.ack()
        assert [len(line) for line in got] == [size - 1] * 3
        await client.close()


async def test_relay_replies_wait_for_room_too() -> None:
    """A client that draws refusals and reads them but never acknowledges cannot grow the
    window past its limit and the replies' allowance: the relay stops reading it instead."""
    window = 64 * KiB
    async with live_relay(ECHO_AGENT, resume_grace=30, resume_buffer=window) as live:
        client = await ResumeClient.open(resumable(live))
        [connection] = live.relay.connections.values()
        carrier = connection.carrier
        reading = asyncio.create_task(read_all(client))
        with suppress(TimeoutError):
            async with asyncio.timeout(5):  # sends block once the relay stops reading
                for seq in range(1, 4001):  # each a -32700 reply: 4000 of them, over 1 MiB
                    await client.ws.send(b'{"seq":%d}\n{\n' % seq, text=True)
        most = window + carrier.reply_allowance  # type: ignore[attr-defined]
        await until(lambda: carrier.outbox.size >= most)  # type: ignore[attr-defined]
        kept = carrier.outbox.size  # type: ignore[attr-defined]
        delivered = carrier.session.delivered  # type: ignore[attr-defined]
        await asyncio.sleep(0.3)  # the behaviour under test: nothing more is read
        assert carrier.outbox.size == kept  # type: ignore[attr-defined]
        assert carrier.session.delivered == delivered < 4000  # type: ignore[attr-defined]
        assert kept < most + 1024  # the limit and the allowance, plus one reply at most
        reading.cancel()
        client.ws.transport.abort()


async def test_shutdown_ends_detached_connections_too() -> None:
    """A relay shutting down stops the agents of detached connections as well."""
    async with live_relay(stream(1), resume_grace=60, kill_grace=0.3) as live:
        client = await ResumeClient.open(resumable(live))
        async with asyncio.timeout(5):
            [(_, line)] = await records(client, 1)
        await client.close(1001)
        await until(lambda: live.relay.busy_report()["detached"] == 1)
        pid = json.loads(line)["params"]["pid"]
        async with asyncio.timeout(5):
            await live.relay.shutdown()
        assert not pid_alive(pid)
        assert not live.relay.connections


# -- soak --------------------------------------------------------------------------------


@pytest.mark.soak
@pytest.mark.timeout(600)
async def test_soak_200_random_cuts_lose_and_double_nothing() -> None:
    """200 random cuts (resets, silent drops) over 800,000 records: each once, in order, no leak."""
    rng = random.Random(12)
    cuts, total = 200, 800_000
    relay = live_relay(stream(total, 0.0005), resume_grace=30, ping_interval=0.2, ping_timeout=0.3)
    started = time.monotonic()
    async with relay as live, NetCut(live.relay.port) as net:
        # A first connection, closed cleanly: what the loop opens once and keeps (uvloop's
        # libuv holds a /dev/null descriptor from the first pipe it watches) is then in the
        # baseline, and what the cuts leave behind is not.
        warm_up = await ResumeClient.open(net.url() + "?ticket=" + make_ticket())
        async with asyncio.timeout(5):
            await records(warm_up, 1)
        await warm_up.close()
        await until(lambda: not live.relay.connections and not children_of(os.getpid()))
        before = fd_count(os.getpid()), len(asyncio.all_tasks())
        got: list[bytes] = []
        state = ResumeState()
        done = 0
        for _ in range(cuts):
            if len(got) > total - 2000:
                break  # the stream is nearly over: no room left for a cut
            done += 1
            client = await ResumeClient.open(
                net.url() + "?ticket=" + make_ticket(),
                state,
                ping_interval=0.2,
                ping_timeout=0.3,
                close_timeout=0.5,  # a silent drop is noticed at ping timeout + this
            )
            how = net.reset if rng.random() < 0.8 else net.blackhole
            async with asyncio.timeout(30):
                stop_at = len(got) + rng.randint(20, 800)
                await read_until_cut(client, got, stop_at, how)
                await until(lambda: live.relay.busy_report()["detached"] == 1)
            net.restore()
        unplanned = 0  # drops the relay made itself: keepalive or stall timeouts under load
        async with asyncio.timeout(240):
            while True:
                last = await ResumeClient.open(
                    resumable(live), state, ping_interval=0.2, ping_timeout=0.3, close_timeout=0.5
                )
                try:
                    await read_rest(last, got, total)
                    break
                except ConnectionClosed:
                    unplanned += 1  # as a real client does: resume again
                    await last.ws.close()  # its socket let go now, not at a timeout
                    await until(lambda: live.relay.busy_report()["detached"] == 1)
        await last.close()
        await until(lambda: not live.relay.connections)
        await until(lambda: not children_of(os.getpid()))
        await until(lambda: fd_count(os.getpid()) <= before[0])  # closed sockets are let go
        after = fd_count(os.getpid()), len(asyncio.all_tasks())
    assert [index(line) for line in got] == list(range(total))
    assert done == cuts
    record(
        "resume soak, 200 random cuts",
        cuts=cuts,
        unplanned_drops=unplanned,
        records=total,
        seconds=round(time.monotonic() - started, 1),
        fds_before=before[0],
        fds_after=after[0],
        tasks_before=before[1],
        tasks_after=after[1],
    )
    assert after[0] <= before[0]
    assert after[1] <= before[1]
