"""``acp-relay connect`` end to end: an editor's side drives a real connect process.

The editor is the ACP Python SDK's client (``spawn_agent_process``) or raw pipes when a
test needs exact bytes. Connect runs as ``python -m relay connect`` against a relay in
this event loop (:func:`tests.support.live.live_relay`) or a purpose-built loopback server.
Everything stays on 127.0.0.1; the one DNS lookup is for a name under ``.invalid``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from structlog.testing import capture_logs
from websockets.asyncio.client import connect as ws_connect

from relay.client.link.editorerrors import PLAIN_TO_A_TLS_PORT, TLS_TO_A_PLAIN_PORT
from relay.commands import main
from tests.support.agents import AGENTS, DEMO_AGENT, FAILS_LOUDLY
from tests.support.cli import serve
from tests.support.clients import RecordingClient
from tests.support.connect import (
    CONNECT,
    TICKET_COMMAND,
    TIMEOUT,
    Editor,
    MiB,
    ask_then_leave,
    check_refused,
    closed_by_connect,
    editor,
    failures_logged,
    log_records,
    notification,
    piped_connect,
    refused_at_once,
    request,
    sdk_refused,
)
from tests.support.env import connect_env, secret_env
from tests.support.live import SECRET, live_relay, make_ticket
from tests.support.processes import bytes_written
from tests.support.servers import (
    Behaviour,
    HostileSocket,
    answer_plain_http,
    hostile_relay,
    loopback_server,
    self_signed_certificate,
    tls_echo_server,
    upgrade_then_fall_silent,
)
from tests.support.waiting import until, until_gone

CAT = ("cat",)


# -- carrying ACP ---------------------------------------------------------------------------


@pytest.mark.slow
async def test_sdk_drives_demo_agent_through_connect(tmp_path: Path) -> None:
    """The SDK launches connect as its agent: initialize, session/new and a prompt round trip."""
    ticket = make_ticket(subject="editor")
    client = RecordingClient()
    stderr_file = tmp_path / "connect.stderr"
    async with live_relay(DEMO_AGENT) as live:
        with stderr_file.open("wb") as err:
            async with spawn_agent_process(
                client,
                *CONNECT,
                live.url(),
                env=connect_env(ticket),
                transport_kwargs={"stderr": err.fileno()},
                observers=[client.observe],
            ) as (conn, proc):
                async with asyncio.timeout(TIMEOUT):
                    init = await conn.initialize(protocol_version=PROTOCOL_VERSION)
                    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
                    sid = session.session_id
                    reply = await conn.prompt(
                        session_id=sid, prompt=[text_block("hello through connect")]
                    )
                    await client.wait_for(lambda: len(client.texts(sid)) >= 4)
        assert proc.returncode == 0
        assert await until(lambda: not live.relay.connections)
    assert init.agent_info is not None
    assert init.agent_info.name == "acp-relay-demo"
    assert reply.stop_reason == "end_turn"
    assert "".join(client.texts(sid)[1:]) == "hello through connect"
    stderr = stderr_file.read_text()
    assert ticket not in stderr
    assert ticket.rsplit(".", 1)[1] not in stderr  # not even the signature
    events = [r["event"] for r in log_records(stderr)]
    assert events[:2] == ["connecting", "connected"]
    assert events[-1] == "connect finished"


@pytest.mark.slow
async def test_16_mib_lines_both_ways_and_lines_sent_before_the_socket_opens() -> None:
    """Lines written before the socket opens arrive; a 16 MiB line crosses both ways intact."""
    body = ("é✓" + "x" * 1021) * (16 * 1024)
    big = json.dumps({"jsonrpc": "2.0", "method": "big", "params": {"t": body}})
    async with (
        live_relay(CAT) as live,
        editor(live.url(), env=connect_env(make_ticket())) as ed,
    ):
        await ed.send(notification(1))  # connect is still starting: this waits in the pipe
        await ed.send(big.encode())
        assert await ed.receive() == notification(1)
        assert await ed.receive_line() == big.encode()
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    assert len(big.encode()) > 16 * MiB


async def test_stdin_eof_closes_1000_exits_0_and_the_agent_goes() -> None:
    """When the editor closes stdin, connect closes with 1000, exits 0, and the agent is gone."""
    with capture_logs() as relay_logs:
        async with (
            live_relay(CAT) as live,
            editor(live.url(), env=connect_env(make_ticket())) as ed,
        ):
            await ed.send(notification(1))
            assert await ed.receive() == notification(1)
            agents = [agent.pid for agent in live.relay.agents]
            await ed.close_stdin()
            assert await ed.exit_status() == 0
            assert await until_gone(agents)
            assert await ed.rest_of_stdout() == b""
    closed = [r for r in relay_logs if r["event"] == "connection closed"]
    assert [r["close_code"] for r in closed] == [1000]
    assert len(agents) == 1


async def test_sigterm_ends_connect_like_eof() -> None:
    """SIGTERM with no answer owed closes the socket with 1000 and exits 0, writing nothing;
    the agent on the far side goes."""
    async with live_relay(CAT) as live, editor(live.url(), env=connect_env(make_ticket())) as ed:
        await ed.send(notification(1))
        assert await ed.receive() == notification(1)
        agents = [agent.pid for agent in live.relay.agents]
        ed.proc.send_signal(signal.SIGTERM)
        assert await ed.exit_status() == 0
        assert await until_gone(agents)
        assert await ed.rest_of_stdout() == b""
    assert len(agents) == 1


async def prompt_streaming(ed: Editor, cwd: str) -> None:
    """initialize, session/new, then a long prompt, read up to its first streamed chunk."""
    await ed.send(request(1, "initialize", protocolVersion=PROTOCOL_VERSION))
    while (await ed.receive()).get("id") != 1:
        pass
    await ed.send(request(2, "session/new", cwd=cwd, mcpServers=[]))
    while "result" not in (answer := await ed.receive()):
        pass
    words = [{"type": "text", "text": "word " * 200}]
    await ed.send(request(3, "session/prompt", sessionId=answer["result"]["sessionId"],
                          prompt=words))  # fmt: skip
    while (await ed.receive()).get("method") != "session/update":
        pass


@pytest.mark.parametrize("resuming", [False, True], ids=["acp.v1", "resume-profile"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_during_a_streaming_prompt_answers_it_with_an_error(
    tmp_path: Path, sig: signal.Signals, resuming: bool
) -> None:
    """SIGTERM or SIGINT while a prompt streams from a slow agent: the prompt is answered
    once, with an error saying connect was stopped and by which signal; connect exits 128 +
    the signal's number, and the agent on the far side goes. The same with or without the
    resume profile."""
    slow = (*DEMO_AGENT, "--word-delay", "0.1")
    ticket = ("--ticket-command", TICKET_COMMAND) if resuming else ()
    env = connect_env(None if resuming else make_ticket())
    async with live_relay(slow) as live, editor(live.url(), *ticket, env=env) as ed:
        await prompt_streaming(ed, str(tmp_path))
        agents = [agent.pid for agent in live.relay.agents]
        ed.proc.send_signal(sig)
        rest = [json.loads(line) for line in (await ed.rest_of_stdout()).splitlines()]
        status = await ed.exit_status()
        assert await until_gone(agents)
        assert ("resumable" in ed.stderr.decode()) is resuming
    [answer] = [message for message in rest if message.get("id") == 3]
    assert answer["error"]["code"] == -32603
    assert answer["error"]["message"] == (
        f"connect was stopped by {sig.name} before the agent behind {live.url()} answered"
    )
    assert answer["error"]["data"] == {"url": live.url(), "cause": "stopped", "signal": sig.name}
    assert status == 128 + sig
    assert all(message.get("method") == "session/update" for message in rest if message != answer)


@pytest.mark.slow
async def test_backpressure_both_ways() -> None:
    """A non-reading agent stalls the editor, a non-reading editor stalls the agent: bounded."""
    sleeper = (sys.executable, "-c", "import time; time.sleep(60)")
    sent = 0

    async def fill(ed: Editor) -> None:
        nonlocal sent
        while True:
            await ed.send(b"x" * 65535)
            sent += 65536

    async with (
        live_relay(sleeper, kill_grace=0.2) as live,
        editor(live.url(), env=connect_env(make_ticket())) as ed,
    ):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(fill(ed), 1.0)
    assert 0 < sent < 16 * MiB

    flood = (sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('y' * 65535 + '\\n')")
    unread, stdout = os.pipe()  # connect's stdout, never read
    async with live_relay(flood, kill_grace=0.2) as live:
        proc = await asyncio.create_subprocess_exec(
            *CONNECT, live.url(), env=connect_env(make_ticket()), stdin=-1, stdout=stdout
        )
        os.close(stdout)
        try:
            assert await until(lambda: bool(live.relay.agents))
            agent = next(iter(live.relay.agents)).pid
            written = [-1, 0]
            while written[-1] != written[-2]:  # until the agent is blocked on a full pipe
                await asyncio.sleep(0.2)
                written.append(bytes_written(agent))
                assert len(written) < 30
        finally:
            proc.kill()
            await proc.wait()
            os.close(unread)
    assert 0 < written[-1] < 16 * MiB


# -- failures ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case", ["bad-signature", "expired", "origin", "wrong-path", "full"], ids=str
)
async def test_relay_refusals_are_answered_with_the_relays_reason(
    tmp_path: Path, case: str
) -> None:
    """401, 403, 404 and 503 reach the editor as errors quoting the relay's reason."""
    ticket = make_ticket(now=time.time() - 3600) if case == "expired" else make_ticket()
    if case == "bad-signature":
        ticket = make_ticket("some-other-secret")
    args = ("--header", "Origin: https://evil.example") if case == "origin" else ()
    async with live_relay(CAT, max_connections=1) as live:
        url = live.url(path="/wrong" if case == "wrong-path" else "/acp")
        async with ws_connect(live.ticket_url()) if case == "full" else _nothing():
            refused = await sdk_refused(
                url, *args, env=connect_env(ticket), stderr_file=tmp_path / "err"
            )
    reason = refused.error.data["reason"] if isinstance(refused.error.data, dict) else ""
    status, message = {
        "bad-signature": (401, f"relay refused the ticket (401): {reason}"),
        "expired": (401, f"relay refused the ticket (401): {reason}"),
        "origin": (403, f"relay refused the connection (403): {reason}"),
        "wrong-path": (404, f"relay has no ACP endpoint at {url} (404): {reason}"),
        "full": (503, f"relay is busy (503): {reason}"),
    }[case]
    expected_reason = {
        "bad-signature": r"ticket signature is invalid.*",
        "expired": r"ticket expired \(issued 36\d\d(\.\d)? s ago, max age 60 s\)",
        "origin": r"origin https://evil\.example is not allowed: only pages from this machine "
        r"may connect unless --allow-origin is given",
        "wrong-path": r"not found: the ACP endpoint is /acp",
        "full": r"relay is at its limit of 1 connection; retry in 5 s",
    }[case]
    assert re.fullmatch(expected_reason, reason), reason
    data: dict[str, Any] = {"url": url, "cause": "http", "status": status, "reason": reason}
    if case == "full":
        data["retryAfter"] = "5"
    check_refused(refused, message, data, secret=ticket)


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


