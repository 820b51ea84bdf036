"""relay.server.connections.sharing: watchers of a live connection, with real agents and sockets."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import struct
import sys
from contextlib import suppress
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from relay.acp.answers import MAX_REFUSED, TOO_MANY_REFUSED, WATCHER_FRAME_BYTES
from relay.acp.mcp import MergeReport
from relay.acp.outcome import Forward
from relay.acp.rewrite import RewriteReport
from relay.core.watchprofile import ANSWERED, DETACHED, FELL_BEHIND, RESUMED, WATCH_PROFILE
from relay.observe import logs
from relay.observe.observer import ConnectionObserver
from relay.server.connections.sharing import Watching
from tests.support.agents import ASKS, ECHO_AGENT, python_agent
from tests.support.audit import LogAudit
from tests.support.cli import serve
from tests.support.env import secret_env
from tests.support.http import busy, upgrade_request
from tests.support.live import SECRET, live_relay, make_ticket
from tests.support.resume import ResumeClient
from tests.support.sockets import closed_with
from tests.support.waiting import until
from tests.support.watch import Said, Told, Watcher

ALLOW = (
    '{"jsonrpc":"2.0","id":"perm-1","result":{"outcome":{"outcome":"selected","optionId":"allow"}}}'
)
EXIT_ON_A_LINE = (sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(3)")
BIG_LINES = (
    sys.executable,
    "-c",
    "import sys\n"
    "line = '{\"x\":\"' + 'x' * 10000 + '\"}\\n'\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    sys.stdout.write(line)\n",
)  # + COUNT: that many lines of 10 KB


def connection_id(ws: ClientConnection) -> str:
    """The id the 101 named the connection by."""
    assert ws.response is not None
    return ws.response.headers["Acp-Connection-Id"]


async def echo(ws: ClientConnection, line: str) -> None:
    """Send ``line`` and read the echo agent's copy of it."""
    await ws.send(line)
    assert await ws.recv() == line


async def test_a_watcher_sees_the_conversation_so_far_then_live() -> None:
    """Attached mid-way, a watcher gets every line so far, in order and byte-identical, then
    every new one as the relay carries it, both directions numbered in one sequence."""
    lines = [json.dumps({"n": n, "text": "héllo ✓ \\n"}, ensure_ascii=False) for n in range(5)]
    async with live_relay(ECHO_AGENT) as live, connect(live.ticket_url()) as controller:
        for line in lines[:3]:
            await echo(controller, line)
        watcher = await Watcher.open(live, connection_id(controller))
        assert watcher.first["history"] == {"first": 1, "messages": 6, "dropped": 0}
        assert watcher.first["mayAnswer"] is False
        history = await watcher.said(6)
        for line in lines[3:]:
            await echo(controller, line)
        live_lines = await watcher.said(4)
    expected = [
        Said(seq, origin, line.encode())
        for seq, (line, origin) in enumerate(
            [(line, origin) for line in lines for origin in ("client", "agent")], start=1
        )
    ]
    assert history + live_lines == expected


async def test_the_history_keeps_the_newest_whole_lines_and_says_how_many_went() -> None:
    """Past --watch-history the oldest whole lines are dropped; the watcher is told how many."""
    async with (
        live_relay(ECHO_AGENT, watch_history=100) as live,
        connect(live.ticket_url()) as controller,
    ):
        for n in range(10):
            await echo(controller, json.dumps({"n": n}))  # 8 bytes each, twice over
        watcher = await Watcher.open(live, connection_id(controller))
        history = watcher.first["history"]
        kept = await watcher.said(history["messages"])
    assert history["dropped"] + history["messages"] == 20
    assert sum(len(said.line) for said in kept) <= 100
    assert [said.seq for said in kept] == list(range(history["first"], 21))


