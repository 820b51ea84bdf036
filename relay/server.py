"""``acp-relay serve``: admit WebSockets by ticket and run one agent process per socket.

The WebSocket layer is ``websockets``' asyncio server. Admission (origin, ticket,
capacity) is decided by :mod:`relay.admission` before the upgrade, so a refused
request never starts an agent. Each accepted socket gets its own agent process; the
pumps of :mod:`relay.pump` carry lines both ways until either side goes.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State

from relay import __version__, devconsole
from relay.admission import Policy, Refusal, admit, ticket_from_request
from relay.agent import AgentProcess, AgentStartError, Exit, drain_stderr
from relay.framing import FrameRefused
from relay.logs import get_logger
from relay.pump import Counters, Ended, frames_to_lines, lines_to_frames
from relay.rewrite import RewritePolicy, Rewritten, SessionRewriter
from relay.ticket import Claims, ReplayGuard, mint, new_nonce
from relay.tracefile import ConnectionTrace

RECEIVE_QUEUE_FRAMES = 1
CLOSE_TIMEOUT = 2.0  # seconds to wait for the client's close frame
STDOUT_EOF_EXIT_WAIT = 0.2  # seconds an agent that closed its stdout has to exit by itself
MAX_REASON_BYTES = 123  # RFC 6455 limit on a close reason


@dataclass(frozen=True)
class RelayConfig:
    """What ``serve`` needs, resolved: no files or environment are read past this point."""

    host: str
    port: int
    path: str
    agent_argv: tuple[str, ...]
    workspace: str
    agent_env: dict[str, str]
    policy: Policy
    max_message_bytes: int
    ping_interval: float
    ping_timeout: float
    kill_grace: float
    open_timeout: float
    rewrite: RewritePolicy | None = None
    console: bool = False  # serve the dev console at / (only under --dev)
    trace_dir: str | None = None  # one NDJSON trace file per connection
    trace_max_bytes: int = 16 * 1024 * 1024


@dataclass
class Admission:
    """A socket that passed admission and awaits its handler."""

    conn_id: str
    claims: Claims
    opened: float = field(default_factory=time.monotonic)


class Relay:
    """The relay server: admission, connection bookkeeping, /healthz and /busy."""

    def __init__(self, config: RelayConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.replay_guard = ReplayGuard()
        self.log = get_logger("relay.server")
        self.pending: dict[ServerConnection, Admission] = {}
        self.sessions: set[str] = set()
        self.agents: set[AgentProcess] = set()
        self.idle_since: float | None = time.monotonic()
        self.shutting_down = False
        self._server: Server | None = None
        self.console = devconsole.load() if config.console else None

    async def start(self) -> None:
        """Listen; the bound port is then in :attr:`port`."""
        c = self.config
        self._server = await serve(
            self._handle,
            c.host,
            c.port,
            process_request=self._process_request,
            process_response=self._process_response,
            compression=None,
            open_timeout=c.open_timeout,
            ping_interval=c.ping_interval,
            ping_timeout=c.ping_timeout,
            close_timeout=CLOSE_TIMEOUT,
            max_size=c.max_message_bytes,
            # Frames waiting for the agent: one. Throughput is the same as with websockets'
            # default of 16 (measured), and memory per socket stays near 2 messages.
            max_queue=RECEIVE_QUEUE_FRAMES,
            server_header=None,
        )

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def shutdown(self) -> None:
        """Stop accepting, close sockets with 1001, stop every agent; return when all are gone."""
        self.shutting_down = True
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # -- HTTP, before the upgrade -------------------------------------------------

    def kill_agents(self) -> None:
        """Last resort when shutdown overruns: SIGKILL every agent's process group."""
        for agent in self.agents:
            agent.kill_group()

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if self.console is not None and path in devconsole.PATHS and not _is_upgrade(request):
            return self._console(request, path, self.console)
        if path == "/healthz":
            return _text_response(200, "ok\n")
        if path == "/busy":
            return _json_response(200, self.busy_report())
        if path != self.config.path:
            return _text_response(404, f"not found: the ACP endpoint is {self.config.path}\n")
        return self._admit(ws, request)

    def _console(self, request: Request, path: str, assets: devconsole.Assets) -> Response:
        """The dev console's files; the page carries a fresh ticket, never logged."""
        policy = self.config.policy
        host = devconsole.page_host(request.headers.get("Host"), policy.allow_origins)
        if host is None:
            self.log.warning(
                "console refused",
                reason="page origin not allowed",
                host=request.headers.get("Host"),
            )
            return _text_response(
                403, "the dev console is only served to an origin allowed to connect\n"
            )
        body, content_type = assets.files[path]
        if path == devconsole.INDEX:
            ticket = fresh_ticket(
                policy.secrets[0], now=self.clock(), subject="dev-console", audience=policy.audience
            )
            body = devconsole.render_index(
                body,
                ticket=ticket,
                path=self.config.path,
                cwd=self.config.workspace,
                version=__version__,
            )
        return _response(200, body, content_type, devconsole.headers(host))

    def _admit(self, ws: ServerConnection, request: Request) -> Response | None:
        verdict = admit(
            ticket=ticket_from_request(request.path, request.headers.get("Authorization")),
            origin=request.headers.get("Origin"),
            open_connections=self._open_count(),
            policy=self.config.policy,
            replay_guard=self.replay_guard,
            now=self.clock(),
        )
        if isinstance(verdict, Refusal):
            self.log.warning(
                "connection refused",
                status=verdict.status,
                reason=verdict.reason,
                remote=_remote(ws),
            )
            return _text_response(verdict.status, verdict.reason + "\n", verdict.headers)
        self.pending[ws] = Admission(str(uuid.uuid4()), verdict.claims)
        return None

    def _process_response(
        self, ws: ServerConnection, request: Request, response: Response
    ) -> Response | None:
        admission = self.pending.get(ws)
        if admission is None:
            return None
        if response.status_code == http.HTTPStatus.SWITCHING_PROTOCOLS:
            response.headers["Acp-Connection-Id"] = admission.conn_id
        else:
            del self.pending[ws]
        return None

    def _open_count(self) -> int:
        for ws in [ws for ws in self.pending if ws.state is State.CLOSED]:
            del self.pending[ws]
        return len(self.sessions) + len(self.pending)

    def busy_report(self) -> dict[str, Any]:
        """The supervisor's view: busy while any socket is open, however silent."""
        count = self._open_count()  # sockets in their upgrade count too: they will be open
        idle = None if count or self.idle_since is None else time.monotonic() - self.idle_since
        idle = None if idle is None else round(idle, 3)
        return {"busy": count > 0, "connections": count, "idle_seconds": idle}

    # -- after the upgrade --------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        admission = self.pending.pop(ws, None)
        if admission is None:  # cannot happen: every upgrade went through _admit
            await ws.close(1011, "internal error: connection was not admitted")
            return
        session = Session(self, ws, admission)
        self.sessions.add(admission.conn_id)
        self.idle_since = None
        try:
            await session.run()
        finally:
            session.end_trace()
            self.sessions.discard(admission.conn_id)
            if not self.sessions:
                self.idle_since = time.monotonic()
            self._log_state()

    def _log_state(self) -> None:
        """At debug level, what the relay holds after each connection: a leak shows here."""
        if logging.getLogger("relay.server").isEnabledFor(logging.DEBUG):
            self.log.debug(
                "relay state",
                sessions=len(self.sessions),
                pending=len(self.pending),
                agents=len(self.agents),
                tasks=len(asyncio.all_tasks()),
            )