async def test_connection_refused(tmp_path: Path) -> None:
    """A closed port: "cannot reach relay at URL: connection refused"."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connecting is refused
        url = f"ws://127.0.0.1:{closed.getsockname()[1]}/acp"
        ticket = make_ticket()
        refused = await sdk_refused(url, env=connect_env(ticket), stderr_file=tmp_path / "err")
    check_refused(
        refused,
        f"cannot reach relay at {url}: connection refused",
        {"url": url, "cause": "refused", "detail": "Connection refused"},
        secret=ticket,
    )


async def test_dns_failure(tmp_path: Path) -> None:
    """A name that never resolves (.invalid): "cannot reach relay at URL: cannot resolve HOST"."""
    url = "ws://relay.invalid/acp"
    ticket = make_ticket()
    refused = await sdk_refused(url, env=connect_env(ticket), stderr_file=tmp_path / "err")
    assert isinstance(refused.error.data, dict)
    detail = refused.error.data["detail"]
    check_refused(
        refused,
        f"cannot reach relay at {url}: cannot resolve relay.invalid ({detail})",
        {"url": url, "cause": "dns", "detail": detail},
        secret=ticket,
    )


@pytest.mark.slow
async def test_tls_self_signed_is_refused_unless_trusted_with_cacert(tmp_path: Path) -> None:
    """A self-signed wss:// server fails verification; with --cacert it carries lines."""
    cert, key = self_signed_certificate(tmp_path)
    ticket = make_ticket()
    async with tls_echo_server(cert, key) as port:
        url = f"wss://127.0.0.1:{port}/acp"
        refused = await sdk_refused(url, env=connect_env(ticket), stderr_file=tmp_path / "err")
        async with editor(url, "--cacert", str(cert), env=connect_env(ticket)) as ed:
            await ed.send(notification(1))
            assert await ed.receive() == notification(1)
            await ed.close_stdin()
            assert await ed.exit_status() == 0
    detail = (
        "certificate verify failed: self-signed certificate; if this relay's certificate is "
        "yours (self-signed, or from a private CA), trust it with --cacert FILE, the PEM of "
        "that CA or of the certificate"
    )
    check_refused(
        refused,
        f"TLS handshake with relay at {url} failed: {detail}",
        {"url": url, "cause": "tls", "detail": detail},
        secret=ticket,
    )


