"""relay.client.link.resuming: ``acp-relay connect`` resuming through a network a proxy cuts, and
against a hostile relay of the test's own (:func:`tests.support.servers.hostile_relay`)."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import sys
import time
from collections.abc import Awaitable
from typing import Any

import pytest

from relay.client.editor.bridge import ANSWER_WAIT_SECONDS
from relay.client.link.resuming import MAX_KEPT_MESSAGES
from relay.core.resumeprofile import CANNOT_RESUME
from tests.support.agents import AGENTS, ECHO_AGENT, STREAM, STUBBORN
from tests.support.connect import (
    TICKET_COMMAND,
    Editor,
    ask_then_leave,
    closed_by_connect,
    editor,
    failures_logged,
    log_records,
    notification,
    request,
)
from tests.support.env import connect_env
from tests.support.live import live_relay, make_ticket, until_detached, until_idle
from tests.support.netcut import NetCut
from tests.support.servers import Behaviour, HostileSocket, hostile_relay
from tests.support.waiting import until, until_gone

FAST = ("--ping-interval", "0.2", "--ping-timeout", "0.3", "--open-timeout", "2")
REFRESHABLE = ("--ticket-command", TICKET_COMMAND, *FAST)


async def lines(ed: Editor, count: int) -> list[bytes]:
    return [await ed.receive_line() for _ in range(count)]


def index(line: bytes) -> int:
    return int(json.loads(line)["params"]["i"])


@pytest.mark.slow
async def test_a_reset_mid_stream_is_a_pause_for_the_editor() -> None:
    """20,000 lines cut by a reset mid-way: the editor reads each once, in order, same agent."""
    total = 20_000
    async with (
        live_relay((*STREAM, str(total), "0.001"), resume_grace=30) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        got = await lines(ed, total // 3)
        net.reset()
        got += await lines(ed, total - len(got))
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    events = [r["event"] for r in log_records(bytes(ed.stderr))]
    assert [index(line) for line in got] == list(range(total))
    assert len({json.loads(line)["params"]["pid"] for line in got}) == 1
    assert "lost the relay, resuming" in events
    assert "resumed" in events


@pytest.mark.slow
async def test_a_silent_drop_is_noticed_and_resumed() -> None:
    """Packets vanish (no reset): heartbeats notice, connect resumes, nothing is lost."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=30, ping_interval=0.2, ping_timeout=0.3) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        await ed.send(notification(1))
        assert (await ed.receive())["params"]["n"] == 1
        net.blackhole()
        await until_detached(live)
        net.restore()
        await ed.send(notification(2))
        assert (await ed.receive())["params"]["n"] == 2
        await ed.close_stdin()
        assert await ed.exit_status() == 0


async def test_attempts_reset_during_the_handshake_are_retried() -> None:
    """While a proxy closes every new connection at once, connect keeps trying, then resumes."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=30) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        await ed.send(notification(1))
        assert (await ed.receive())["params"]["n"] == 1
        net.refusing = True
        net.reset()
        await until_detached(live)
        await asyncio.sleep(0.5)  # the outage under test: attempts meanwhile are closed
        net.refusing = False
        await ed.send(notification(2))
        assert (await ed.receive())["params"]["n"] == 2
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    assert "resumed" in [r["event"] for r in log_records(bytes(ed.stderr))]


@pytest.mark.slow
async def test_requests_written_during_the_outage_are_delivered_once() -> None:
    """What the editor writes while the relay is away reaches the agent once, after the resume."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=30) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        await ed.send(notification(1))
        assert (await ed.receive())["params"]["n"] == 1
        net.blackhole()
        for i in (2, 3, 4):
            await ed.send(notification(i))
        net.reset()
        got = [(await ed.receive())["params"]["n"] for _ in range(3)]
        await ed.send(notification(5))
        got.append((await ed.receive())["params"]["n"])
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    assert got == [2, 3, 4, 5]


