"""Every HTTP request ``serve`` gets, answered before any socket exists.

The plain GETs (the dev console, the browser module, ``/healthz``, ``/busy``,
``/metrics``) and the WebSocket upgrades: checked (:mod:`relay.core.handshake`: the shape of
the request, the subprotocols) and admitted (:mod:`relay.core.admission`: origin, ticket,
capacity, and for a watcher the connection it names), so that a refused request never
starts an agent nor spends a ticket. A socket admitted is held here, counted against
``--max-connections``, until its handler (:class:`relay.server.serving.Relay`) registers its
connection or refuses it. Where :mod:`relay.server.http.edge` writes the answers and guards
the handshakes, this decides them.
"""

from __future__ import annotations

import http
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.typing import Subprotocol

from relay.acp.answers import WATCHER_FRAME_BYTES
from relay.config.resolved import RelayConfig
from relay.core.admission import Refusal, admit, ticket_from_request
from relay.core.handshake import Shape, check_upgrade, duplicated
from relay.core.subprotocols import SocketKind
from relay.core.tickets import Claims, ReplayGuard, issue
from relay.observe.logs import Logger
from relay.observe.stats import RelayStats
from relay.server.connections.attachments import Attachment
from relay.server.http import browsermodule
from relay.server.http.edge import json_response, response, text_response
from relay.server.http.spenttickets import SpentTickets
from relay.streams.wsadapter import limit_messages

if TYPE_CHECKING:
    from relay.server.connections.connection import Connection
    from relay.server.http import devconsole

METRICS_PATH = "/metrics"  # Prometheus text format; keep it off the public side, like /busy


@dataclass
class PendingSocket:
    """A socket that passed admission, counted as a connection until its own is registered
    (or it is refused): the resume profile's open frame comes after the upgrade."""

    conn_id: str
    claims: Claims
    kind: SocketKind = SocketKind.PLAIN
    subprotocol: str | None = None  # the one the relay selects
    opened: float = field(default_factory=time.monotonic)

    @property
    def watcher(self) -> bool:
        """A watcher's socket: no connection of its own, not counted."""
        return self.kind is SocketKind.WATCHER


@dataclass(frozen=True)
class Views:
    """What the plain GETs and admission read of the relay, passed in: the connections
    open (``connections``), whether one can take a watcher (``can_watch``), ``/busy``'s
    report, ``/metrics``' exposition, and a connection by its id (``connection``, for the
    dev console)."""

    connections: Callable[[], int]
    can_watch: Callable[[str], Refusal | None]
    busy: Callable[[], dict[str, Any]]
    metrics: Callable[[], tuple[bytes, str]]
    connection: Callable[[str], Connection | None]


