"""``acp-relay serve``: admit WebSockets by ticket and run one connection per socket.

The WebSocket layer is ``websockets``' asyncio server. Admission (origin, ticket,
capacity) is decided by :mod:`relay.core.admission` before the upgrade, so a refused
request never starts an agent. Each accepted socket becomes a
:class:`relay.server.connections.connection.Connection` with its own agent process. This module also
answers ``/healthz``, ``/busy`` and, under ``--dev``, the dev console.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay import __version__
from relay.config.resolved import RelayConfig
from relay.core.admission import Refusal, no_such_connection, watchers_full
from relay.core.handshake import HandshakeGate
from relay.core.resumeprofile import (
    CANNOT_RESUME,
    NO_CONNECTION,
    PROFILE,
    PROFILE_ERROR,
    Open,
    ProfileError,
    Resume,
    parse_first_frame,
)
from relay.core.subprotocols import SocketKind
from relay.core.tickets import ReplayGuard
from relay.observe.logs import get_logger
from relay.observe.metrics import Exposition
from relay.observe.stats import RelayStats
from relay.server.connections.attachments import Attachment
from relay.server.http.admitting import PendingSocket, Upgrades, Views
from relay.server.http.edge import guarded, serve_metrics
from relay.server.http.listener import cannot_listen
from relay.server.http.spenttickets import SpentTickets

if TYPE_CHECKING:
    from relay.server.agents.process import AgentProcess, Guard
    from relay.server.agents.starting import RelayContext
    from relay.server.agents.warm import WarmAgents
    from relay.server.connections.carriers import Carrier
    from relay.server.connections.connection import Connection
    from relay.server.http import devconsole

__all__ = ["Relay", "RelayConfig"]

RECEIVE_QUEUE_FRAMES = 1
CLOSE_TIMEOUT = 2.0  # seconds to wait for the client's close frame
# What the relay loads once it answers HTTP: a connection's code (its lifecycle, carriers,
# boundary, the agents' start), not needed for /healthz. Loaded this long after the start,
# or by the first socket admitted before that.
CONNECTION_MODULES = (
    "relay.server.connections.connection",
    "relay.server.connections.carriers",
    "relay.core.resumesession",
)
PRELOAD_SECONDS = 0.05


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
        self.log = get_logger("relay.server")
        self.connections: dict[str, Connection] = {}  # attached or detached
        self.lives: set[asyncio.Task[None]] = set()  # every connection's lifecycle
        self.agents: set[AgentProcess] = set()
        self.idle_since: float | None = time.monotonic()
        self.shutting_down = False
        self._server: Server | None = None
        self._metrics_server: asyncio.Server | None = None
        self.gate = HandshakeGate()
        self.stats = RelayStats()
        self.warm: WarmAgents | None = None
        if config.warm_agents > 0:
            from relay.server.agents.warm import (
                relays_warm_agents,  # loaded only with --warm-agents
            )

            self.warm = relays_warm_agents(config, self.agents, self.stats, guard)
        self.guard = guard
        self._context: RelayContext | None = None  # made with the first connection
        self.exposition = Exposition(self.stats, self._gauges)
        replay_guard = ReplayGuard()
        self.spent: SpentTickets | None = None
        if config.state_dir is not None:
            self.spent = SpentTickets(config.state_dir, replay_guard, clock())
        views = Views(
            lambda: len(self.connections),
            self._can_watch,
            self.busy_report,
            self.exposition.render,
            self.connections.get,
        )
        self.upgrades = Upgrades(
            config,
            views,
            clock=clock,
            stats=self.stats,
            log=self.log,
            console=_console(config) if config.console else None,
            spent=self.spent,
            replay_guard=replay_guard,
        )

    async def start(self, sock: socket.socket | None = None) -> None:
        """Listen (on ``sock`` when it is bound already, see :mod:`relay.server.http.listener`);
        the bound port is then in :attr:`port` (and /metrics', if apart, in
        :attr:`metrics_port`)."""
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
            process_request=self.upgrades.process_request,
            process_response=self.upgrades.process_response,
            compression=None,
            open_timeout=c.open_timeout,
            ping_interval=c.ping_interval,
            ping_timeout=c.ping_timeout,
            close_timeout=CLOSE_TIMEOUT,
            max_size=c.max_message_bytes,
            # websockets stops reading a socket once more than this many frames wait for
            # the agent (those of the read it was parsing still come): memory per socket
            # stays near a few messages; the agent's pipe, not this queue, sets the pace.
            max_queue=RECEIVE_QUEUE_FRAMES,
            server_header=None,
            select_subprotocol=self.upgrades.select_subprotocol,
            create_connection=guarded(self.gate, self.log, c.path, self.stats),
        )
        if self.warm is not None:
            self.warm.start()
        asyncio.get_running_loop().call_later(PRELOAD_SECONDS, _load_connection_modules)

    @property
    def context(self) -> RelayContext:
        """What a connection needs of the relay that holds it (its agents, counters, guard,
        warm agents)."""
        if self._context is None:
            from relay.server.agents.starting import RelayContext

            self._context = RelayContext(self.agents, self.stats, self.guard, self.warm)
        return self._context

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
        # Each connection's watchers hear why first: the server's own close would give them
        # 1001 alone.
        stopping = [connection.stop() for connection in list(self.connections.values())]
        await asyncio.gather(*stopping, return_exceptions=True)
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

    def _gauges(self) -> dict[str, float]:
        report = self.busy_report()
        detached = report["detached"]
        attached = len(self.connections) - detached
        history = sum(c.watching.history.size for c in self.connections.values())
        return {
            "attached": attached,
            "detached": detached,
            "warm": report["warm"],
            "watchers": report["watchers"],
            "history": history,
        }

    def _open_count(self) -> int:
        """Connections, and sockets admitted that will be ones: what --max-connections counts."""
        return len(self.connections) + self.upgrades.counted()

    def _can_watch(self, conn_id: str) -> Refusal | None:
        """Whether connection ``conn_id`` can take one more watcher now."""
        connection = self.connections.get(conn_id)
        if connection is None or connection.ended:
            return no_such_connection(conn_id)
        if connection.lifecycle.watchers >= self.config.max_watchers:
            return watchers_full(conn_id, self.config.max_watchers)
        return None

    def busy_report(self) -> dict[str, Any]:
        """The supervisor's view: busy while any connection lives, attached or detached;
        warm agents waiting for a connection are no connection (``warm`` counts them);
        ``watchers`` counts the people looking on."""
        count = self._open_count()  # sockets in their upgrade count too: they will be open
        idle = None if count or self.idle_since is None else time.monotonic() - self.idle_since
        idle = None if idle is None else round(idle, 3)
        detached = sum(1 for connection in self.connections.values() if connection.detached)
        warm = 0 if self.warm is None else self.warm.ready
        watchers = sum(c.lifecycle.watchers for c in self.connections.values())
        return {
            "busy": count > 0,
            "connections": count,
            "detached": detached,
            "warm": warm,
            "watchers": watchers,
            "idle_seconds": idle,
        }

    # -- after the upgrade --------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        admitted = self.upgrades.pending.get(ws)
        if admitted is None:  # cannot happen: every upgrade went through admission
            await ws.close(CloseCode.INTERNAL_ERROR, "internal error: connection was not admitted")
            return
        attachment = Attachment(ws)
        if admitted.watcher:
            del self.upgrades.pending[ws]
            await self._watch(attachment, admitted)
            return
        connection, resumable = None, admitted.kind is SocketKind.RESUMABLE
        try:
            first = await self._first_frame(attachment) if resumable else None
            if not resumable or isinstance(first, Open):
                connection = self._open(attachment, admitted, resumable=first is not None)
        finally:
            self.upgrades.pending.pop(ws, None)  # counted until registered or refused
        if connection is not None:
            await connection.attach(attachment, first)
        elif isinstance(first, Resume):
            await self._resume(attachment, admitted, first)

    def _open(
        self, attachment: Attachment, admitted: PendingSocket, *, resumable: bool
    ) -> Connection:
        """A new connection for ``attachment``, registered and living."""
        from relay.core.resumesession import Session
        from relay.server.connections.carriers import DirectFrames, ReplayWindow
        from relay.server.connections.connection import Connection

        c = self.config
        claims = admitted.claims

        def carrier(connection: Connection) -> Carrier:
            observer, stall = connection.observer, connection.stall_timeout
            if not resumable:
                return DirectFrames(observer, stall, attachment)
            owner = (claims.sub, claims.aud)
            session = Session(admitted.conn_id, owner, grace=c.resume_grace, window=c.resume_buffer)
            return ReplayWindow(observer, stall, session, connection.lifecycle)

        connection = Connection(
            admitted.conn_id, claims, c, self.context, carrier, attachment, resumable=resumable
        )
        self._register(connection)
        live = asyncio.create_task(connection.live())
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

    async def _watch(self, attachment: Attachment, admitted: PendingSocket) -> None:
        """A watcher's socket: it sees the connection until either goes."""
        from relay.core.lifecyclestate import CONNECTION_ENDED

        connection = self.connections.get(admitted.conn_id)
        if connection is None:  # it ended and went since the upgrade was admitted
            await attachment.close(CloseCode.NORMAL_CLOSURE, CONNECTION_ENDED)
            return
        await connection.watch(attachment, admitted.claims)

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
                pending=len(self.upgrades.pending),
                agents=len(self.agents),
                tasks=len(asyncio.all_tasks()),
            )


def _load_connection_modules() -> None:
    """Load a connection's code now that HTTP is answered (a socket admitted earlier loaded
    it already; then this finds it loaded)."""
    for name in CONNECTION_MODULES:
        importlib.import_module(name)


def _console(config: RelayConfig) -> devconsole.Console:
    """The dev console of a relay under --dev."""
    from relay.server.http import devconsole  # --dev's alone: not loaded otherwise

    allow = config.policy.allow_origins
    assets = devconsole.load()
    return devconsole.Console(
        assets, config.console_token, allow, config.path, config.workspace, __version__
    )


def bracketed_address(address: Any) -> str:
    """``HOST:PORT`` of a socket address, an IPv6 host in brackets."""
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
