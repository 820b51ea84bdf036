"""Who may open a socket: the answer to a WebSocket upgrade request, before any agent starts.

Pure: the request's parts, the policy, the open-connection count, the replay memory and
the clock come in; an :class:`Admitted` or a :class:`Refusal` (HTTP status, plain-text
reason, headers) comes out. It runs on requests :mod:`relay.core.handshake` found to be real
upgrades. Order of checks: origin (403), ticket (401, with ``WWW-Authenticate``),
capacity (503); a ticket is only spent once the socket will really be accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from relay.core.origins import origin_allowed
from relay.core.tickets import (
    NO_AUDIENCE,
    WRONG_AUDIENCE,
    Claims,
    ReplayGuard,
    TicketError,
    verify,
)
from relay.core.ticketurls import ticket_in

RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class Policy:
    """The relay's admission settings."""

    secrets: Sequence[str]
    ticket_ttl: float
    audience: str | None
    allow_origins: Sequence[str]
    max_connections: int


@dataclass(frozen=True)
class Admitted:
    """The upgrade may proceed; the ticket's claims say who for."""

    claims: Claims


@dataclass(frozen=True)
class Refusal:
    """The upgrade is refused with this HTTP status and plain-text reason.

    ``kind`` is one of :data:`relay.observe.stats.REFUSAL_REASONS`, for the metrics.
    """

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...] = field(default=())
    kind: str = "bad_request"


def ticket_from_request(
    path: str, authorization: str | None, subprotocol: str | None = None
) -> str | None:
    """The ticket from ``?ticket=`` (:func:`relay.core.ticketurls.ticket_in`, the one reader of
    the query), else the ``acp-ticket.`` subprotocol, else ``Bearer``."""
    query = ticket_in(path)
    if query is not None:
        return query
    if subprotocol:
        return subprotocol
    if authorization:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def origin_refusal(origin: str | None, allow_origins: Sequence[str]) -> Refusal | None:
    """403 for a browser page whose origin is not allowed; None when it may connect."""
    if origin is None or origin_allowed(origin, allow_origins):
        return None
    if allow_origins:
        hint = "add it with --allow-origin"
    else:
        hint = "only pages from this machine may connect unless --allow-origin is given"
    return Refusal(403, f"origin {origin} is not allowed: {hint}", kind="origin")


def admit(
    *,
    ticket: str | None,
    origin: str | None,
    open_connections: int,
    policy: Policy,
    replay_guard: ReplayGuard,
    now: float,
    watching: bool = False,
    can_watch: Callable[[str], Refusal | None] | None = None,
) -> Admitted | Refusal:
    """Decide an upgrade request; spends the ticket only when the answer is Admitted.

    ``watching``: the request offers the watch profile (``acp-relay.watch.v1``); its
    ticket must be a watcher's, and ``can_watch`` says whether the connection it names can
    take a watcher now. A watcher's ticket opens no connection of its own, and watchers do
    not count against ``--max-connections``.
    """
    refused = origin_refusal(origin, policy.allow_origins)
    if refused is not None:
        return refused
    try:
        claims = verify(
            ticket or "",
            policy.secrets,
            now=now,
            max_age=policy.ticket_ttl,
            audience=policy.audience,
        )
    except TicketError as exc:
        return unauthorized(str(exc), missing=not ticket, kind=_ticket_kind(str(exc), ticket))
    if replay_guard.is_replay(claims.jti, now):
        return unauthorized(
            "ticket was already used: tickets are single-use, get a new one",
            kind="ticket_replayed",
        )
    if watching != (claims.watch is not None):
        return unauthorized(_watch_mismatch(claims.watch), kind="ticket_invalid")
    if claims.watch is not None:
        refused = None if can_watch is None else can_watch(claims.watch)
        if refused is not None:
            return refused
    elif open_connections >= policy.max_connections:
        return _full(f"relay is at its limit of {_connections(policy.max_connections)}")
    if not replay_guard.remember(claims.jti, claims.expires_at(policy.ticket_ttl), now):
        return _full("too many recent tickets to remember")
    return Admitted(claims)


def unauthorized(reason: str, *, missing: bool = False, kind: str = "ticket_invalid") -> Refusal:
    """401 with ``WWW-Authenticate: Bearer`` (RFC 6750): no ticket, or one that is refused."""
    challenge = 'Bearer realm="acp-relay"'
    if not missing:
        description = reason.replace("\\", "").replace('"', "'")
        challenge += f', error="invalid_token", error_description="{description}"'
    return Refusal(401, reason, (("WWW-Authenticate", challenge),), kind=kind)


def _ticket_kind(reason: str, ticket: str | None) -> str:
    if not ticket:
        return "ticket_missing"
    if reason.startswith("ticket expired"):
        return "ticket_expired"
    if reason in (WRONG_AUDIENCE, NO_AUDIENCE):
        return "ticket_audience"
    return "ticket_invalid"


def _watch_mismatch(watch: str | None) -> str:
    if watch is None:
        return (
            "a watcher needs a watcher's ticket: mint one with acp-relay ticket --watch "
            "CONNECTION_ID"
        )
    return (
        f"this ticket is for watching connection {watch}: offer the acp-relay.watch.v1 "
        "subprotocol with it"
    )


def no_such_connection(watch: str) -> Refusal:
    """404 for a watcher of a connection this relay does not have (ended, or never was)."""
    return Refusal(
        404, f"no connection {watch} on this relay: it ended, or never was", kind="watch"
    )


def watchers_full(watch: str, most: int) -> Refusal:
    """503 for a watcher of a connection that has all the watchers it may have."""
    if most == 0:
        return Refusal(404, "sharing is off on this relay (--max-watchers 0)", kind="watch")
    return _full(f"connection {watch} has its {most} watchers (--max-watchers)", kind="watch")


def _connections(count: int) -> str:
    return f"{count} connection" if count == 1 else f"{count} connections"


def _full(why: str, kind: str = "capacity") -> Refusal:
    return Refusal(
        503,
        f"{why}; retry in {RETRY_AFTER_SECONDS} s",
        (("Retry-After", str(RETRY_AFTER_SECONDS)),),
        kind=kind,
    )