async def test_the_first_answer_is_the_one_taken_and_everyone_is_told() -> None:
    """The controller and two watchers answer the agent's permission request at once: the
    agent gets exactly one answer, and every socket learns which was taken."""
    async with live_relay(ASKS) as live, connect(live.ticket_url()) as controller:
        asked = json.loads(await controller.recv())
        assert asked["method"] == "session/request_permission"
        conn = connection_id(controller)
        first = await Watcher.open(live, conn, may_answer=True, subject="lead")
        second = await Watcher.open(live, conn, may_answer=True, subject="ops")
        await first.said(1)  # the request, in the history
        await second.said(1)
        await asyncio.gather(controller.send(ALLOW), first.ws.send(ALLOW), second.ws.send(ALLOW))
        notices = [await watcher.told(ANSWERED) for watcher in (first, second)]
        await controller.send('{"ping":1}')  # the agent reads in order: all answers are in
        seen: list[dict[str, object]] = []
        while not seen or seen[-1] != {"ping": 1}:
            seen.append(json.loads(await controller.recv()))
    answered = [message for message in seen if message.get("method") == "answered"]
    told = [message for message in seen if message.get("method") == ANSWERED]
    assert len(answered) == 1
    assert answered[0]["params"] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    assert notices[0] == notices[1]
    assert told == [notices[0]]  # every socket, the controller too, is told the same once
    assert notices[0]["params"]["by"] in ("controller", "watcher")
    assert notices[0]["params"]["id"] == "perm-1"


async def until_echoed(ws: ClientConnection, line: str) -> list[dict[str, object]]:
    """Send ``line`` through the agent and read up to its echo: what came before it too."""
    await ws.send(line)
    seen: list[dict[str, object]] = []
    async with asyncio.timeout(10):
        while not seen or seen[-1] != json.loads(line):
            seen.append(json.loads(await ws.recv()))
    return seen


DENY = ALLOW.replace('"allow"', '"deny"')
CONTROLLER_ANSWERS = {
    "_meta.method": ALLOW.replace("}}}", '},"_meta":{"method":"x"}}}'),
    "escaped id": ALLOW.replace('"id"', '"\\u0069d"'),
}


@pytest.mark.parametrize("case", list(CONTROLLER_ANSWERS))
async def test_the_controllers_answer_is_taken_however_it_is_spelled(case: str) -> None:
    """The controller answers first with an answer holding "method" in its _meta, or its
    "id" key escaped; a watcher answers next: exactly one answer reaches the agent, the
    controller's, and the watchers and the metrics say it was the controller's."""
    answer = CONTROLLER_ANSWERS[case]
    async with live_relay(ASKS) as live, connect(live.ticket_url()) as controller:
        await controller.recv()  # the permission request
        watcher = await Watcher.open(live, connection_id(controller), may_answer=True)
        await watcher.said(1)
        await controller.send(answer)
        seen = await until_echoed(controller, '{"ping":1}')  # the agent has the answer
        await watcher.ws.send(DENY)
        await watcher.ws.send('{"jsonrpc":"2.0","id":9,"method":"x"}')  # refused, after DENY
        frames = [await watcher.frame()]
        while not (isinstance(frames[-1], Told) and "error" in frames[-1].message):
            frames.append(await watcher.frame())
        seen += await until_echoed(controller, '{"ping":2}')  # the agent has all it got
        counted = dict(live.relay.stats.watch)
    notices = [f.message for f in frames if isinstance(f, Told) and "method" in f.message]
    notice = notices[0]
    reports = [message["params"] for message in seen if message.get("method") == "answered"]
    assert reports == [json.loads(answer)["result"]]
    assert notice["params"]["by"] == "controller"
    assert notice["params"]["result"] == json.loads(answer)["result"]
    assert counted.get("answer_controller") == counted.get("answer_late") == 1
    assert "answer_watcher" not in counted


