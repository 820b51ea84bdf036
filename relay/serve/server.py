"""``acp-relay serve``: admit WebSockets by ticket and run one connection per socket.

The WebSocket layer is ``websockets``' asyncio server. Admission (origin, ticket,
capacity) is decided by :mod:`relay.core.admission` before the upgrade, so a refused
request never starts an agent. Each accepted socket becomes a
:class:`relay.connections.connection.Connection` with its own agent process. This module also
answers ``/healthz``, ``/busy`` and, under ``--dev``, the dev console.
"""

from __future__ import annotations

import asyncio
import http
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Subprotocol

from relay import __version__
from relay.config.resolved import RelayConfig
from relay.connections.agent import AgentProcess, Guard
from relay.connections.attachments import Attachment
from relay.connections.carriers import Carrier, DirectFrames, ReplayWindow
from relay.connections.connection import Connection, RelayContext
from relay.core.admission import Refusal, admit, ticket_from_request
from relay.core.profile import (
    CANNOT_RESUME,
    NO_CONNECTION,
    PROFILE,
    PROFILE_ERROR,
    Open,
    ProfileError,
    Resume,
    parse_first_frame,
)
from relay.core.session import Session
from relay.core.tickets import MIN_NONCE_BYTES, Claims, ReplayGuard, mint, new_nonce
from relay.core.upgrade import ACP_V1, HandshakeGate, Shape, check_upgrade, duplicated
from relay.observe.logs import get_logger
from relay.observe.metrics import Exposition
from relay.observe.stats import RelayStats
from relay.serve import browsermodule as webassets
from relay.serve import devconsole
from relay.serve.httpedge import guarded, json_response, response, serve_metrics, text_response
from relay.serve.listener import cannot_listen
from relay.serve.spenttickets import SpentTickets

if TYPE_CHECKING:
    from relay.connections.warmagents import WarmAgents

__all__ = ["Relay", "RelayConfig"]

RECEIVE_QUEUE_FRAMES = 1
CLOSE_TIMEOUT = 2.0  # seconds to wait for the client's close frame
METRICS_PATH = "/metrics"  # Prometheus text format; keep it off the public side, like /busy


@dataclass
class PendingSocket:
    """A socket that passed admission, counted as a connection until its own is registered
    (or it is refused): the resume profile's open frame comes after the upgrade."""

    conn_id: str
    claims: Claims
    subprotocol: str | None = None  # the one the relay selects
    opened: float = field(default_factory=time.monotonic)