@pytest.mark.slow
async def test_an_outage_past_the_grace_answers_the_editor_and_ends_the_agent() -> None:
    """Past the grace the editor's requests get an error saying so; the agent is gone."""
    relay = live_relay(
        (*STREAM, "1"), resume_grace=1, kill_grace=0.3, ping_interval=0.2, ping_timeout=0.3
    )
    async with relay as live:
        net = NetCut(live.relay.port)
        await net.__aenter__()
        url = net.url()
        async with editor(url, *REFRESHABLE, env=connect_env()) as ed:
            pid = json.loads(await ed.receive_line())["params"]["pid"]
            net.blackhole()
            await ed.send(request(7, "session/prompt"))
            await until_detached(live)
            await net.__aexit__()  # nothing listens there any more: every retry fails
            error = await ed.receive()
            await ed.close_stdin()
            assert await ed.exit_status() == 1
        await until_gone([pid], seconds=5)
    assert error["id"] == 7
    message = error["error"]["message"]
    assert message.startswith(f"lost the relay at {url} at ")
    assert "could not resume within 1 s" in message
    assert error["error"]["data"]["cause"] == "resume"


@pytest.mark.slow
async def test_stdin_eof_ends_the_connection_at_once() -> None:
    """The editor closing stdin is a clean 1000: the relay keeps no detached connection."""
    async with live_relay(ECHO_AGENT, resume_grace=60) as live:
        async with editor(live.url(), *REFRESHABLE, env=connect_env()) as ed:
            await ed.send(notification(1))
            assert (await ed.receive())["params"]["n"] == 1
            assert live.relay.busy_report()["connections"] == 1
            await ed.close_stdin()
            assert await ed.exit_status() == 0
        await until_idle(live.relay)