async def test_a_watchers_answer_taken_first_makes_the_controllers_late() -> None:
    """A watcher answers the permission request first: the controller's answer after it is
    dropped as late, and the controller's lines after that reach the agent as before."""
    async with live_relay(ASKS) as live, connect(live.ticket_url()) as controller:
        await controller.recv()  # the permission request
        watcher = await Watcher.open(live, connection_id(controller), may_answer=True)
        await watcher.said(1)
        await watcher.ws.send(ALLOW)
        notice = await watcher.told(ANSWERED)
        await controller.send(DENY)
        seen = await until_echoed(controller, '{"ping":1}')
        seen += await until_echoed(controller, '{"ping":2}')
        counted = dict(live.relay.stats.watch)
    reports = [message["params"] for message in seen if message.get("method") == "answered"]
    assert reports == [json.loads(ALLOW)["result"]]
    assert notice["params"]["by"] == "watcher"
    assert counted.get("answer_watcher") == counted.get("answer_late") == 1
    assert [message for message in seen if "ping" in message] == [{"ping": 1}, {"ping": 2}]


async def test_a_watcher_may_not_send_the_agent_anything_but_an_allowed_answer() -> None:
    """A watcher's request, notification, or answer without the right gets a JSON-RPC error
    and never reaches the agent."""
    async with live_relay(ASKS) as live, connect(live.ticket_url()) as controller:
        await controller.recv()  # the permission request
        conn = connection_id(controller)
        silent = await Watcher.open(live, conn, may_answer=False)
        for frame in ('{"jsonrpc":"2.0","id":9,"method":"session/prompt","params":{}}',
                      '{"jsonrpc":"2.0","method":"session/cancel","params":{}}',
                      ALLOW):  # fmt: skip
            await silent.ws.send(frame)
            refusal = await silent.frame()
            while isinstance(refusal, Said):
                refusal = await silent.frame()
            assert isinstance(refusal, Told)
            assert refusal.message["error"]["code"] == -32600
        await controller.send('{"ping":1}')
        assert json.loads(await controller.recv()) == {"ping": 1}  # nothing else came first


async def refusals_until_closed(watcher: Watcher) -> tuple[list[Told], int | None, str | None]:
    """The relay's answers to a watcher's frames until it closes the socket, and how."""
    told: list[Told] = []
    with suppress(ConnectionClosed):
        async with asyncio.timeout(10):
            while True:
                frame = await watcher.frame()
                if isinstance(frame, Told) and "error" in frame.message:
                    told.append(frame)
    return told, watcher.ws.close_code, watcher.ws.close_reason


@pytest.mark.parametrize(
    ("may_answer", "binary"),
    [(False, False), (True, False), (True, True)],
    ids=["read-only", "may answer", "binary frames"],
)
async def test_a_watcher_is_closed_after_a_few_refused_frames(
    may_answer: bool, binary: bool
) -> None:
    """Each refused frame gets its error; the MAX_REFUSED-th also closes the watcher 1008,
    saying why; the controller carries on."""
    async with live_relay(ASKS) as live, connect(live.ticket_url()) as controller:
        await controller.recv()  # the permission request
        watcher = await Watcher.open(live, connection_id(controller), may_answer=may_answer)
        for n in range(MAX_REFUSED):
            frame = f'{{"jsonrpc":"2.0","id":{n},"method":"x"}}'
            await watcher.ws.send(frame.encode() if binary else frame)
        told, code, reason = await refusals_until_closed(watcher)
        await controller.send('{"ping":1}')
        assert json.loads(await controller.recv()) == {"ping": 1}
    assert len(told) == MAX_REFUSED
    assert code == TOO_MANY_REFUSED
    assert reason == f"{MAX_REFUSED} frames refused: a watcher sends only answers it may give"


def masked_frame_header(length: int) -> bytes:
    """A client's text frame header announcing ``length`` bytes of payload, with its mask."""
    return struct.pack("!BBQ", 0x81, 0x80 | 127, length) + os.urandom(4)