class Upgrades:
    """The relay's answers before the upgrade, and the sockets admitted meanwhile."""

    def __init__(
        self,
        config: RelayConfig,
        views: Views,
        *,
        clock: Callable[[], float],
        stats: RelayStats,
        log: Logger,
        console: devconsole.Console | None,
        spent: SpentTickets | None,
        replay_guard: ReplayGuard,
    ) -> None:
        self.config = config
        self.views = views
        self.clock = clock
        self.stats = stats
        self.log = log
        self.console = console
        self.spent = spent
        self.replay_guard = replay_guard
        self.pending: dict[ServerConnection, PendingSocket] = {}

    def process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        """websockets' hook: an answer now, or None to go on with the upgrade."""
        path = urlsplit(request.path).path
        headers = list(request.headers.raw_items())
        duplicate = duplicated(headers)
        if duplicate is not None:
            return self._refuse(ws, duplicate)
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if not upgrade and (plain := self._plain_get(request, path)) is not None:
            return plain
        if path != self.config.path:
            reason = f"not found: the ACP endpoint is {self.config.path}"
            if upgrade:
                return self._refuse(ws, Refusal(404, reason, kind="path"))
            return text_response(404, reason + "\n")
        shape = check_upgrade(headers, speaks=self.speaks())
        if isinstance(shape, Refusal):
            return self._refuse(ws, shape)
        return self._admit(ws, request, shape)

    def process_response(
        self, ws: ServerConnection, request: Request, answer: Response
    ) -> Response | None:
        """websockets' hook: the 101 names the connection (a watcher's, the one it watches)."""
        admitted = self.pending.get(ws)
        if admitted is None:
            return None
        if answer.status_code == http.HTTPStatus.SWITCHING_PROTOCOLS:
            answer.headers["Acp-Connection-Id"] = admitted.conn_id
        else:
            del self.pending[ws]
        return None

    def select_subprotocol(
        self, ws: ServerConnection, offered: Sequence[Subprotocol]
    ) -> Subprotocol | None:
        """websockets' hook: the subprotocol admission chose (never a ticket's)."""
        admitted = self.pending.get(ws)
        if admitted is None or admitted.subprotocol is None:
            return None
        return Subprotocol(admitted.subprotocol)

    def speaks(self) -> tuple[SocketKind, ...]:
        """The sockets the relay opens, by the subprotocol it selects, in order of preference."""
        c = self.config
        plain = (SocketKind.PLAIN,)
        spoken = (SocketKind.RESUMABLE, *plain) if c.resume_grace > 0 else plain
        return (SocketKind.WATCHER, *spoken) if c.max_watchers > 0 else spoken

    def counted(self) -> int:
        """Sockets admitted and not yet registered, watchers aside (those closed meanwhile
        forgotten)."""
        for ws in [ws for ws in self.pending if ws.state is State.CLOSED]:
            del self.pending[ws]
        return sum(1 for admitted in self.pending.values() if not admitted.watcher)

    def _plain_get(self, request: Request, path: str) -> Response | None:
        """The answer to a request that is no WebSocket upgrade, on a path the relay serves
        besides the ACP endpoint; None for any other path."""
        if self.console is not None:  # --dev: the console's module is loaded (serving)
            from relay.server.http import devconsole

            if path in devconsole.PATHS:
                return self._console(request, path, self.console)
        if path == browsermodule.MODULE_PATH:
            origin = request.headers.get("Origin")
            return browsermodule.module_response(origin, self.config.policy.allow_origins)
        if path == "/healthz":
            return text_response(200, "ok\n")
        if path == "/busy":
            return json_response(200, self.views.busy())
        if path == METRICS_PATH:
            body, content_type = self.views.metrics()
            return response(200, body, content_type, ())
        return None

    def _refuse(self, ws: ServerConnection, refusal: Refusal) -> Response:
        self.stats.refusal(refusal.kind)
        self.log.warning(
            "connection refused",
            status=refusal.status,
            reason=refusal.reason,
            remote=Attachment(ws).remote,
        )
        return text_response(refusal.status, refusal.reason + "\n", refusal.headers)

    def _console(self, request: Request, path: str, console: devconsole.Console) -> Response:
        """The dev console's files and tickets (the tickets and the token are never logged)."""
        from relay.server.http import devconsole

        relay = devconsole.RelayViews(
            self.ticket, self.views.can_watch, self._boundary, self.config.max_watchers > 0
        )
        answer = devconsole.answer(console, path, request.path, request.headers, relay)
        if answer.refused is not None:
            self.log.warning(
                "console refused", reason=answer.refused, host=request.headers.get("Host")
            )
        return answer.response

    def _boundary(self, conn_id: str) -> dict[str, Any] | None:
        """What the boundary did on connection ``conn_id``, for the dev console."""
        connection = self.views.connection(conn_id)
        records = None if connection is None else connection.observer.boundary
        return None if records is None else records.snapshot()

    def ticket(self, watch: str | None = None, *, may_answer: bool = False) -> str:
        """A fresh ticket for the dev console's page (or, with ``watch``, for a watcher of
        that connection), with the relay's own clock and randomness."""
        policy = self.config.policy
        return issue(
            policy.secrets[0],
            clock=self.clock,
            randomness=os.urandom,
            subject="dev-console",
            audience=policy.audience,
            watch=watch,
            may_answer=may_answer,
        )

    def _admit(self, ws: ServerConnection, request: Request, shape: Shape) -> Response | None:
        now = self.clock()
        verdict = admit(
            ticket=ticket_from_request(
                request.path, request.headers.get("Authorization"), shape.ticket
            ),
            origin=request.headers.get("Origin"),
            open_connections=self.views.connections() + self.counted(),
            policy=self.config.policy,
            replay_guard=self.replay_guard,
            now=now,
            watching=shape.kind is SocketKind.WATCHER,
            can_watch=self.views.can_watch,
        )
        if isinstance(verdict, Refusal):
            return self._refuse(ws, verdict)
        claims = verdict.claims
        if self.spent is not None:
            self.spent.spent(claims.jti, claims.expires_at(self.config.policy.ticket_ttl), now)
        conn_id = claims.watch or str(uuid.uuid4())
        self.pending[ws] = PendingSocket(conn_id, claims, shape.kind, shape.select)
        if shape.kind is SocketKind.WATCHER:  # before the 101: its first frame is bounded too
            limit_messages(ws, WATCHER_FRAME_BYTES)
        return None