async def test_with_a_one_off_ticket_connect_carries_plain_acp_and_says_so_once() -> None:
    """A ticket given once cannot open a second socket: no profile, and one warning on loss."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=60) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *FAST, env=connect_env(make_ticket())) as ed,
    ):
        await ed.send(request(1))
        assert (await ed.receive())["id"] == 1
        [connection] = live.relay.connections.values()
        assert type(connection).__name__ == "Connection"  # not resumable
        net.reset()
        await ed.send(request(2))
        error = await ed.receive()
        await ed.close_stdin()
        await ed.exit_status()
    warnings = [r["event"] for r in log_records(bytes(ed.stderr)) if r["level"] == "warning"]
    assert error["error"]["data"]["cause"] == "lost"
    assert sum("cannot be resumed" in w for w in warnings) == 1


ASKS = (sys.executable, str(AGENTS / "asks.py"))


@pytest.mark.slow
async def test_a_permission_request_in_flight_at_the_cut_is_answered_after_the_resume() -> None:
    """The agent asked just before the cut; the editor's answer reaches it after the resume."""
    async with (
        live_relay(ASKS, resume_grace=30) as live,
        NetCut(live.relay.port) as net,
        editor(net.url(), *REFRESHABLE, env=connect_env()) as ed,
    ):
        asked = await ed.receive()
        assert asked["method"] == "session/request_permission"
        net.reset()  # the answer is written while the relay is away
        answer = {"outcome": {"outcome": "selected", "optionId": "allow"}}
        await ed.send({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
        told = await ed.receive()
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    assert told == {"jsonrpc": "2.0", "method": "answered", "params": answer}


@pytest.mark.slow
async def test_past_the_grace_a_stubborn_agent_and_its_child_are_gone() -> None:
    """An agent ignoring EOF and SIGTERM, and its child, are killed once the grace expires."""
    relay = live_relay(
        STUBBORN, resume_grace=0.5, kill_grace=0.3, ping_interval=0.2, ping_timeout=0.3
    )
    async with relay as live:
        net = NetCut(live.relay.port)
        await net.__aenter__()
        async with editor(net.url(), *REFRESHABLE, env=connect_env()) as ed:
            _, pid, child = (await ed.receive_line()).decode().split()
            await net.__aexit__()  # the network is gone for good
            await ed.send(request(3))
            error = await ed.receive()
            await ed.close_stdin()
            await ed.exit_status()
        await until_gone([int(pid), int(child)], seconds=5)
    assert "could not resume within 0.5 s" in error["error"]["message"]


# -- a hostile or broken relay ----------------------------------------------------------------

HOSTILE = ("--ticket-command", "echo hostile-ticket", "--open-timeout", "2")
RESULT = b'{"jsonrpc":"2.0","id":1,"result":{}}'


def answers_with(frame: bytes, *, text: bool) -> Behaviour:
    """Welcome, read the editor's first message, answer it with ``frame``."""

    async def behave(sock: HostileSocket) -> None:
        await sock.welcome()
        await sock.message()
        await sock.ws.send(frame, text=text)
        await sock.ws.wait_closed()

    return behave


@pytest.mark.parametrize(
    ("frame", "text", "close", "message"),
    [
        (b'{"seq":1}\n{"jsonrpc":"2.0","id":1,"result":{"t":"\xff"}}', True,
         (1007, "invalid start byte at position 49"),
         "relay at {url} sent a text frame that is not UTF-8 (1007 invalid data: invalid start "
         "byte at position 49)"),
        (b'{"seq":1}\n' + RESULT, False, (1002, "breaks acp-relay.resume.v1: a binary frame"),
         "relay at {url} broke the protocol (1002 protocol error: breaks acp-relay.resume.v1: "
         "a binary frame)"),
    ],
    ids=["invalid-utf8", "binary"],
)  # fmt: skip
async def test_a_record_the_profile_cannot_carry_fails_the_connection_for_the_editor(
    frame: bytes, text: bool, close: tuple[int, str], message: str
) -> None:
    """Invalid UTF-8 in a record, or a record in a binary frame: connect closes (1007, 1002),
    answers the request in flight and later ones, says so once on stderr, never resumes."""
    async with (
        hostile_relay(answers_with(frame, text=text)) as relay,
        editor(relay.url(), *HOSTILE, env=connect_env()) as ed,
    ):
        answers, status = await ask_then_leave(
            ed, request(1, "initialize"), request(2, "session/new")
        )
    message = message.format(url=relay.url())
    error = closed_by_connect(relay.url(), message, *close)
    assert answers == [{"jsonrpc": "2.0", "id": i, "error": error} for i in (1, 2)]
    assert status == 1
    assert relay.closes == [close]
    assert failures_logged(ed) == [message]


def welcomes(**fields: Any) -> Behaviour:
    """Welcome with ``fields`` (a hostile grace or window), then wait."""

    async def behave(sock: HostileSocket) -> None:
        await sock.welcome(**fields)
        await sock.ws.wait_closed()

    return behave


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"grace": 1e999}, "'grace' must be a number of seconds from 0 to 604800"),
        ({"grace": -1}, "'grace' must be a number of seconds from 0 to 604800"),
        ({"grace": 604801}, "'grace' must be a number of seconds from 0 to 604800"),
        ({"window": 2**53 - 1}, "'window' must be a number of bytes from 0 to 2^40"),
    ],
    ids=["infinite-grace", "negative-grace", "grace-past-a-week", "window-past-1-tib"],
)
async def test_a_welcome_with_absurd_limits_breaks_the_profile(
    fields: dict[str, Any], why: str
) -> None:
    """An infinite, negative or oversized grace, or an oversized window: connect closes with
    1002 and answers the editor; it does not carry on over such a connection."""
    async with (
        hostile_relay(welcomes(**fields)) as relay,
        editor(relay.url(), *HOSTILE, env=connect_env()) as ed,
    ):
        [answer], status = await ask_then_leave(ed, request(1, "initialize"))
    url = relay.url()
    message = f"relay at {url} did not accept a WebSocket: {why}"
    assert answer["error"] == {
        "code": -32603,
        "message": message,
        "data": {"url": url, "cause": "handshake", "detail": why},
    }
    assert status == 1
    assert relay.closes == [(1002, f"breaks acp-relay.resume.v1: {why}")]
    assert failures_logged(ed) == [message]


async def never_welcomes(sock: HostileSocket) -> None:
    """Take the socket, never answer its open frame."""
    await sock.ws.wait_closed()


async def test_a_relay_that_never_welcomes_is_let_go_at_the_open_timeout() -> None:
    """No welcome within --open-timeout: the editor's request gets the error saying so, and
    connect lets that socket go at once rather than holding it open until it exits."""
    async with (
        hostile_relay(never_welcomes) as relay,
        editor(relay.url(), *HOSTILE[:2], "--open-timeout", "1", env=connect_env()) as ed,
    ):
        await ed.send(request(1, "initialize"))
        answer = await ed.receive()
        await until(lambda: relay.closes, "the unwelcomed socket to go while connect runs")
        await ed.close_stdin()
        assert await ed.exit_status() == 1
    why = "no welcome from the relay within --open-timeout"
    assert (answer["id"], answer["error"]["data"]["detail"]) == (1, why)
    assert relay.closes == [None]