@pytest.mark.parametrize("how", ["one byte over", "16 MiB announced"])
async def test_a_watchers_frame_over_the_bound_closes_it_1009(how: str) -> None:
    """A watcher's frame over WATCHER_FRAME_BYTES closes it with 1009 as soon as its header
    says so: the relay does not wait for (nor keep) the payload; the controller carries on."""
    async with live_relay(ASKS) as live, connect(live.ticket_url()) as controller:
        await controller.recv()
        watcher = await Watcher.open(live, connection_id(controller), may_answer=True)
        if how == "one byte over":
            await watcher.ws.send("x" * (WATCHER_FRAME_BYTES + 1))
        else:  # only the header goes: the payload never comes
            watcher.ws.transport.write(masked_frame_header(16 << 20))
        code, reason = await closed_with(watcher.ws)
        await controller.send('{"ping":1}')
        assert json.loads(await controller.recv()) == {"ping": 1}
    assert code == 1009
    assert reason is not None
    assert f"exceeds limit of {WATCHER_FRAME_BYTES} bytes" in reason


async def test_a_watchers_frame_sent_before_the_upgrades_answer_is_bounded_too() -> None:
    """A frame over the bound sent with the upgrade request, before its 101 (which the
    protocol forbids), also closes the watcher with 1009, unread."""
    frame = b"x" * (WATCHER_FRAME_BYTES + 1)
    async with live_relay(ECHO_AGENT) as live, connect(live.ticket_url()) as controller:
        ticket = make_ticket(watch=connection_id(controller))
        request = upgrade_request(
            "/acp", f"Sec-WebSocket-Protocol: {WATCH_PROFILE}", f"Authorization: Bearer {ticket}"
        )
        header = struct.pack("!BBH", 0x81, 0x80 | 126, len(frame)) + bytes(4)  # mask 0
        reader, writer = await asyncio.open_connection("127.0.0.1", live.relay.port)
        writer.write(request + header + frame)
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
            opening = await reader.readexactly(2)  # the "watching" frame: 126 to 64 KiB
            size = struct.unpack("!H", await reader.readexactly(2))[0]
            await reader.readexactly(size)
            close = await reader.readexactly(2)
            code_and_reason = await reader.readexactly(close[1])
        writer.close()
        await echo(controller, '{"ping":1}')
    assert head.startswith(b"HTTP/1.1 101")
    assert opening == b"\x81\x7e"
    assert close[0] == 0x88
    assert struct.unpack("!H", code_and_reason[:2])[0] == 1009
    assert f"exceeds limit of {WATCHER_FRAME_BYTES} bytes".encode() in code_and_reason


async def test_a_watchers_binary_frame_is_refused_even_when_it_holds_an_answer() -> None:
    """Answers are text frames, the controller's as a watcher's: an answer sent as a binary
    frame gets a -32600 and never reaches the agent; the same answer as text is taken."""
    async with live_relay(ASKS) as live, connect(live.ticket_url()) as controller:
        await controller.recv()  # the permission request
        watcher = await Watcher.open(live, connection_id(controller), may_answer=True)
        await watcher.said(1)
        await watcher.ws.send(ALLOW.encode())
        refusal = await watcher.frame()
        await watcher.ws.send(ALLOW)
        notice = await watcher.told(ANSWERED)
        await controller.send('{"ping":1}')  # the agent reads in order: the answer is in
        seen: list[dict[str, object]] = []
        while not seen or seen[-1] != {"ping": 1}:
            seen.append(json.loads(await controller.recv()))
    assert isinstance(refusal, Told)
    assert refusal.message["error"]["code"] == -32600
    assert "binary" in refusal.message["error"]["data"]["detail"]
    assert notice["params"]["by"] == "watcher"
    assert sorted(str(message["method"]) for message in seen[:-1]) == sorted([ANSWERED, "answered"])