@asynccontextmanager
async def plain_http_server() -> AsyncIterator[int]:
    """A server without TLS that answers anything, a TLS hello too, in plain HTTP."""
    async with loopback_server(answer_plain_http) as port:
        yield port


@asynccontextmanager
async def plain_relay() -> AsyncIterator[int]:
    """A relay serving plain ws://, as behind a TLS proxy or on loopback."""
    async with live_relay(CAT) as live:
        yield live.relay.port


@pytest.mark.parametrize("server", [plain_http_server, plain_relay], ids=["http", "relay"])
async def test_wss_to_a_port_without_tls_says_so_at_once(
    tmp_path: Path, server: Callable[[], AbstractAsyncContextManager[int]]
) -> None:
    """wss:// to a port without TLS (a plain relay among them) fails at its first answer, long
    before --open-timeout, saying the server does not speak TLS and to use ws://."""
    ticket = make_ticket()
    async with server() as port:
        url = f"wss://127.0.0.1:{port}/acp"
        refused = await refused_at_once(url, env=connect_env(ticket), stderr_file=tmp_path / "e")
    detail = f"wrong version number: {TLS_TO_A_PLAIN_PORT}"
    check_refused(
        refused,
        f"TLS handshake with relay at {url} failed: {detail}",
        {"url": url, "cause": "tls", "detail": detail},
        secret=ticket,
    )