class Relay:
    """The relay server: admission, connection bookkeeping, /healthz and /busy."""

    def __init__(
        self,
        config: RelayConfig,
        *,
        clock: Callable[[], float] = time.time,
        guard: Guard | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.replay_guard = ReplayGuard()
        self.log = get_logger("relay.server")
        self.pending: dict[ServerConnection, PendingSocket] = {}
        self.connections: dict[str, Connection] = {}  # attached or detached
        self.lives: set[asyncio.Task[None]] = set()  # every connection's lifecycle
        self.agents: set[AgentProcess] = set()
        self.idle_since: float | None = time.monotonic()
        self.shutting_down = False
        self._server: Server | None = None
        self._metrics_server: asyncio.Server | None = None
        self.console = _console(config) if config.console else None
        self.gate = HandshakeGate()
        self.stats = RelayStats()
        self.warm: WarmAgents | None = None
        if config.warm_agents > 0:
            from relay.connections.warmagents import (
                relays_warm_agents,  # loaded only with --warm-agents
            )

            self.warm = relays_warm_agents(config, self.agents, self.stats, guard)
        self.context = RelayContext(
            self.agents, lambda: self.shutting_down, self.stats, guard, self.warm
        )
        self.exposition = Exposition(self.stats, self._gauges)
        self.spent: SpentTickets | None = None
        if config.state_dir is not None:
            self.spent = SpentTickets(config.state_dir, self.replay_guard, clock())

    async def start(self, sock: socket.socket | None = None) -> None:
        """Listen (on ``sock`` when it is bound already, see :mod:`relay.serve.listener`); the bound
        port is then in :attr:`port` (and /metrics', if apart, in :attr:`metrics_port`)."""
        c = self.config
        if c.metrics_listen is not None:
            host, port = c.metrics_listen
            try:
                self._metrics_server = await serve_metrics(
                    host, port, self.exposition.render, request_seconds=c.open_timeout
                )
            except OSError as exc:
                raise cannot_listen(host, port, exc, flag="--metrics-listen") from exc
        address: dict[str, Any] = {"sock": sock} if sock else {"host": c.host, "port": c.port}
        self._server = await serve(
            self._handle,
            **address,
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
            select_subprotocol=self._select_subprotocol,
            create_connection=guarded(self.gate, self.log, c.path, self.stats),
        )
        if self.warm is not None:
            self.warm.start()

    @property
    def metrics_port(self) -> int | None:
        if self._metrics_server is None:
            return None
        port: int = self._metrics_server.sockets[0].getsockname()[1]
        return port

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def addresses(self) -> list[str]:
        """Where the relay listens, as bound: ``HOST:PORT`` per socket (IPv6 in brackets)."""
        assert self._server is not None
        return [bracketed_address(sock.getsockname()) for sock in self._server.sockets]

    async def shutdown(self) -> None:
        """Stop accepting, close sockets with 1001, stop every agent; return when all are gone."""
        self.shutting_down = True
        warm = asyncio.create_task(self.warm.close()) if self.warm is not None else None
        for connection in list(self.connections.values()):
            connection.request_stop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.lives:
            await asyncio.gather(*self.lives, return_exceptions=True)
        if warm is not None:
            await warm
        if self.spent is not None:
            self.spent.close()
            self.spent = None
        if self._metrics_server is not None:
            self._metrics_server.close()
            await self._metrics_server.wait_closed()

    # -- HTTP, before the upgrade -------------------------------------------------

    def kill_agents(self) -> None:
        """Last resort when shutdown overruns: SIGKILL every agent's process group."""
        for agent in self.agents:
            agent.kill_group()

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        headers = list(request.headers.raw_items())
        duplicate = duplicated(headers)
        if duplicate is not None:
            return self._refuse(ws, duplicate)
        upgrade = _is_upgrade(request)
        if not upgrade and (plain := self._plain_get(request, path)) is not None:
            return plain
        if path != self.config.path:
            reason = f"not found: the ACP endpoint is {self.config.path}"
            if upgrade:
                return self._refuse(ws, Refusal(404, reason, kind="path"))
            return text_response(404, reason + "\n")
        shape = check_upgrade(headers, speaks=self._speaks())
        if isinstance(shape, Refusal):
            return self._refuse(ws, shape)
        return self._admit(ws, request, shape)

    def _plain_get(self, request: Request, path: str) -> Response | None:
        """The answer to a request that is no WebSocket upgrade, on a path the relay serves
        besides the ACP endpoint (the console, the browser module, /healthz, /busy,
        /metrics); None for any other path."""
        if self.console is not None and path in devconsole.PATHS:
            return self._console(request, path, self.console)
        if path == webassets.MODULE_PATH:
            origin = request.headers.get("Origin")
            return webassets.module_response(origin, self.config.policy.allow_origins)
        if path == "/healthz":
            return text_response(200, "ok\n")
        if path == "/busy":
            return json_response(200, self.busy_report())
        if path == METRICS_PATH:
            body, content_type = self.exposition.render()
            return response(200, body, content_type, ())
        return None

    def _speaks(self) -> tuple[str, ...]:
        """The subprotocols the relay selects, in order of preference."""
        return (PROFILE, ACP_V1) if self.config.resume_grace > 0 else (ACP_V1,)

    def _refuse(self, ws: ServerConnection, refusal: Refusal) -> Response:
        self.stats.refusal(refusal.kind)
        self.log.warning(
            "connection refused", status=refusal.status, reason=refusal.reason, remote=_remote(ws)
        )
        return text_response(refusal.status, refusal.reason + "\n", refusal.headers)

    def _console(self, request: Request, path: str, console: devconsole.Console) -> Response:
        """The dev console's files and tickets (the tickets and the token are never logged)."""
        answer = devconsole.answer(console, path, request.path, request.headers, self._ticket)
        if answer.refused is not None:
            self.log.warning(
                "console refused", reason=answer.refused, host=request.headers.get("Host")
            )
        return answer.response

    def _ticket(self) -> str:
        """A fresh ticket for the dev console's page."""
        policy = self.config.policy
        nonce = new_nonce(os.urandom(MIN_NONCE_BYTES))
        return mint(
            policy.secrets[0],
            now=self.clock(),
            nonce=nonce,
            subject="dev-console",
            audience=policy.audience,
        )

    def _admit(self, ws: ServerConnection, request: Request, shape: Shape) -> Response | None:
        now = self.clock()
        verdict = admit(
            ticket=ticket_from_request(
                request.path, request.headers.get("Authorization"), shape.ticket
            ),
            origin=request.headers.get("Origin"),
            open_connections=self._open_count(),
            policy=self.config.policy,
            replay_guard=self.replay_guard,
            now=now,
        )
        if isinstance(verdict, Refusal):
            return self._refuse(ws, verdict)
        if self.spent is not None:
            claims = verdict.claims
            self.spent.spent(claims.jti, claims.expires_at(self.config.policy.ticket_ttl), now)
        self.pending[ws] = PendingSocket(str(uuid.uuid4()), verdict.claims, shape.select)
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
        return len(self.connections) + len(self.pending)

    def _gauges(self) -> dict[str, float]:
        report = self.busy_report()
        detached = report["detached"]
        attached = len(self.connections) - detached
        return {"attached": attached, "detached": detached, "warm": report["warm"]}

    def busy_report(self) -> dict[str, Any]:
        """The supervisor's view: busy while any connection lives, attached or detached;
        warm agents waiting for a connection are no connection (``warm`` counts them)."""
        count = self._open_count()  # sockets in their upgrade count too: they will be open
        idle = None if count or self.idle_since is None else time.monotonic() - self.idle_since
        idle = None if idle is None else round(idle, 3)
        detached = sum(1 for connection in self.connections.values() if connection.detached)
        warm = 0 if self.warm is None else self.warm.ready
        return {
            "busy": count > 0,
            "connections": count,
            "detached": detached,
            "warm": warm,
            "idle_seconds": idle,
        }

    # -- after the upgrade --------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        admitted = self.pending.get(ws)
        if admitted is None:  # cannot happen: every upgrade went through _admit
            await ws.close(CloseCode.INTERNAL_ERROR, "internal error: connection was not admitted")
            return
        attachment = Attachment(ws)
        connection = None
        try:
            first = await self._first_frame(attachment) if ws.subprotocol == PROFILE else None
            if ws.subprotocol != PROFILE or isinstance(first, Open):
                connection = self._open(attachment, admitted, resumable=first is not None)
        finally:
            self.pending.pop(ws, None)  # counted from admission until registered or refused
        if connection is not None:
            await connection.attach(attachment, first)
        elif isinstance(first, Resume):
            await self._resume(attachment, admitted, first)

    def _open(
        self, attachment: Attachment, admitted: PendingSocket, *, resumable: bool
    ) -> Connection:
        """A new connection for ``attachment``, registered and living."""
        c = self.config
        claims = admitted.claims

        def carrier(connection: Connection) -> Carrier:
            observer, stall = connection.observer, connection.stall_timeout
            if not resumable:
                return DirectFrames(observer, stall, attachment)
            owner = (claims.sub, claims.aud)
            session = Session(admitted.conn_id, owner, grace=c.resume_grace, window=c.resume_buffer)
            return ReplayWindow(observer, stall, session)

        connection = Connection(admitted.conn_id, claims, c, self.context, carrier)
        self._register(connection)
        live = asyncio.create_task(connection.live(attachment))
        self.lives.add(live)
        live.add_done_callback(lambda _: self._forget(connection, live))
        return connection

    async def _resume(self, attachment: Attachment, admitted: PendingSocket, first: Resume) -> None:
        """A socket that resumes a connection: it takes the connection over, or is refused."""
        found = self.connections.get(first.connection)
        if found is None or not found.claim(first, admitted.claims):
            self.stats.refusal("resume")
            self.log.warning("resume refused", reason=NO_CONNECTION, remote=attachment.remote)
            await attachment.close(CANNOT_RESUME, NO_CONNECTION)
            return
        await found.attach(attachment, first)

    async def _first_frame(self, attachment: Attachment) -> Open | Resume | None:
        """The resume profile's first frame, within the open timeout; None if it failed."""
        try:
            async with asyncio.timeout(self.config.open_timeout):
                frame = await attachment.ws.recv()
            if isinstance(frame, bytes):
                raise ProfileError("the first frame must be text")
            return parse_first_frame(frame.encode())
        except TimeoutError:
            why = f"no open or resume frame within {self.config.open_timeout:g} s"
            await attachment.close(PROFILE_ERROR, f"{PROFILE}: {why}")
        except ProfileError as exc:
            await attachment.close(PROFILE_ERROR, f"breaks {PROFILE}: {exc}")
        except ConnectionClosed:
            pass
        return None

    def _select_subprotocol(
        self, ws: ServerConnection, offered: Sequence[Subprotocol]
    ) -> Subprotocol | None:
        """The subprotocol admission chose (never a ticket); none when none was offered."""
        admission = self.pending.get(ws)
        if admission is None or admission.subprotocol is None:
            return None
        return Subprotocol(admission.subprotocol)

    def _register(self, connection: Connection) -> None:
        self.connections[connection.conn_id] = connection
        self.idle_since = None

    def _forget(self, connection: Connection, live: asyncio.Task[None] | None = None) -> None:
        if live is not None:
            self.lives.discard(live)
        if self.connections.get(connection.conn_id) is connection:
            del self.connections[connection.conn_id]
        if not self.connections:
            self.idle_since = time.monotonic()
        self._log_state()

    def _log_state(self) -> None:
        """At debug level, what the relay holds after each connection: a leak shows here."""
        if logging.getLogger("relay.server").isEnabledFor(logging.DEBUG):
            self.log.debug(
                "relay state",
                connections=len(self.connections),
                pending=len(self.pending),
                agents=len(self.agents),
                tasks=len(asyncio.all_tasks()),
            )


def _console(config: RelayConfig) -> devconsole.Console:
    """The dev console of a relay under --dev."""
    allow = config.policy.allow_origins
    assets = devconsole.load()
    return devconsole.Console(
        assets, config.console_token, allow, config.path, config.workspace, __version__
    )


def bracketed_address(address: Any) -> str:
    """``HOST:PORT`` of a socket address, an IPv6 host in brackets."""
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_upgrade(request: Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def _remote(ws: ServerConnection) -> str:
    return Attachment(ws).remote
