"""relay.client.watch: ``acp-relay watch`` as a subprocess against a live relay, with real
agents and sockets."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from relay import __version__
from tests.support.agents import ASKS, DEMO_AGENT, ECHO_AGENT, python_agent
from tests.support.env import clean_env, secret_env
from tests.support.live import live_relay, make_ticket
from tests.support.netcut import NetCut
from tests.support.servers import self_signed_certificate, tls_echo_server
from tests.support.sockets import free_port
from tests.support.waiting import until

WATCH = (sys.executable, "-m", "relay", "watch")
EXIT_ON_A_LINE = python_agent("import sys; sys.stdin.readline(); sys.exit(3)")
# On each line read: that many 10 KB lines (a flood for a watcher that does not read).
FLOOD_ON_A_LINE = python_agent(
    "import sys\n"
    "line = '{\"x\":\"' + 'x' * 10000 + '\"}\\n'\n"
    "for _ in sys.stdin:\n"
    "    sys.stdout.write(line * 3000)\n"
    "    sys.stdout.flush()\n"
)


class WatchRun:
    """A running ``acp-relay watch``: what it printed so far, and how it ended. Its stdout is
    read from the start, or (``read`` False) once :meth:`start_reading` is called."""

    def __init__(self, proc: asyncio.subprocess.Process, *, read: bool = True) -> None:
        self.proc = proc
        self.out = bytearray()
        self.err = bytearray()
        assert proc.stderr is not None
        self._readers = [asyncio.create_task(_collect(proc.stderr, self.err))]
        if read:
            self.start_reading()

    def start_reading(self) -> None:
        assert self.proc.stdout is not None
        self._readers.append(asyncio.create_task(_collect(self.proc.stdout, self.out)))

    @property
    def text(self) -> str:
        return self.out.decode()

    async def printed(self, text: str, seconds: float = 15) -> None:
        """Until stdout holds ``text``."""
        await until(lambda: text in self.text, lambda: f"{text!r} in {self.text!r}{self.err!r}",
                    seconds=seconds)  # fmt: skip

    async def finished(self, seconds: float = 15) -> int:
        """Its exit status, once it has exited and everything it wrote is read."""
        async with asyncio.timeout(seconds):
            status = await self.proc.wait()
            await asyncio.gather(*self._readers)
        return status


async def _collect(stream: asyncio.StreamReader, into: bytearray) -> None:
    while chunk := await stream.read(1 << 16):
        into.extend(chunk)


@asynccontextmanager
async def watch(
    url: str, *args: str, env: Mapping[str, str], read: bool = True
) -> AsyncIterator[WatchRun]:
    """Run ``acp-relay watch URL ARGS`` for the block (killed if still running after it);
    with ``read`` False, its stdout is not read until :meth:`WatchRun.start_reading`."""
    proc = await asyncio.create_subprocess_exec(
        *WATCH, url, *args,
        env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    run = WatchRun(proc, read=read)
    try:
        yield run
    finally:
        if proc.returncode is None:
            proc.kill()
        await run.finished()


def connection_id(ws: ClientConnection) -> str:
    assert ws.response is not None
    return ws.response.headers["Acp-Connection-Id"]


def ticket_command(connection: str, *flags: str) -> tuple[str, str]:
    """``--ticket-command`` minting a watcher's ticket with ``acp-relay ticket --watch``."""
    mint = [*WATCH[:-1], "ticket", "--watch", connection, *flags]
    return "--ticket-command", shlex.join(mint)


async def call(ws: ClientConnection, request_id: int, method: str, **params: Any) -> Any:
    """Send a request and read the controller's stream until its answer; its result."""
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                              "params": params}))  # fmt: skip
    while True:
        message = json.loads(await ws.recv())
        if message.get("id") == request_id and "method" not in message:
            return message["result"]


async def prompt(ws: ClientConnection, request_id: int, session: str, text: str) -> None:
    result = await call(ws, request_id, "session/prompt", sessionId=session,
                        prompt=[{"type": "text", "text": text}])  # fmt: skip
    assert result["stopReason"] == "end_turn"