async def test_ws_to_a_tls_port_says_so_at_once(tmp_path: Path) -> None:
    """ws:// to a TLS listener (which hangs up on plain HTTP) fails at once, saying the
    port probably speaks TLS and to use wss://."""
    cert, key = self_signed_certificate(tmp_path)
    ticket = make_ticket()
    async with tls_echo_server(cert, key) as port:
        url = f"ws://127.0.0.1:{port}/acp"
        refused = await refused_at_once(url, env=connect_env(ticket), stderr_file=tmp_path / "e")
    detail = f"the server hung up without an HTTP answer: {PLAIN_TO_A_TLS_PORT}"
    check_refused(
        refused,
        f"relay at {url} did not accept a WebSocket: {detail}",
        {"url": url, "cause": "handshake", "detail": detail},
        secret=ticket,
    )


@pytest.mark.slow
async def test_agent_exit_answers_the_prompt_in_flight(tmp_path: Path) -> None:
    """A prompt of /exit 3 gets "agent exited with status 3"; so does every later request."""
    ticket = make_ticket()
    async with live_relay(DEMO_AGENT) as live:
        url = live.url()
        with (tmp_path / "err").open("wb") as err:
            async with spawn_agent_process(
                RecordingClient(),
                *CONNECT,
                url,
                env=connect_env(ticket),
                transport_kwargs={"stderr": err.fileno()},
            ) as (conn, proc):
                async with asyncio.timeout(TIMEOUT):
                    await conn.initialize(protocol_version=PROTOCOL_VERSION)
                    sid = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
                    with pytest.raises(RequestError) as prompt:
                        await conn.prompt(session_id=sid, prompt=[text_block("/exit 3")])
                    with pytest.raises(RequestError) as later:
                        await conn.new_session(cwd="/tmp", mcp_servers=[])
    data = {
        "url": url,
        "cause": "closed",
        "closedBy": "relay",
        "closeCode": 1011,
        "closeReason": "agent exited with status 3",
    }
    for error in (prompt.value, later.value):
        assert (error.code, str(error), error.data) == (-32603, "agent exited with status 3", data)
    assert proc.returncode == 1


