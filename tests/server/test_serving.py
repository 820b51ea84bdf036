"""Tests for relay.server.serving: a live relay on 127.0.0.1:0 with real agent processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import acp
import acp.schema
import pytest
from acp.ws.client import create_websocket_stream
from websockets.asyncio.client import connect

from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, Fallback, parse_rule
from relay.acp.rewrite import RewritePolicy
from tests.support.agents import DEMO_AGENT, ECHO_AGENT
from tests.support.clients import ChunkClient
from tests.support.http import busy
from tests.support.live import live_relay, make_ticket, until_idle
from tests.support.sockets import closed_with, refused
from tests.support.waiting import until

CAT = ("cat",)
MiB = 1024 * 1024


# -- the pipe ---------------------------------------------------------------------


async def test_round_trip_and_connection_id() -> None:
    """A frame reaches the agent as a line and back; the 101 carries Acp-Connection-Id."""
    async with live_relay(CAT) as live, connect(live.ticket_url()) as ws:
        assert ws.response is not None
        uuid.UUID(ws.response.headers["Acp-Connection-Id"])
        await ws.send('{"jsonrpc":"2.0","id":1,"method":"ping"}')
        async with asyncio.timeout(5):
            assert await ws.recv() == '{"jsonrpc":"2.0","id":1,"method":"ping"}'


async def test_bearer_header_is_accepted() -> None:
    """Machine clients may send the ticket as Authorization: Bearer."""
    async with live_relay(CAT) as live:
        headers = {"Authorization": f"Bearer {make_ticket()}"}
        async with connect(live.url(), additional_headers=headers) as ws:
            await ws.send("{}")
            async with asyncio.timeout(5):
                assert await ws.recv() == "{}"


async def test_16_mib_line_both_ways_byte_identical() -> None:
    """A 16 MiB message (non-ASCII included) crosses both ways unchanged."""
    body = ("é✓" + "x" * 1021) * (16 * 1024)
    message = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"text": body}}, ensure_ascii=False)
    assert len(message.encode()) > 16 * MiB
    async with live_relay(CAT) as live, connect(live.ticket_url(), max_size=None) as ws:
        await ws.send(message)
        async with asyncio.timeout(30):
            echoed = await ws.recv(decode=False)
    assert echoed == message.encode()


@pytest.mark.slow
async def test_100k_small_messages_in_order() -> None:
    """100,000 small messages sent as fast as possible all come back, in order."""
    count = 100_000
    async with live_relay(CAT) as live, connect(live.ticket_url()) as ws:

        async def send_all() -> None:
            for i in range(count):
                await ws.send(f'{{"jsonrpc":"2.0","method":"n","params":{{"i":{i}}}}}')

        sender = asyncio.create_task(send_all())
        async with asyncio.timeout(60):
            for i in range(count):
                assert await ws.recv() == f'{{"jsonrpc":"2.0","method":"n","params":{{"i":{i}}}}}'
        await sender


async def test_frames_with_newlines_and_binary_frames() -> None:
    """Pretty JSON is compacted, non-JSON with a newline gets -32700, binary frames are ignored."""
    async with live_relay(CAT) as live, connect(live.ticket_url()) as ws:
        await ws.send(b"\x00binary")
        await ws.send('{\n "id": 1,\n "method": "a"\n}')
        await ws.send("not json\nat all")
        await ws.send('{"id":2}')
        async with asyncio.timeout(5):
            received = [str(await ws.recv()) for _ in range(3)]
    # The relay answers the bad frame itself, so its reply may overtake the agent's lines.
    errors = [json.loads(m) for m in received if "error" in m]
    assert [m for m in received if "error" not in m] == ['{"id":1,"method":"a"}', '{"id":2}']
    assert len(errors) == 1
    error = errors[0]
    assert error["id"] is None
    assert error["error"]["code"] == -32700
    assert error["error"]["data"]["detail"].startswith("Expecting value")


async def test_bad_agent_lines_are_dropped_and_stream_goes_on() -> None:
    """Invalid UTF-8 and over-limit stdout lines are dropped; the lines around them arrive."""
    script = (
        "import sys\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'{\"n\":1}\\n' + b'\\xff\\xfe\\n' + b'y' * 5000 + b'\\n{\"n\":2}\\r\\n')\n"
        "out.flush()\n"
        "sys.stdin.read()\n"
    )
    agent = (sys.executable, "-c", script)
    async with live_relay(agent, max_message_bytes=4096) as live, connect(live.ticket_url()) as ws:
        async with asyncio.timeout(5):
            assert [await ws.recv(), await ws.recv()] == ['{"n":1}', '{"n":2}']


async def test_client_frame_over_limit_closes_1009() -> None:
    """A client frame over --max-message-bytes closes the socket with 1009."""
    async with live_relay(CAT, max_message_bytes=1024) as live, connect(live.ticket_url()) as ws:
        await ws.send("x" * 2000)
        code, _ = await closed_with(ws)
    assert code == 1009


async def test_client_invalid_utf8_closes_1007() -> None:
    """A client text frame that is not UTF-8 closes the socket with 1007; its agent goes."""
    async with live_relay(CAT) as live, connect(live.ticket_url()) as ws:
        await ws.send(b'{"a":"\xff"}', text=True)
        code, reason = await closed_with(ws)
        assert await until_idle(live.relay)
    assert code == 1007
    assert reason is not None
    assert "invalid start byte" in reason


@pytest.mark.slow
async def test_demo_agent_through_relay_with_acp_sdk() -> None:
    """The ACP Python SDK as client drives the demo agent through the relay."""
    client = ChunkClient()
    updates = client.chunks

    async with live_relay(DEMO_AGENT) as live:
        transport = await create_websocket_stream(live.ticket_url())
        conn = acp.connect_to_agent(client, transport)  # type: ignore[arg-type]
        async with asyncio.timeout(20):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            reply = await conn.prompt(
                session_id=session.session_id, prompt=[acp.text_block("hello relay world")]
            )
        await conn.close()
    assert init.agent_info is not None
    assert init.agent_info.name == "acp-relay-demo"
    assert reply.stop_reason == "end_turn"
    assert "session started in /tmp with MCP servers: (none)\n" in updates
    assert "".join(u for u in updates if not u.startswith("session started")) == (
        "hello relay world"
    )


# -- refusals before the upgrade -------------------------------------------------


# -- the session-opening rewrite ----------------------------------------------------

FILES_MCP = {"name": "files", "command": "/usr/bin/mcp-files", "args": [], "env": []}
SEARCH_MCP = {
    "type": "http",
    "name": "search",
    "url": "https://mcp.example/x",
    "headers": [{"name": "Authorization", "value": "Bearer mcp-token-123"}],
}


def rewrite_policy(
    tmp: Path,
    rules: Sequence[str] = (),
    fallback: Fallback = "workspace",
    servers: Sequence[dict[str, Any]] = (),
) -> RewritePolicy:
    cwd = CwdPolicy(tuple(parse_rule(r) for r in rules), fallback, str(tmp / "ws"), True)
    return RewritePolicy(cwd, McpPolicy(tuple(servers)))


@asynccontextmanager
async def demo_session(
    url: str, agent_flags: Sequence[str] = ()
) -> AsyncIterator[acp.ClientSideConnection]:
    """An ACP SDK client connection to the demo agent through the relay, initialized."""
    transport = await create_websocket_stream(url)
    conn = acp.connect_to_agent(ChunkClient(), transport)  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(20):
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        yield conn
    finally:
        await conn.close()


def reported(response: Any) -> dict[str, Any]:
    """What the demo agent says it received (its reply's _meta.demo)."""
    meta: dict[str, Any] = response.field_meta["demo"]
    return meta


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """The agent's filesystem: a workspace and a mapped project folder."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "alice" / "proj").mkdir(parents=True)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rule", "client_cwd"),
    [
        ("/Users/alice={box}/alice", "/Users/alice/proj"),
        ("C:\\Users\\alice={box}/alice", "C:\\Users\\alice\\proj"),
        ("c:/users/alice={box}/alice", "C:\\Users\\Alice\\proj"),
        ("//wsl$/Ubuntu/home/alice={box}/alice", "\\\\wsl.localhost\\Ubuntu\\home\\alice\\proj"),
    ],
)
async def test_editor_cwd_is_translated(box: Path, rule: str, client_cwd: str) -> None:
    """An editor on macOS, Windows or reaching WSL by UNC path gets its cwd mapped."""
    policy = rewrite_policy(box, [rule.format(box=box)])
    async with (
        live_relay(DEMO_AGENT, rewrite=policy) as live,
        demo_session(live.ticket_url()) as conn,
    ):
        session = await conn.new_session(cwd=client_cwd, mcp_servers=[])
    assert reported(session)["cwd"] == f"{box}/alice/proj"
    assert reported(session)["cwdExists"] is True


@pytest.mark.slow
async def test_session_load_is_translated_too(box: Path) -> None:
    """session/load carries a cwd and MCP servers too, and gets the same rewrite."""
    policy = rewrite_policy(box, [f"/Users/alice={box}/alice"], servers=[FILES_MCP])
    async with (
        live_relay(DEMO_AGENT, rewrite=policy) as live,
        demo_session(live.ticket_url()) as conn,
    ):
        loaded = await conn.load_session(cwd="/Users/alice/proj", session_id="s-1", mcp_servers=[])
    assert reported(loaded)["cwd"] == f"{box}/alice/proj"
    assert reported(loaded)["mcpServers"] == ["files"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fallback", "agent_cwd"),
    [("workspace", "{box}/ws"), ("keep", "/somewhere/else")],
)
async def test_fallback_when_no_rule_matches(box: Path, fallback: Fallback, agent_cwd: str) -> None:
    """Without a matching rule the cwd becomes the workspace, or is kept as it is."""
    policy = rewrite_policy(box, [f"/Users/alice={box}/alice"], fallback)
    async with (
        live_relay(DEMO_AGENT, rewrite=policy) as live,
        demo_session(live.ticket_url()) as conn,
    ):
        session = await conn.new_session(cwd="/somewhere/else", mcp_servers=[])
    assert reported(session)["cwd"] == agent_cwd.format(box=box)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fallback", "client_cwd", "why", "agent_path"),
    [
        ("reject", "/somewhere/else",
         "no --cwd-map rule matches it and --cwd-fallback is reject", None),
        ("workspace", "/Users/alice/proj/../../bob",
         "it climbs out of {box}/alice (mapped by /Users/alice={box}/alice)", None),
        ("workspace", "/Users/alice/missing",
         "{box}/alice/missing does not exist on the agent's machine", "{box}/alice/missing"),
    ],
)  # fmt: skip
async def test_refused_paths_get_invalid_params_from_the_relay(
    box: Path, fallback: Fallback, client_cwd: str, why: str, agent_path: str | None
) -> None:
    """Rejected, escaping and missing paths are answered -32602 by the relay, naming the
    client path, the agent path and the mappings; the agent never sees the request."""
    policy = rewrite_policy(box, [f"/Users/alice={box}/alice"], fallback)
    async with (
        live_relay(DEMO_AGENT, rewrite=policy) as live,
        demo_session(live.ticket_url()) as conn,
    ):
        with pytest.raises(acp.RequestError) as caught:
            await conn.new_session(cwd=client_cwd, mcp_servers=[])
    error = caught.value
    mappings = [f"/Users/alice={box}/alice", f"otherwise: {fallback}"]
    if fallback == "workspace":
        mappings[1] += f" ({box}/ws)"
    assert error.code == -32602
    assert str(error) == (
        f"cwd {client_cwd} cannot be used on the agent's machine: {why.format(box=box)}. "
        f"Mappings in force: {'; '.join(mappings)}"
    )
    assert error.data == {
        "field": "cwd",
        "clientPath": client_cwd,
        "agentPath": None if agent_path is None else agent_path.format(box=box),
        "mappings": mappings,
        "hint": "open a folder the relay maps, or ask its operator for a --cwd-map rule",
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("agent_flags", "names"),
    [(("--mcp-http",), ["editor-tool", "files", "search"]),
     (("--no-mcp-http",), ["editor-tool", "files"])],
)  # fmt: skip
async def test_mcp_servers_injected_and_gated(
    box: Path, agent_flags: tuple[str, ...], names: list[str]
) -> None:
    """The relay's MCP servers are appended; http ones only if the agent declared http."""
    policy = rewrite_policy(box, servers=[FILES_MCP, SEARCH_MCP])
    editor_tool = acp.schema.McpServerStdio(name="editor-tool", command="/x", args=[], env=[])
    async with (
        live_relay((*DEMO_AGENT, *agent_flags), rewrite=policy) as live,
        demo_session(live.ticket_url()) as conn,
    ):
        session = await conn.new_session(cwd="/anywhere", mcp_servers=[editor_tool])
    assert reported(session)["mcpServers"] == names


async def test_rewrite_keeps_every_other_field(box: Path, caplog: pytest.LogCaptureFixture) -> None:
    """_meta, unknown fields, the id's type and key order survive; other lines pass as sent."""
    policy = rewrite_policy(box, [f"/Users/alice={box}/alice"], servers=[FILES_MCP])
    request = (
        '{"jsonrpc":"2.0","id":"req-1","method":"session/new","params":{"_meta":{"x":[1,2]},'
        '"cwd":"/Users/alice/proj","zeta":true,"mcpServers":[],"alpha":"é"},"extra":null}'
    )
    expected = (
        (
            '{"jsonrpc":"2.0","id":"req-1","method":"session/new","params":{"_meta":{"x":[1,2]},'
            f'"cwd":"{box}/alice/proj","zeta":true,"mcpServers":[{json.dumps(FILES_MCP)}],'
            '"alpha":"é"},"extra":null}'
        )
        .replace(", ", ",")
        .replace(": ", ":")
    )
    untouched = (
        '{"jsonrpc":"2.0", "id": 7, "method":"session/prompt", "params": {"t":"session/new"}}'
    )
    async with live_relay(CAT, rewrite=policy) as live, connect(live.ticket_url()) as ws:
        await ws.send(request)
        await ws.send(untouched)
        async with asyncio.timeout(5):
            assert await ws.recv() == expected
            assert await ws.recv() == untouched
    logged = [r.msg for r in caplog.records if "session request rewritten" in str(r.msg)]
    assert len(logged) == 1
    assert isinstance(logged[0], dict)
    assert logged[0]["cwd_from"] == "/Users/alice/proj"
    assert logged[0]["cwd_to"] == f"{box}/alice/proj"
    assert logged[0]["mcp_injected"] == ["files"]


EDITOR_STDIO_MCP = {
    "name": "editor-tool",
    "command": "/Users/alice/bin/tool",
    "args": [],
    "env": [],
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-8-sig"]
)
async def test_a_session_request_in_another_encoding_never_reaches_the_agent(
    box: Path, encoding: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A session/new for /etc with a stdio MCP server, in UTF-16, UTF-32 or behind a UTF-8 BOM,
    is a valid text frame the demo agent's SDK would decode; under --cwd-fallback reject and
    --drop-client-stdio-mcp the relay answers it -32700 and the agent never sees it (issue 22,
    point 3)."""
    cwd = CwdPolicy((parse_rule(f"/Users/alice={box}/alice"),), "reject", str(box / "ws"), True)
    policy = RewritePolicy(cwd, McpPolicy(drop_client_stdio=True))
    hostile = {"cwd": "/etc", "mcpServers": [EDITOR_STDIO_MCP]}
    frame = json.dumps(jsonrpc(2, "session/new", hostile)).encode(encoding).decode()
    assert json.loads(frame.encode())["params"] == hostile  # what the agent's SDK would read
    plain = jsonrpc(3, "session/new", {**hostile, "cwd": "/Users/alice/proj"})
    async with live_relay(DEMO_AGENT, rewrite=policy) as live:
        async with connect(live.ticket_url()) as ws, asyncio.timeout(20):
            await ws.send(json.dumps(jsonrpc(1, "initialize", {"protocolVersion": 1})))
            await ws.send(frame)
            await ws.send(json.dumps(plain))
            answers = await answers_until(ws, 3)
        assert await until_idle(live.relay)
    [refused] = [a for a in answers if "error" in a]
    assert (refused["id"], refused["error"]["code"]) == (None, -32700)
    assert "UTF-8" in refused["error"]["data"]["hint"]
    assert [a["id"] for a in answers if "result" in a] == [1, 3]  # nothing for id 2
    demo = answers[-1]["result"]["_meta"]["demo"]
    assert (demo["cwd"], demo["mcpServers"]) == (f"{box}/alice/proj", [])
    [closed] = [r.msg for r in caplog.records if "connection closed" in str(r.msg)]
    assert isinstance(closed, dict)
    assert closed["messages_in"] == 2  # initialize and the plain session/new


def jsonrpc(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def answers_until(ws: Any, last_id: int) -> list[dict[str, Any]]:
    """The answers (results and errors) the socket brings, up to the one for ``last_id``."""
    answers: list[dict[str, Any]] = []
    while not answers or answers[-1].get("id") != last_id:
        message = json.loads(await ws.recv())
        if "method" not in message:
            answers.append(message)
    return answers


# -- what real upgrades are, and what spends a ticket (remote-transport conformance) --------


async def test_warm_agents_are_no_connections() -> None:
    """Warm agents leave /busy false (reported as warm) and take no place under
    --max-connections: the second socket is refused though agents wait."""
    async with live_relay(ECHO_AGENT, warm_agents=2, max_connections=1) as live:
        await until(lambda: live.relay.busy_report()["warm"] == 2, "two warm agents")
        idle = await busy(live.relay.port)
        async with connect(live.ticket_url()) as ws:
            await ws.send("{}")
            async with asyncio.timeout(5):
                assert await ws.recv() == "{}"
            status, _, _ = await refused(live.ticket_url())
            during = await busy(live.relay.port)
    assert (idle["busy"], idle["connections"], idle["warm"]) == (False, 0, 2)
    assert (status, during["busy"], during["connections"]) == (503, True, 1)


def test_http_side_loads_without_a_connections_code() -> None:
    """The server's HTTP side (/healthz, /busy, the upgrade's checks) loads without a
    connection's code: a fresh interpreter that imports it has none of those modules."""
    code = (
        "import sys, relay.server.serving; print(*(m for m in sys.modules if m in ("
        "'relay.server.connections.connection', 'relay.server.connections.carriers', "
        "'relay.core.resumesession', 'relay.server.agents.starting')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert (done.returncode, done.stdout.split()) == (0, [])