async def resume_welcomed_with_an_infinite_grace(sock: HostileSocket) -> None:
    """The first socket is welcomed and dropped after the editor's first message; resumes
    are welcomed with an infinite grace."""
    if sock.index == 0:
        await sock.welcome()
        await sock.message()
        sock.drop()
        return
    await sock.welcome(grace=float("inf"))
    await sock.ws.wait_closed()


async def test_a_resume_welcome_that_breaks_the_profile_ends_resuming_at_once() -> None:
    """A resume answered with an absurd welcome is closed with 1002 and not tried again: the
    request in flight gets the could-not-resume error naming it."""
    async with (
        hostile_relay(resume_welcomed_with_an_infinite_grace) as relay,
        editor(relay.url(), *HOSTILE, env=connect_env()) as ed,
    ):
        [answer], status = await ask_then_leave(ed, request(1, "session/prompt"))
    why = "'grace' must be a number of seconds from 0 to 604800"
    assert answer["id"] == 1
    assert answer["error"]["data"]["cause"] == "resume"
    assert answer["error"]["message"].endswith(f"did not accept a WebSocket: {why}")
    assert status == 1
    assert relay.closes[1:] == [(1002, f"breaks acp-relay.resume.v1: {why}")]
    assert len(relay.sockets) == 2


async def plain_after_a_drop(sock: HostileSocket) -> None:
    """The first socket is welcomed and dropped after the editor's first message; the next
    ones are plain ACP (the relay no longer resumes) and wait for connect's close."""
    if sock.index == 0:
        await sock.welcome()
        await sock.message()
        sock.drop()
        return
    await sock.ws.wait_closed()


async def test_a_resume_the_relay_answers_with_plain_acp_is_closed_and_not_tried_again() -> None:
    """The relay selects acp.v1 for a resume: connect closes that socket (1000) at once, tries
    no other, and answers the request in flight with the could-not-resume error saying why."""
    async with (
        hostile_relay(plain_after_a_drop, plain_from=1) as relay,
        editor(relay.url(), *HOSTILE, env=connect_env()) as ed,
    ):
        [answer], status = await ask_then_leave(ed, request(1, "session/prompt"))
    assert answer["id"] == 1
    assert answer["error"]["data"]["cause"] == "resume"
    assert answer["error"]["message"].endswith(
        "did not accept a WebSocket: the relay does not offer resuming (acp.v1 selected)"
    )
    assert status == 1
    assert relay.closes == [None, (1000, "")]


async def keeps_every_message_then_refuses_resumes(sock: HostileSocket) -> None:
    """The first socket is welcomed and never acknowledges: once connect has sent all it
    may keep unacknowledged, it is dropped; every resume is refused (4404)."""
    if sock.index == 0:
        await sock.welcome(grace=30)
        for _ in range(MAX_KEPT_MESSAGES):
            await sock.message()
        sock.drop()
        return
    await sock.ws.close(CANNOT_RESUME, "no such connection")


async def test_lines_waiting_for_room_when_resuming_fails_are_answered() -> None:
    """The editor wrote past what connect keeps unacknowledged when the relay went, and the
    resume is refused: the lines that waited for room are read after all (a request among
    them answered with the failure), and stdin's end ends connect; nothing hangs."""
    async with (
        hostile_relay(keeps_every_message_then_refuses_resumes) as relay,
        editor(relay.url(), *HOSTILE, env=connect_env()) as ed,
    ):
        lines = [notification(i) for i in range(MAX_KEPT_MESSAGES + 10)] + [request(7)]
        writing = asyncio.create_task(send_all(ed, lines))
        answer = await ed.receive()
        await writing
        await ed.close_stdin()
        assert await ed.exit_status() == 1
    assert answer["id"] == 7
    assert answer["error"]["data"]["cause"] == "resume"
    assert answer["error"]["data"]["closeCode"] == CANNOT_RESUME