async def test_watch_prints_the_history_then_the_conversation_live() -> None:
    """Attached mid-way with a ticket from `acp-relay ticket --watch`, watch prints what was
    said so far, then each line as it comes, readably, and exits 0 when the connection ends."""
    async with live_relay(DEMO_AGENT) as live, connect(live.ticket_url()) as controller:
        await call(controller, 0, "initialize", protocolVersion=1,
                   clientInfo={"name": "tester", "version": "1"})  # fmt: skip
        session = await call(controller, 1, "session/new", cwd=os.getcwd(), mcpServers=[])
        session_id = session["sessionId"]
        await controller.recv()  # "session started in ...", before the prompt's words
        await prompt(controller, 2, session_id, "hello there world")
        conn = connection_id(controller)
        async with watch(live.url(), *ticket_command(conn), env=secret_env()) as watching:
            await watching.printed("-- live --\n")
            await prompt(controller, 3, session_id, "and \x1b]0;owned\x07 again")
            await watching.printed("end of turn (end_turn)\n", seconds=10)
            await controller.close()
            status = await watching.finished()
    lines = watching.text.splitlines()
    assert lines[0] == f"-- watching connection {conn}: the conversation so far (10 lines) --"
    assert lines[1:6] == [
        "client: initialize (tester 1, protocol 1)",
        f"agent: initialized (acp-relay-demo {__version__}, protocol 1)",
        f"client: new session in {os.getcwd()}",
        f"agent: session {session_id} opened",
        f"agent: session started in {os.getcwd()} with MCP servers: (none)",
    ]
    assert lines[6:] == [
        "user: hello there world",
        "agent: hello there world",
        "agent: end of turn (end_turn)",
        "-- live --",
        "user: and \\x1b]0;owned\\x07 again",
        "agent: and \\x1b]0;owned\\x07 again",
        "agent: end of turn (end_turn)",
        "-- closed: the connection ended: agent exited (1000) --",
    ]
    assert (status, watching.err) == (0, bytearray())


LINES = [
    '{"jsonrpc":"2.0","method":"x","params":{"t":"h\\u00e9llo \\n ✓ \\"q\\""}}',
    '{"n":1}',
    '{"jsonrpc":"2.0","method":"y","params":{"esc":"\\u001b]0;t\\u0007"}}',
]


async def test_raw_prints_each_frame_as_one_json_object_with_the_line_exact() -> None:
    """--raw: the first frame, then {"seq","from","line"} for each line both ways with the
    line exactly as it crossed, then how the relay closed; exit 0."""
    async with live_relay(ECHO_AGENT) as live, connect(live.ticket_url()) as controller:
        await controller.send(LINES[0])
        assert await controller.recv() == LINES[0]
        ticket = make_ticket(watch=connection_id(controller))
        env = clean_env(ACP_RELAY_TICKET=ticket)
        async with watch(live.url(), "--raw", env=env) as watching:
            await watching.printed('"seq":2')
            for line in LINES[1:]:
                await controller.send(line)
                assert await controller.recv() == line
            await watching.printed('"seq":6')
            await controller.close()
            status = await watching.finished()
    records = [json.loads(line) for line in watching.text.splitlines()]
    assert watching.out.isascii()
    assert records[0]["type"] == "watching"
    assert records[0]["history"] == {"first": 1, "messages": 2, "dropped": 0}
    expected = [(line, origin) for line in LINES for origin in ("client", "agent")]
    assert records[1:-1] == [
        {"seq": seq, "from": origin, "line": line}
        for seq, (line, origin) in enumerate(expected, start=1)
    ]
    assert records[-1] == {"type": "closed", "code": 1000, "reason": "the connection ended: "
                           "agent exited"}  # fmt: skip
    assert status == 0
    assert ticket.encode() not in watching.out + watching.err


async def test_a_permission_request_shows_its_options_and_who_answered_it(tmp_path: Path) -> None:
    """A watcher allowed to answer still only watches: it shows the agent's permission
    request with its options, the controller's answer, and the relay saying whose it was."""
    async with live_relay(ASKS) as live, connect(live.ticket_url()) as controller:
        await controller.recv()  # the permission request
        ticket_file = tmp_path / "ticket"
        ticket_file.write_text(make_ticket(watch=connection_id(controller), may_answer=True))
        args = ("--ticket-file", str(ticket_file))
        async with watch(live.url(), *args, env=clean_env()) as watching:
            await watching.printed("-- live --\n")
            await controller.send('{"jsonrpc":"2.0","id":"perm-1","result":{"outcome":'
                                  '{"outcome":"selected","optionId":"allow"}}}')  # fmt: skip
            assert json.loads(await controller.recv())["method"] == "_acp-relay/answered"
            assert json.loads(await controller.recv())["method"] == "answered"  # the agent's
            await watching.printed("agent: answered (notification)\n")
    assert watching.text.splitlines()[1:] == [
        "agent asks permission: Write notes.md [edit]",
        "  - Allow (allow_once, allow)",
        "-- live --",
        'relay: permission perm-1 answered first by the controller (tester): selected "Allow" '
        "(allow)",
        'client answered permission perm-1: selected "Allow" (allow)',
        "agent: answered (notification)",
    ]