class Session:
    """One socket and its agent, from the agent's start to both being gone."""

    def __init__(self, relay: Relay, ws: ServerConnection, admission: Admission) -> None:
        self.relay = relay
        self.config = relay.config
        self.ws = ws
        self.admission = admission
        self.up = Counters()  # client -> agent
        self.down = Counters()  # agent -> client
        self.log = get_logger("relay.session", conn=admission.conn_id)
        self.stdout_done = asyncio.Event()  # stdout read to its end, or the socket gone
        self.stdout_eof = asyncio.Event()  # the agent's stdout ended and all of it was handed on
        self.agent_stdout = IdleClock()  # how long the pump has waited on an empty stdout
        self.rewriter = SessionRewriter(self.config.rewrite, exists=os.path.isdir)
        self.exit: Exit | None = None  # the agent's, once it is gone
        self.trace: ConnectionTrace | None = None
        if self.config.trace_dir is not None:
            self.trace = ConnectionTrace.open(
                self.config.trace_dir, admission.conn_id, self.config.trace_max_bytes, self.log
            )

    async def run(self) -> None:
        """Start the agent, pump until one side goes, then stop the other and log."""
        try:
            agent = await AgentProcess.start(
                self.config.agent_argv, cwd=self.config.workspace, env=self.config.agent_env
            )
        except AgentStartError as exc:
            self.log.error("agent failed to start", why=str(exc), remote=_remote(self.ws))
            self._trace_opened(None)
            await self.ws.close(1011, _reason(f"agent failed to start: {exc}"))
            return
        self.log = self.log.bind(
            pid=agent.pid, remote=_remote(self.ws), subject=self.admission.claims.sub
        )
        self.log.info("connection opened")
        self._trace_opened(agent.pid)
        self.relay.agents.add(agent)
        try:
            exit_ = await self._pump(agent)
        finally:
            self.relay.agents.discard(agent)
        self._log_closed(exit_)

    async def _pump(self, agent: AgentProcess) -> Exit:
        stderr = asyncio.create_task(drain_stderr(agent.stderr, self.log))
        to_agent = asyncio.create_task(self._client_to_agent(agent))
        to_client = asyncio.create_task(self._agent_to_client(agent))
        try:
            return await self._supervise(agent, (to_agent, to_client))
        finally:
            to_agent.cancel()
            to_client.cancel()
            await asyncio.gather(to_agent, to_client, return_exceptions=True)
            await _bounded(stderr, self.config.kill_grace)
            agent.release()

    async def _client_to_agent(self, agent: AgentProcess) -> None:
        ended = await frames_to_lines(
            self.ws,
            agent.stdin,
            transform=self._client_line,
            counters=self.up,
            log=self.log,
            trace=None if self.trace is None else self.trace.client_frame,
        )
        if ended is Ended.PIPE_CLOSED:
            # The agent takes nothing more. Keep reading, so that a close from the client is
            # seen at once rather than after the close timeout, and drop what comes.
            with suppress(ConnectionClosed):
                async for _ in self.ws:
                    if not self.up.dropped:
                        self.log.warning("agent's stdin is closed: client messages are dropped")
                    self.up.dropped += 1

    def _client_line(self, line: bytes) -> bytes | FrameRefused:
        """The session-opening rewrite, logged: one line per rewrite or refusal."""
        result = self.rewriter.client_line(line)
        if isinstance(result, Rewritten):
            self.log.info("session request rewritten", **result.report.fields())
            if self.trace is not None:
                self.trace.rewritten(result.report)
            return result.line
        if isinstance(result, FrameRefused):
            self.log.warning("session request refused", reason=result.reason)
        return result

    async def _agent_to_client(self, agent: AgentProcess) -> None:
        observe = self.rewriter.agent_line if self.rewriter.watches_agent else None
        try:
            await lines_to_frames(
                self.agent_stdout.watch(agent.stdout),
                self.ws,
                max_bytes=self.config.max_message_bytes,
                counters=self.down,
                log=self.log,
                observe=observe,
                trace=None if self.trace is None else self.trace.agent_line,
            )
            self.stdout_eof.set()
        except ConnectionClosed:
            pass
        finally:
            self.stdout_done.set()
        # Socket gone or stdout closed: keep draining so the agent never blocks on a full pipe.
        while await agent.stdout.read(1 << 16):
            pass

    async def _supervise(
        self, agent: AgentProcess, pumps: tuple[asyncio.Task[Any], asyncio.Task[Any]]
    ) -> Exit:
        """Wait for the first sign that the connection is over, and end it accordingly.

        The agent exits: flush, close with its status. The socket goes: stop the agent.
        The agent closes its stdout but runs on: it can say nothing more, stop it. A pump
        fails (a relay bug): say so on the socket, stop the agent. Nothing waits forever.
        """
        exited = asyncio.create_task(agent.wait())
        closed = asyncio.create_task(self.ws.wait_closed())
        eof = asyncio.create_task(self.stdout_eof.wait())
        crashed = asyncio.create_task(_first_failure(pumps))
        watched = {exited, closed, eof, crashed}
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if crashed.done():
                return await self._relay_failed(agent, crashed.result())
            if not exited.done() and not closed.done() and eof.done():
                # Agents close stdout as they exit: give the exit a moment to arrive.
                await asyncio.wait({exited, closed}, timeout=STDOUT_EOF_EXIT_WAIT)
                if not exited.done() and not closed.done():
                    return await self._stdout_closed(agent)
            if exited.done():
                return await self._agent_gone(agent, exited.result(), closed)
            return await agent.stop(self.config.kill_grace, eof_first=not self.relay.shutting_down)
        finally:
            for task in watched:
                task.cancel()

    async def _agent_gone(
        self,
        agent: AgentProcess,
        exit_: Exit,
        closed: asyncio.Task[None],
    ) -> Exit:
        """Flush what the agent wrote, then close the socket with its exit status.

        The flush ends with the end of stdout, which comes once the agent's process group
        is gone. A process that left the group may hold stdout open for ever: once the
        group is gone, the wait ends when the relay has waited ``kill_grace`` on an
        empty pipe.
        """
        grace = self.config.kill_grace
        children = asyncio.create_task(agent.stop_children(grace))
        flushed = asyncio.create_task(self.stdout_done.wait())
        try:
            while not (flushed.done() or closed.done()):
                if not children.done():
                    wanted = {flushed, closed, children}
                    await asyncio.wait(wanted, return_when=asyncio.FIRST_COMPLETED)
                    continue
                idle = self.agent_stdout.idle_for()
                if idle >= grace:
                    self.log.warning(
                        "agent's stdout held open outside its process group: closing anyway"
                    )
                    break
                await asyncio.wait({flushed, closed}, timeout=grace - idle)
        finally:
            flushed.cancel()
        await self.ws.close(exit_.close_code, _reason(exit_.reason))
        await children
        return exit_

    async def _stdout_closed(self, agent: AgentProcess) -> Exit:
        """The agent closed its stdout and runs on: stop it, then close with its status."""
        self.log.warning("agent closed its stdout but is still running: stopping it")
        exit_ = await agent.stop(self.config.kill_grace)
        await self.ws.close(exit_.close_code, _reason(exit_.reason))
        return exit_

    async def _relay_failed(self, agent: AgentProcess, error: BaseException) -> Exit:
        """A pump failed: a bug in the relay. Close with 1011 rather than hang, stop the agent."""
        self.log.error("relay error", exc_info=error)
        await self.ws.close(1011, _reason(f"relay error: {type(error).__name__}"))
        return await agent.stop(self.config.kill_grace, eof_first=not self.relay.shutting_down)

    def _trace_opened(self, pid: int | None) -> None:
        if self.trace is not None:
            request = self.ws.request
            self.trace.opened(
                conn=self.admission.conn_id,
                path=request.path if request is not None else "",
                remote=_remote(self.ws),
                subject=self.admission.claims.sub,
                agent=self.config.agent_argv,
                pid=pid,
            )

    def end_trace(self) -> None:
        """The connection is over: write the trace's last record and close its file."""
        if self.trace is None:
            return
        self.trace.closed(
            exit_status=None if self.exit is None else self.exit.returncode,
            close_code=None if self.ws.close_code is None else int(self.ws.close_code),
            close_reason=self.ws.close_reason,
            messages_in=self.up.messages,
            messages_out=self.down.messages,
            dropped_out=self.down.dropped,
        )
        self.trace = None

    def _log_closed(self, exit_: Exit) -> None:
        self.exit = exit_
        self.log.info(
            "connection closed",
            exit_status=exit_.returncode,
            close_code=None if self.ws.close_code is None else int(self.ws.close_code),
            close_reason=self.ws.close_reason,
            messages_in=self.up.messages,
            bytes_in=self.up.bytes,
            messages_out=self.down.messages,
            bytes_out=self.down.bytes,
            dropped_out=self.down.dropped,
            dropped_in=self.up.dropped,
            duration=round(time.monotonic() - self.admission.opened, 3),
        )