async def test_a_failed_agents_last_stderr_line_reaches_the_editor(tmp_path: Path) -> None:
    """An agent that fails at start-up (run without its venv): the editor's error says its
    exit and the end of its last stderr line, the reason, with the relay's secret redacted."""
    line = (
        "python3: Error while finding module specification for 'relay.demo_agent' "
        f"(token {SECRET}) (ModuleNotFoundError: No module named 'relay')"
    )
    ticket = make_ticket()
    async with serve("--agent", shlex.join((*FAILS_LOUDLY, line)), env=secret_env()) as relay:
        url = f"ws://127.0.0.1:{relay.port}/acp"
        refused = await sdk_refused(url, env=connect_env(ticket), stderr_file=tmp_path / "err")
    message = (
        "agent exited with status 1: ...ion for 'relay.demo_agent' (token [redacted]) "
        "(ModuleNotFoundError: No module named 'relay')"
    )
    data = {
        "url": url,
        "cause": "closed",
        "closedBy": "relay",
        "closeCode": 1011,
        "closeReason": message,
    }
    check_refused(refused, message, data, secret=ticket)
    assert SECRET not in refused.stderr


@pytest.mark.slow
async def test_heartbeat_timeout_answers_the_request_in_flight(tmp_path: Path) -> None:
    """A relay that stops answering pings: the pending request gets the heartbeat error."""
    ticket = make_ticket()
    async with loopback_server(upgrade_then_fall_silent) as port:
        url = f"ws://127.0.0.1:{port}/acp"
        args = ("--ping-interval", "0.2", "--ping-timeout", "0.2")
        started = time.monotonic()
        refused = await sdk_refused(
            url, *args, env=connect_env(ticket), stderr_file=tmp_path / "err"
        )
    check_refused(
        refused,
        f"lost the relay at {url}: no answer to a heartbeat ping within 0.2 s",
        {
            "url": url,
            "cause": "heartbeat",
            "closedBy": "connect",
            "closeCode": 1011,
            "closeReason": "keepalive ping timeout",
            "pingTimeout": 0.2,
        },
        secret=ticket,
    )
    assert time.monotonic() - started < 5


async def test_after_a_failure_requests_are_answered_until_stdin_closes() -> None:
    """Every request gets the error, in order; notifications and responses get none; exit 1."""
    url = "ws://127.0.0.1:9/acp"
    async with editor(url, env=connect_env(make_ticket())) as ed:
        await ed.send(request(1, "initialize"))
        await ed.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {}})
        await ed.send({"jsonrpc": "2.0", "id": 40, "result": {}})  # answering the agent
        await ed.send(b"not json at all")
        await ed.send(request("two", "session/new"))
        first, second = await ed.receive(), await ed.receive()
        await asyncio.sleep(0.2)  # the behaviour under test: connect does not exit meanwhile
        assert ed.proc.returncode is None  # still answering until the editor is done
        await ed.send(request(3, "session/prompt"))
        third = await ed.receive()
        await ed.close_stdin()
        assert await ed.exit_status() == 1
        assert await ed.rest_of_stdout() == b""
    error = {
        "code": -32603,
        "message": f"cannot reach relay at {url}: connection refused",
        "data": {"url": url, "cause": "refused", "detail": "Connection refused"},
    }
    assert [first, second, third] == [
        {"jsonrpc": "2.0", "id": request_id, "error": error} for request_id in (1, "two", 3)
    ]


# -- a hostile relay, plain acp.v1 -----------------------------------------------------------


def plain_answers(*frames: tuple[bytes, bool]) -> Behaviour:
    """Read the editor's first line, answer with ``frames`` (data, whether text), then wait."""

    async def behave(sock: HostileSocket) -> None:
        await sock.ws.recv()
        for data, text in frames:
            await sock.ws.send(data, text=text)
        await sock.ws.wait_closed()

    return behave


async def test_a_text_frame_that_is_not_utf8_fails_the_connection_for_the_editor() -> None:
    """Plain acp.v1: a text frame that is not UTF-8 is refused by websockets (1007); the
    request in flight and later ones get an error naming it, stderr says it once, exit 1."""
    bad = b'{"jsonrpc":"2.0","id":1,"result":"\xc3"}'
    async with (
        hostile_relay(plain_answers((bad, True))) as relay,
        editor(relay.url(), env=connect_env(make_ticket())) as ed,
    ):
        answers, status = await ask_then_leave(
            ed, request(1, "initialize"), request(2, "session/new")
        )
    url = relay.url()
    reason = "invalid continuation byte at position 34"
    message = f"relay at {url} sent a text frame that is not UTF-8 (1007 invalid data: {reason})"
    error = closed_by_connect(url, message, 1007, reason)
    assert answers == [{"jsonrpc": "2.0", "id": i, "error": error} for i in (1, 2)]
    assert status == 1
    assert relay.closes == [(1007, reason)]
    assert failures_logged(ed) == [message]