@pytest.mark.parametrize(
    ("how", "status", "last"),
    [
        ("agent exits", 0, "-- closed: the connection ended: agent exited with status 3 (1000) --"),
        ("relay stops", 4, "-- closed: the relay is shutting down (1001) --"),
    ],
)  # fmt: skip
async def test_how_the_connection_ended_is_the_last_line_and_the_exit_status(
    how: str, status: int, last: str
) -> None:
    """The relay's close is the transcript's last line; its code is the exit status."""
    async with live_relay(EXIT_ON_A_LINE) as live, connect(live.ticket_url()) as controller:
        env = clean_env(ACP_RELAY_TICKET=make_ticket(watch=connection_id(controller)))
        async with watch(live.url(), env=env) as watching:
            await watching.printed("nothing said yet; live --\n")
            if how == "agent exits":
                await controller.send("{}")
            else:
                await live.relay.shutdown()
            assert await watching.finished() == status
    assert watching.text.splitlines()[-1] == last
    assert watching.err == bytearray()


@pytest.mark.slow
async def test_a_watcher_that_does_not_keep_up_is_dropped_and_exits_3() -> None:
    """Its stdout unread, watch stops reading the socket; the relay drops it (4429) and
    watch, once read, says so and exits 3."""
    async with (
        live_relay(FLOOD_ON_A_LINE, watch_history=64 * 1024) as live,
        connect(live.ticket_url(), max_size=None) as controller,
    ):
        env = clean_env(ACP_RELAY_TICKET=make_ticket(watch=connection_id(controller)))
        async with watch(live.url(), "--raw", env=env, read=False) as watching:
            await until(lambda: live.relay.busy_report()["watchers"] == 1)
            await controller.send("{}")
            received = asyncio.create_task(lines_of(controller, 3000))
            await until(lambda: live.relay.busy_report()["watchers"] == 0, seconds=30)
            watching.start_reading()
            status = await watching.finished(seconds=30)
            assert await received == 3000  # the controller got every line all the while
    last = json.loads(watching.text.splitlines()[-1])
    assert (status, last["type"], last["code"]) == (3, "closed", 4429)
    assert last["reason"].startswith("fell behind: more than 1048576 bytes unread")


async def lines_of(ws: ClientConnection, count: int) -> int:
    """Read ``count`` frames (bounded); how many came."""
    async with asyncio.timeout(60):
        for _ in range(count):
            await ws.recv()
    return count


async def test_a_lost_socket_is_one_line_on_stderr_and_exit_1() -> None:
    """The network cut under it (no close from the relay), watch says so and exits 1."""
    async with (
        live_relay(ECHO_AGENT) as live,
        NetCut(live.relay.port) as cut,
        connect(live.ticket_url()) as controller,
    ):
        env = clean_env(ACP_RELAY_TICKET=make_ticket(watch=connection_id(controller)))
        async with watch(cut.url(), env=env) as watching:
            await watching.printed("live --\n")
            cut.reset()
            status = await watching.finished()
    said = watching.err.decode()
    assert status == 1
    assert said.count("\n") == 1
    assert said.startswith(f"acp-relay watch: lost the connection to the relay at {cut.url()}")
    assert watching.text.splitlines()[-1].startswith("-- lost: lost the connection")


async def test_ctrl_c_stops_watching_and_exits_0() -> None:
    """SIGINT (and SIGTERM) close the watcher's socket and end with "-- stopped --"; the
    connection goes on."""
    async with live_relay(ECHO_AGENT) as live, connect(live.ticket_url()) as controller:
        for sig in (signal.SIGINT, signal.SIGTERM):
            env = clean_env(ACP_RELAY_TICKET=make_ticket(watch=connection_id(controller)))
            async with watch(live.url(), env=env) as watching:
                await watching.printed("live --\n")
                watching.proc.send_signal(sig)
                assert await watching.finished() == 0
            assert watching.text.endswith("\n-- stopped --\n")
            await until(lambda: live.relay.busy_report()["watchers"] == 0)
        await controller.send("{}")
        assert await controller.recv() == "{}"


async def test_a_reader_that_goes_ends_the_watch_with_exit_0() -> None:
    """When what reads its stdout goes (`| head -n 1`), watch closes its socket and exits 0
    at its next line."""
    async with live_relay(ECHO_AGENT) as live, connect(live.ticket_url()) as controller:
        env = clean_env(ACP_RELAY_TICKET=make_ticket(watch=connection_id(controller)))
        pipeline = f"{shlex.join([*WATCH, live.url()])} | head -n 1; echo ${{PIPESTATUS[0]}}"
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", pipeline, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
        )
        try:
            await until(lambda: live.relay.busy_report()["watchers"] == 1)
            async with asyncio.timeout(15):
                while proc.returncode is None:  # a line at a time until watch has noticed
                    await controller.send("{}")
                    assert await controller.recv() == "{}"
                    with suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(proc.wait()), 0.2)
            assert proc.stdout is not None
            out = (await proc.stdout.read()).decode()
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        await until(lambda: live.relay.busy_report()["watchers"] == 0)
    assert out.splitlines()[0].startswith("-- watching connection ")
    assert out.splitlines()[1:] == ["0"]