class IdleClock:
    """Times the waits of a reader on an empty pipe: how long has it waited, right now?"""

    def __init__(self) -> None:
        self._since: float | None = None
        self._reader: asyncio.StreamReader | None = None

    def watch(self, reader: asyncio.StreamReader) -> IdleClock:
        self._reader = reader
        return self

    async def read(self, n: int) -> bytes:
        """``reader.read(n)``, timed."""
        assert self._reader is not None
        self._since = time.monotonic()
        try:
            return await self._reader.read(n)
        finally:
            self._since = None

    def idle_for(self) -> float:
        """Seconds the current read has waited; 0 when no read is waiting."""
        return 0.0 if self._since is None else time.monotonic() - self._since


async def _first_failure(tasks: Sequence[asyncio.Task[Any]]) -> BaseException:
    """The exception of the first of ``tasks`` to fail; waits for ever if none does."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                return error
    await asyncio.Future()  # every pump ended normally: nothing to report, ever
    raise AssertionError("unreachable")


def fresh_ticket(
    secret: str,
    *,
    now: float | None = None,
    subject: str,
    audience: str | None = None,
    ttl: float | None = None,
) -> str:
    """A new single-use ticket: the system's randomness, and its clock unless ``now``."""
    return mint(
        secret,
        now=time.time() if now is None else now,
        nonce=new_nonce(os.urandom(16)),
        subject=subject,
        audience=audience,
        ttl=ttl,
    )


async def _bounded(task: asyncio.Task[None], seconds: float) -> None:
    try:
        await asyncio.wait_for(task, max(seconds, 0.1))
    except Exception:  # TimeoutError included
        task.cancel()


def _reason(text: str) -> str:
    """Cut a close reason to the 123 bytes RFC 6455 allows."""
    data = text.encode()
    if len(data) <= MAX_REASON_BYTES:
        return text
    return data[: MAX_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


def _is_upgrade(request: Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def _remote(ws: ServerConnection) -> str:
    address = ws.remote_address
    if isinstance(address, Sequence) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _text_response(status: int, body: str, headers: Sequence[tuple[str, str]] = ()) -> Response:
    return _response(status, body.encode(), "text/plain; charset=utf-8", headers)


def _json_response(status: int, payload: object) -> Response:
    return _response(status, json.dumps(payload).encode(), "application/json", ())


def _response(
    status: int, body: bytes, content_type: str, extra: Sequence[tuple[str, str]]
) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
            ("Cache-Control", "no-store"),
            *extra,
        ]
    )
    return Response(status, http.HTTPStatus(status).phrase, headers, body)