@pytest.mark.parametrize("case", ["unknown", "no watch subprotocol", "plain ticket"])
async def test_watchers_are_admitted_only_with_their_ticket_for_a_live_connection(
    case: str,
) -> None:
    """A watcher's ticket for no live connection gets 404; a watcher's ticket without the
    watch subprotocol, or a plain ticket with it, 401; none starts an agent."""
    async with live_relay(ECHO_AGENT) as live, connect(live.ticket_url()) as controller:
        conn = connection_id(controller)
        if case == "unknown":
            ticket, protocols = make_ticket(watch="no-such-connection"), [WATCH_PROFILE]
        elif case == "no watch subprotocol":
            ticket, protocols = make_ticket(watch=conn), []
        else:
            ticket, protocols = make_ticket(), [WATCH_PROFILE]
        with pytest.raises(InvalidStatus) as refused:
            await connect(live.url(ticket), subprotocols=protocols)  # type: ignore[arg-type]
        assert len(live.relay.connections) == 1
    status = refused.value.response.status_code
    body = refused.value.response.body.decode()
    assert status == (404 if case == "unknown" else 401)
    assert ("it ended, or never was" if case == "unknown" else "watch") in body


async def test_an_ended_connection_cannot_be_watched() -> None:
    """Once the connection is over, a watcher's ticket for it gets 404."""
    async with live_relay(ECHO_AGENT) as live:
        async with connect(live.ticket_url()) as controller:
            conn = connection_id(controller)
        await until(lambda: not live.relay.connections)
        with pytest.raises(InvalidStatus) as refused:
            await Watcher.open(live, conn)
    assert refused.value.response.status_code == 404


async def test_watchers_past_the_limit_are_refused() -> None:
    """A connection takes --max-watchers watchers; the next one gets 503."""
    async with (
        live_relay(ECHO_AGENT, max_watchers=1) as live,
        connect(live.ticket_url()) as controller,
    ):
        conn = connection_id(controller)
        watcher = await Watcher.open(live, conn)
        with pytest.raises(InvalidStatus) as refused:
            await Watcher.open(live, conn)
        report = await busy(live.relay.port)
        await watcher.close()
    assert refused.value.response.status_code == 503
    assert report["watchers"] == 1
    assert report["connections"] == 1


async def test_a_watcher_that_does_not_read_is_dropped_and_nothing_waits_for_it() -> None:
    """A watcher whose unread frames pass its bound is closed 4429; the controller still
    gets every line."""
    total = 3000  # 10 KB lines: 30 MB, past what the kernel's socket buffers hold
    async with (
        live_relay((*BIG_LINES, str(total)), watch_history=64 * 1024) as live,
        connect(live.ticket_url(), max_size=None) as controller,
    ):
        watcher = await Watcher.open(live, connection_id(controller), max_queue=1)
        got = 0
        async with asyncio.timeout(60):
            while got < total:
                await controller.recv()
                got += 1
            code, reason = await closed_with(watcher.ws)
    assert code == FELL_BEHIND
    assert reason is not None
    assert reason.startswith("fell behind")