async def refusal(url: str, *args: str, env: Mapping[str, str]) -> tuple[int, str, str]:
    async with watch(url, *args, env=env) as watching:
        status = await watching.finished()
    return status, watching.text, watching.err.decode()


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("plain ticket", "relay refused the ticket (401): "),
        ("expired", "relay refused the ticket (401): ticket expired"),
        ("no such connection", "nothing to watch at {url} (404): no connection no-such on "
         "this relay: it ended, or never was\n"),
        ("ticket command fails", "cannot get a ticket for relay at {url}: --ticket-command "
         "exited with status 1: no ticket for you\n"),
        ("nobody listens", "cannot reach relay at {url}: connection refused\n"),
    ],
)  # fmt: skip
async def test_attaching_fails_with_one_line_and_exit_1(case: str, says: str) -> None:
    """A ticket the relay refuses, a connection it does not have, a ticket command that
    fails, a relay that is not there: one line on stderr saying why (never the ticket),
    nothing on stdout, exit 1, in connect's words."""
    async with live_relay(ECHO_AGENT) as live, connect(live.ticket_url()) as controller:
        ticket = {
            "plain ticket": make_ticket(),
            "expired": make_ticket(watch=connection_id(controller), now=1.0),
            "no such connection": make_ticket(watch="no-such"),
        }.get(case, make_ticket(watch=connection_id(controller)))
        url = f"ws://127.0.0.1:{free_port()}/acp" if case == "nobody listens" else live.url()
        args: tuple[str, ...] = ()
        if case == "ticket command fails":
            fail = "import sys; sys.exit('no ticket for you')"
            args = ("--ticket-command", shlex.join([sys.executable, "-c", fail]))
        status, out, err = await refusal(url, *args, env=clean_env(ACP_RELAY_TICKET=ticket))
    assert (status, out) == (1, "")
    assert err.startswith(f"acp-relay watch: {says.format(url=url)}")
    assert err.endswith("\n")
    assert err.count("\n") == 1
    assert ticket not in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "acp-relay: no ticket: set ACP_RELAY_TICKET, or give --ticket-command"),
        (
            [],
            "a watcher's ticket is minted where the relay's secret is, with `acp-relay "
            "ticket --watch CONNECTION_ID` (e.g. --ticket-command 'acp-relay ticket --watch "
            "CONNECTION_ID'; the id is the relay log's connection_id)\n",
        ),
        (["--ticket", "t", "--ticket-file", "f"], "not allowed with argument"),
        (["--ping-interval", "0", "--ticket", "t"], "argument --ping-interval: expected seconds"),
    ],
)
async def test_usage_errors_exit_2(args: list[str], says: str) -> None:
    """No ticket source, two of them, or a bad value: exit 2 saying what is wrong."""
    status, out, err = await refusal("ws://127.0.0.1:9/acp", *args, env=clean_env())
    assert (status, out) == (2, "")
    assert says in err
    assert "Traceback" not in err


async def test_wss_with_cacert_and_a_server_that_is_no_watchable_relay(tmp_path: Path) -> None:
    """Over wss://, the server's certificate is checked (trusted with --cacert, as connect
    does); a server that opens a socket without choosing acp-relay.watch.v1 (no relay, or
    one without watchers) is refused at once, saying so."""
    cert, key = self_signed_certificate(tmp_path)
    (tmp_path / "other").mkdir()
    other, _ = self_signed_certificate(tmp_path / "other")
    env = clean_env(ACP_RELAY_TICKET=make_ticket(watch="c-1"))
    async with tls_echo_server(cert, key) as port:
        url = f"wss://127.0.0.1:{port}/acp"
        untrusted = await refusal(url, env=env)
        wrongly = await refusal(url, "--cacert", str(other), env=env)
        trusted = await refusal(url, "--cacert", str(cert), env=env)
    failed = f"acp-relay watch: TLS handshake with relay at {url} failed: certificate verify failed"
    assert untrusted == (1, "", f"{failed}: self-signed certificate; if this relay's "
                         "certificate is yours (self-signed, or from a private CA), trust "
                         "it with --cacert FILE, the PEM of that CA or of the "
                         "certificate\n")  # fmt: skip
    assert wrongly == (1, "", f"{failed}: self-signed certificate; its issuer is not in the "
                       "--cacert bundle: give the PEM of the CA that signed it\n")  # fmt: skip
    assert trusted == (1, "", f"acp-relay watch: relay at {url} does not offer watching: it "
                       "chose no subprotocol, not acp-relay.watch.v1 (a relay older than "
                       "watchers, or a proxy that drops Sec-WebSocket-Protocol)\n")  # fmt: skip