async def test_binary_frames_from_a_plain_relay_are_ignored_with_a_warning() -> None:
    """Plain acp.v1: a binary frame is skipped with one warning each, as the relay does with a
    client's; the text frame after it reaches the editor."""
    answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode()
    async with (
        hostile_relay(plain_answers((b"\x00\x01", False), (answer, True))) as relay,
        editor(relay.url(), env=connect_env(make_ticket())) as ed,
    ):
        await ed.send(request(1, "initialize"))
        assert await ed.receive_line() == answer
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    warnings = [r for r in log_records(bytes(ed.stderr)) if r["level"] == "warning"]
    assert [(r["event"], r["size"]) for r in warnings] == [("binary frame ignored", 2)]
    assert relay.closes == [(1000, "")]


# -- usage ----------------------------------------------------------------------------------


GIVEN = {"ACP_RELAY_TICKET": "usage-test-ticket"}


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["ws://127.0.0.1:9/acp"], {}, "no ticket: set ACP_RELAY_TICKET"),
        (["http://h/acp?ticket=SeCrEt-TiCkEt"], {}, "expected a ws:// or wss:// URL"),
        (["ws://h/acp?ticket=SeCrEt-TiCkEt", "--ticket", "other"], {}, "one way only"),
        (["ws://h/acp", "--cacert", "/nowhere"], GIVEN, "wss://"),
        (["wss://h/acp", "--cacert", "/nowhere"], GIVEN, "/nowhere"),
        (["ws://h/acp", "--header", "Authorization: x"], GIVEN, "--ticket-in query"),
        (["ws://h/acp", "--header", "no colon"], GIVEN, "'Name: value'"),
    ],
    ids=["no-ticket", "scheme", "two-tickets", "cacert-ws", "cacert-missing", "authorization",
         "header"],
)  # fmt: skip
def test_usage_errors_exit_2_without_echoing_the_ticket(
    args: list[str], env: dict[str, str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Misconfiguration exits 2 with one line on stderr, nothing on stdout, no ticket."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.upper().startswith("ACP_RELAY_")]:
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        status = main(["connect", *args])
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err.startswith("acp-relay: ")
    assert err.count("\n") == 1, err
    assert says in err
    assert "SeCrEt-TiCkEt" not in err


# -- stdin's end: answers owed are written, never dropped -----------------------------------

SLOW = (sys.executable, str(AGENTS / "slow_answer.py"))


async def test_a_piped_request_is_answered_before_connect_exits() -> None:
    """`printf '{initialize}\\n' | acp-relay connect URL` prints the agent's reply, exits 0."""
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": PROTOCOL_VERSION}}).encode()  # fmt: skip
    async with live_relay(DEMO_AGENT) as live:
        status, out, err = await piped_connect(live.url(), line + b"\n", connect_env(make_ticket()))
    assert status == 0, err.decode()
    reply = json.loads(out)
    assert (reply["id"], reply["result"]["agentInfo"]["name"]) == (1, "acp-relay-demo")


async def test_connect_waits_for_a_slow_answer_after_stdin_ends() -> None:
    """An agent answering after stdin's end still gets its answer to the editor."""
    requests = b"".join(json.dumps(request(i)).encode() + b"\n" for i in (1, 2))
    async with live_relay((*SLOW, "0.4")) as live:
        status, out, err = await piped_connect(live.url(), requests, connect_env(make_ticket()))
    assert status == 0, err.decode()
    assert [json.loads(line)["id"] for line in out.splitlines()] == [1, 2]


async def test_sigterm_while_waiting_answers_what_is_owed_with_an_error() -> None:
    """Stopped while an answer is owed after stdin's end: the request gets an error saying
    so, nothing dropped, and connect exits 128 + SIGTERM's number."""
    async with (
        live_relay(("sh", "-c", "cat > /dev/null")) as live,
        editor(live.url(), env=connect_env(make_ticket())) as ed,
    ):
        await ed.send(request(5, "session/prompt"))
        await ed.close_stdin()
        assert await until(lambda: "waiting for answers" in ed.stderr.decode())
        ed.proc.send_signal(signal.SIGTERM)
        answer = await ed.receive()
        assert await ed.exit_status() == 128 + signal.SIGTERM
    assert answer["id"] == 5
    assert answer["error"]["data"] == {"url": live.url(), "cause": "stopped", "signal": "SIGTERM"}