async def send_all(ed: Editor, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        await ed.send(message)


def welcomes_then_drops(grace: float) -> Behaviour:
    """Welcome every socket (open or resume) with ``grace``, then hang up at once."""

    async def behave(sock: HostileSocket) -> None:
        await sock.welcome(grace=grace)
        sock.drop()

    return behave


@pytest.mark.slow
async def test_a_relay_that_welcomes_then_drops_is_resumed_ever_more_slowly() -> None:
    """Resumed sockets dropped at once are no success: the pauses between resumes grow."""
    async with (
        hostile_relay(welcomes_then_drops(grace=600)) as relay,
        editor(relay.url(), *HOSTILE, env=connect_env()) as ed,
    ):
        await until(lambda: len(relay.sockets) >= 6, seconds=20)
        at = [sock.accepted_at for sock in relay.sockets]
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    gaps = [later - earlier for earlier, later in itertools.pairwise(at[1:6])]
    assert all(gap >= floor for gap, floor in zip(gaps, (0.5, 1, 2, 4), strict=True)), gaps
    assert gaps == sorted(gaps)


async def test_the_grace_counts_from_the_first_loss_when_resumed_sockets_drop_at_once() -> None:
    """A welcome followed by a drop does not restart the grace: connect gives up when the
    grace of the first loss is over and answers the editor's request."""
    async with (
        hostile_relay(welcomes_then_drops(grace=1.5)) as relay,
        editor(relay.url(), *HOSTILE, env=connect_env()) as ed,
    ):
        [answer], status = await ask_then_leave(ed, request(7, "session/prompt"))
    assert answer["id"] == 7
    assert "could not resume within 1.5 s" in answer["error"]["message"]
    assert answer["error"]["data"]["cause"] == "resume"
    assert status == 1
    assert failures_logged(ed) == [answer["error"]["message"]]


def welcomes_once_then_hangs(sock: HostileSocket) -> Awaitable[None]:
    """The first socket is welcomed and dropped after the editor's first message; later
    ones are accepted and never welcomed (each resume hangs until its open timeout)."""

    async def behave() -> None:
        if sock.index == 0:
            await sock.welcome(grace=600)
            await sock.message()
            sock.drop()
        await sock.ws.wait_closed()

    return behave()


@pytest.mark.parametrize(
    ("behaviour", "owed"),
    [
        (welcomes_once_then_hangs, False),
        (welcomes_then_drops(grace=600), False),
        pytest.param(welcomes_once_then_hangs, True, marks=pytest.mark.slow),
    ],
    ids=["hanging-resume", "flapping", "answer-owed"],
)
async def test_stdin_eof_while_resuming_ends_connect_within_the_answer_wait(
    behaviour: Behaviour, owed: bool
) -> None:
    """The editor closes stdin while connect resumes (an attempt hanging, or the relay
    flapping): with nothing owed connect exits 0 at once; a request owed is answered with
    the closing error once the answer wait from the EOF is over."""
    async with (
        hostile_relay(behaviour) as relay,
        editor(relay.url(), *HOSTILE[:2], "--open-timeout", "60", env=connect_env()) as ed,
    ):
        await ed.send(request(1, "session/prompt") if owed else notification(1))
        await until(lambda: len(relay.sockets) >= 2)  # resuming
        await ed.close_stdin()
        eof = time.monotonic()
        rest = await ed.rest_of_stdout()
        status = await ed.exit_status()
        took = time.monotonic() - eof
    assert status == 0
    if not owed:
        assert (rest, took < 2) == (b"", True), took
        return
    answer = json.loads(rest)
    assert (answer["id"], answer["error"]["data"]["cause"]) == (1, "closing")
    assert ANSWER_WAIT_SECONDS <= took < ANSWER_WAIT_SECONDS + 2, took


async def test_sigterm_while_a_resume_hangs_ends_connect_at_once() -> None:
    """SIGTERM during a resume attempt that would wait its whole open timeout: exit 0 now."""
    async with (
        hostile_relay(welcomes_once_then_hangs) as relay,
        editor(relay.url(), *HOSTILE[:2], "--open-timeout", "60", env=connect_env()) as ed,
    ):
        await ed.send(notification(1))
        await until(lambda: len(relay.sockets) >= 2)
        ed.proc.send_signal(signal.SIGTERM)
        assert await ed.exit_status(seconds=2) == 0