async def test_watchers_stay_through_a_resume_and_are_told_of_it() -> None:
    """The controller's socket is lost and resumed: its watcher stays, told of both."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live:
        client = await ResumeClient.open(live.url(make_ticket()))
        watcher = await Watcher.open(live, client.state.connection)
        client.ws.transport.abort()
        detached = await watcher.told(DETACHED)
        again = await ResumeClient.open(live.url(make_ticket()), client.state)
        resumed = await watcher.told(RESUMED)
        await again.ws.close()
    assert detached["params"]["grace"] == 30
    assert resumed["params"] == {}


async def test_watchers_are_closed_with_the_reason_when_the_agent_exits() -> None:
    """The connection ends with its agent: each watcher is closed, saying why."""
    async with live_relay(EXIT_ON_A_LINE) as live, connect(live.ticket_url()) as ws:
        watchers = [await Watcher.open(live, connection_id(ws)) for _ in range(2)]
        await ws.send('{"bye":1}')
        closes = [await closed_with(w.ws) for w in watchers]
    assert closes == [(1000, "the connection ended: agent exited with status 3")] * 2


async def test_a_watcher_never_sees_a_ticket_or_a_resume_secret() -> None:
    """Everything a watcher gets was sent by the two sides: neither the controller's ticket,
    nor its resume secret (the profile's envelope), nor the relay's secret is in it."""
    async with live_relay(ECHO_AGENT, resume_grace=30) as live:
        ticket = make_ticket()
        client = await ResumeClient.open(live.url(ticket))
        watcher = await Watcher.open(live, client.state.connection)
        for n in range(3):
            await client.send(json.dumps({"n": n}).encode())
        frames = [await watcher.ws.recv(decode=False) for _ in range(6)]
        await client.ws.close()
    seen = b"".join(frames) + json.dumps(watcher.first).encode()
    for secret in (ticket, client.state.secret, SECRET):
        assert secret.encode() not in seen
    assert b'"seq":' not in b"".join(f.partition(b"\n")[2] for f in frames)  # no envelope


async def test_watchers_are_told_the_relay_is_shutting_down() -> None:
    """At the relay's shutdown each watcher is closed 1001 saying so."""
    async with live_relay(ECHO_AGENT) as live:
        controller = await connect(live.ticket_url())
        watcher = await Watcher.open(live, connection_id(controller))
        closing = asyncio.create_task(closed_with(watcher.ws))
        await live.relay.shutdown()
        assert await closing == (1001, "the relay is shutting down")


# An agent that keeps its exact stdin in a file (its argument) and answers each request:
# initialize with http MCP servers declared, anything else with a session.
SAVING_AGENT = python_agent(
    "import json, sys\n"
    "with open(sys.argv[1], 'wb') as saved:\n"
    "    for line in sys.stdin.buffer:\n"
    "        saved.write(line)\n"
    "        saved.flush()\n"
    "        message = json.loads(line)\n"
    "        result = {'sessionId': 's-1'}\n"
    "        if message.get('method') == 'initialize':\n"
    "            caps = {'mcpCapabilities': {'http': True}}\n"
    "            result = {'protocolVersion': 1, 'agentCapabilities': caps}\n"
    "        answer = {'jsonrpc': '2.0', 'id': message['id'], 'result': result}\n"
    "        sys.stdout.write(json.dumps(answer) + '\\n')\n"
    "        sys.stdout.flush()\n"
)
GH_TOKEN = "ghp_watchers-never-see-this-0123"
FILES_KEY = "files-key-watchers-never-see-4567"
MCP_SERVERS = [
    {
        "type": "http",
        "name": "github",
        "url": "https://mcp.example/gh",
        "headers": [{"name": "Authorization", "value": "Bearer ${GH_TOKEN}"}],
        "_meta": {"owner": "ops ${GH_TOKEN}"},
    },
    {
        "name": "files",
        "command": "/usr/bin/files-mcp",
        "args": ["--key=${FILES_KEY}"],
        "env": [{"name": "FILES_KEY", "value": "${FILES_KEY}"}],
    },
]
INITIALIZE = '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}'
SESSION_NEW = (
    '{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}'
)


async def test_watchers_never_see_the_relays_mcp_secrets(tmp_path: Path, audit: LogAudit) -> None:
    """The MCP servers the relay adds to session/new, their ${VAR} values filled in from its
    environment: the agent gets the values; a watcher attached before and one attached after
    (from the history) get the same line with every value redacted; neither the trace nor
    the log holds them."""
    for secret in (GH_TOKEN, FILES_KEY):
        audit.secret(secret)
    servers, saved, traces = tmp_path / "mcp.json", tmp_path / "stdin", tmp_path / "traces"
    servers.write_text(json.dumps(MCP_SERVERS))
    traces.mkdir(mode=0o700)
    agent = shlex.join((*SAVING_AGENT, str(saved)))
    flags = ("--agent", agent, "--mcp-servers", str(servers), "--trace-dir", str(traces))
    env = secret_env(GH_TOKEN=GH_TOKEN, FILES_KEY=FILES_KEY)
    async with serve(*flags, env=env) as relay, connect(relay.ticket_url()) as controller:
        audit.watch(relay.stderr)
        await controller.send(INITIALIZE)
        await controller.recv()
        before = await Watcher.open(relay.url, connection_id(controller))
        await controller.send(SESSION_NEW)
        assert json.loads(await controller.recv())["result"] == {"sessionId": "s-1"}
        after = await Watcher.open(relay.url, connection_id(controller))
        live = await before.said(4)  # initialize both ways (history), session/new both ways
        history = await after.said(4)
        await controller.close()
        await relay.until_idle()
    received = saved.read_bytes()
    trace = b"".join(path.read_bytes() for path in traces.iterdir())
    assert GH_TOKEN.encode() in received
    assert FILES_KEY.encode() in received
    assert live == history
    shown = live[2]
    assert (shown.seq, shown.origin) == (3, "client")
    assert json.loads(shown.line)["method"] == "session/new"
    assert json.loads(received.splitlines()[1])["method"] == "session/new"
    for seen in (b"".join(said.line for said in live), trace, "\n".join(relay.stderr).encode()):
        assert GH_TOKEN.encode() not in seen
        assert FILES_KEY.encode() not in seen
    entries = json.loads(shown.line)["params"]["mcpServers"]
    assert [entry["name"] for entry in entries] == ["github", "files"]
    assert entries[0]["headers"] == [{"name": "Authorization", "value": "[redacted]"}]
    assert entries[0]["_meta"] == {"owner": "ops [redacted]"}
    assert entries[1]["env"] == [{"name": "FILES_KEY", "value": "[redacted]"}]
    assert entries[1]["args"] == ["--key=[redacted]"]


async def test_a_batch_of_the_controllers_lines_is_kept_in_order_its_rewritten_one_hidden() -> None:
    """A batch told by the pump, a session/new the relay merged its MCP server into among
    plain lines: kept in order, numbered in sequence, the plain lines as they are and the
    merged server's header value redacted."""
    session_new = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "session/new",
            "params": {
                "cwd": "/w",
                "mcpServers": [
                    {"name": "github", "headers": [{"name": "Authorization", "value": GH_TOKEN}]}
                ],
            },
        }
    ).encode()
    merged = RewriteReport("session/new", mcp=MergeReport(injected=["github"]))
    batch = [
        Forward(b'{"n":1}', b'{"n":1}'),
        Forward(session_new, b"{}", merged),
        Forward(b'{"n":2}', b'{"n":2}'),
    ]
    watching = Watching(
        "c-1",
        ConnectionObserver("c-1", logs.get_logger("test.sharing")),
        history=1 << 20,
        tell_controller=nowhere,
        to_agent=nowhere,
        left=lambda: None,
    )
    watching.client_forwarded(batch)
    frames = [frame.split(b"\n", 1) for frame in watching.history.frames()]
    heads = [json.loads(head) for head, _ in frames]
    lines = [line for _, line in frames]
    assert heads == [{"seq": n, "from": "client"} for n in (1, 2, 3)]
    assert (lines[0], lines[2]) == (b'{"n":1}', b'{"n":2}')
    shown = json.loads(lines[1])["params"]["mcpServers"][0]["headers"]
    assert shown == [{"name": "Authorization", "value": "[redacted]"}]
    assert GH_TOKEN.encode() not in b"".join(lines)


async def nowhere(_: object) -> None:
    """Where a test's Watching sends nothing it is asked to."""
