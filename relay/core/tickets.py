"""Signed, short-lived tickets that authorize one WebSocket connection.

A ticket is an itsdangerous ``URLSafeTimedSerializer`` token: HMAC-SHA256, salt ``SALT``,
"django-concat" key derivation, over compact JSON claims ``sub``, ``jti``, ``aud``?, ``exp``?,
and for a watcher's ticket ``watch`` (the connection it may watch) and ``answer`` (whether it
may answer the agent's permission requests).
The module is pure: the clock (``now``, unix seconds, or a ``clock`` to read), the secrets and
the nonce (or the ``randomness`` to make one of) are arguments.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadData, BadSignature, TimestampSigner, URLSafeTimedSerializer

SALT = "acp-relay.ticket.v1"
CLOCK_SKEW = 5.0
"""Seconds a ticket's issue time may lie ahead of the verifier's clock."""
MAX_TICKET_CHARS = 4096
"""Longer tickets are refused as malformed before any HMAC is computed."""
MIN_NONCE_BYTES = 16
MAX_WATCH_CHARS = 64  # a connection id (the relay's are UUIDs)

# Worded so that log redaction (query values, bearer tokens) leaves it whole.
NO_TICKET = (
    "no ticket: give it in the ticket query parameter, the acp-ticket.<ticket> "
    "subprotocol or an Authorization: Bearer <ticket> header"
)
MALFORMED = "malformed ticket"
BAD_SIGNATURE = "ticket signature is invalid (signed with another secret?)"
WRONG_AUDIENCE = "ticket is for another audience"
NO_AUDIENCE = (
    "ticket has no audience and this relay takes only tickets for its own (--audience): "
    "mint them with that audience (acp-relay ticket --audience NAME, or aud in your control plane)"
)

Clock = Callable[[], float]
"""The wall clock, in unix seconds (``time.time``, or the relay's own)."""
Randomness = Callable[[int], bytes]
"""``n`` random bytes from a cryptographic source (``os.urandom``)."""

_B64 = "[A-Za-z0-9_-]+"
_SHAPE = re.compile(rf"\.?{_B64}\.{_B64}\.{_B64}")


class TicketError(Exception):
    """A ticket was refused; str(err) / err.reason is a short plain-text reason for a 401 body."""

    reason: str

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Claims:
    """The claims of a verified ticket; ``iat`` is the signed issue time (unix seconds)."""

    sub: str
    jti: str
    aud: str | None
    iat: int
    exp: int | None
    watch: str | None = None  # a watcher's ticket: the one connection it may watch
    may_answer: bool = False  # ... and whether it may answer the agent's permission requests

    def expires_at(self, max_age: float) -> float:
        """When the relay stops accepting this ticket: min(iat + max_age, exp)."""
        limit = self.iat + max_age
        return limit if self.exp is None else min(limit, self.exp)


class _ClockSigner(TimestampSigner):
    """A TimestampSigner whose clock is the caller's ``now``."""

    def __init__(self, *args: Any, now: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._now = now

    def get_timestamp(self) -> int:
        return int(self._now)


def _serializer(keys: Sequence[str], now: float) -> URLSafeTimedSerializer:
    """Build the serializer; itsdangerous signs with the LAST key and tries the last key first."""
    signer_kwargs = {"now": now, "digest_method": hashlib.sha256, "key_derivation": "django-concat"}
    return URLSafeTimedSerializer(
        list(keys), salt=SALT, signer=_ClockSigner, signer_kwargs=signer_kwargs
    )


def new_nonce(random_bytes: bytes) -> str:
    """Return unpadded url-safe base64 of caller-provided randomness (pass os.urandom(16))."""
    if len(random_bytes) < MIN_NONCE_BYTES:
        raise ValueError(f"a nonce needs at least {MIN_NONCE_BYTES} random bytes")
    return base64.urlsafe_b64encode(random_bytes).rstrip(b"=").decode("ascii")


def mint(
    secret: str,
    *,
    now: float,
    nonce: str,
    subject: str,
    audience: str | None = None,
    ttl: float | None = None,
    watch: str | None = None,
    may_answer: bool = False,
) -> str:
    """Sign a ticket for ``subject`` issued at ``now``; with ``ttl`` it also carries ``exp``.

    With ``watch`` it is a watcher's ticket for that connection only (``may_answer``: it
    may answer the agent's permission requests); it opens no connection of its own.
    """
    if not secret or not nonce:
        raise ValueError("mint needs a non-empty secret and nonce")
    if may_answer and watch is None:
        raise ValueError("may_answer goes with watch")
    claims: dict[str, str | int | bool] = {"sub": subject, "jti": nonce}
    if audience is not None:
        claims["aud"] = audience
    if ttl is not None:
        claims["exp"] = _expiry(now, ttl)
    if watch is not None:
        claims["watch"] = watch
        if may_answer:
            claims["answer"] = True
    return _serializer([secret], now).dumps(claims)


def issue(
    secret: str,
    *,
    clock: Clock,
    randomness: Randomness,
    subject: str,
    audience: str | None = None,
    ttl: float | None = None,
    watch: str | None = None,
    may_answer: bool = False,
) -> str:
    """A new single-use ticket (:func:`mint`'s), issued at ``clock()``, its nonce made of
    ``MIN_NONCE_BYTES`` of ``randomness``: what every command and page that mints needs."""
    return mint(
        secret,
        now=clock(),
        nonce=new_nonce(randomness(MIN_NONCE_BYTES)),
        subject=subject,
        audience=audience,
        ttl=ttl,
        watch=watch,
        may_answer=may_answer,
    )


def _expiry(now: float, ttl: float) -> int:
    if not ttl > 0:
        raise ValueError("ttl must be positive")
    return math.floor(now + ttl)


def verify(
    ticket: str | None,
    secrets: Sequence[str],
    *,
    now: float,
    max_age: float,
    audience: str | None = None,
) -> Claims:
    """Return the claims of a valid ticket or raise TicketError; replay is the caller's job."""
    keys = _checked_keys(secrets, max_age)
    if not ticket:
        raise TicketError(NO_TICKET)
    payload, iat = _unsign(ticket, keys, now)
    claims = _claims(payload, iat)
    _check_time(claims, now, max_age)
    if audience is not None and claims.aud != audience:
        raise TicketError(NO_AUDIENCE if claims.aud is None else WRONG_AUDIENCE)
    return claims


def _checked_keys(secrets: Sequence[str], max_age: float) -> list[str]:
    """Check the programmer's arguments; reverse so itsdangerous tries secrets[0] first."""
    if isinstance(secrets, str):
        raise TypeError("secrets must be a sequence of strings, not one string")
    if not secrets or not all(secrets):
        raise ValueError("verify needs at least one secret, and no empty ones")
    if not max_age > 0:
        raise ValueError("max_age must be positive")
    return list(reversed(secrets))


def _unsign(ticket: str, keys: list[str], now: float) -> tuple[object, int]:
    if len(ticket) > MAX_TICKET_CHARS or not _SHAPE.fullmatch(ticket):
        raise TicketError(MALFORMED)
    try:
        payload, signed_at = _serializer(keys, now).loads(ticket, return_timestamp=True)
        return payload, int(signed_at.timestamp())
    except BadSignature as err:  # BadPayload is not a BadSignature: it lands below
        raise TicketError(BAD_SIGNATURE) from err
    except (BadData, ValueError, OverflowError, OSError) as err:
        raise TicketError(MALFORMED) from err


def _claims(payload: object, iat: int) -> Claims:
    if not isinstance(payload, dict):
        raise TicketError(MALFORMED)
    sub, jti, aud, exp = (payload.get(key) for key in ("sub", "jti", "aud", "exp"))
    watch, answer = payload.get("watch"), payload.get("answer", False)
    if not isinstance(sub, str) or not isinstance(jti, str) or not jti:
        raise TicketError(MALFORMED)
    if not (aud is None or isinstance(aud, str)) or not (exp is None or _is_int(exp)):
        raise TicketError(MALFORMED)
    if not (watch is None or (isinstance(watch, str) and 0 < len(watch) <= MAX_WATCH_CHARS)):
        raise TicketError(MALFORMED)
    if not isinstance(answer, bool) or (answer and watch is None):
        raise TicketError(MALFORMED)
    return Claims(sub=sub, jti=jti, aud=aud, iat=iat, exp=exp, watch=watch, may_answer=answer)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_time(claims: Claims, now: float, max_age: float) -> None:
    age = now - claims.iat
    if age < -CLOCK_SKEW:
        raise TicketError(
            f"ticket issued in the future ({_secs(-age)} s ahead of this relay; check clocks)"
        )
    if age > max_age:
        raise TicketError(f"ticket expired (issued {_secs(age)} s ago, max age {_secs(max_age)} s)")
    if claims.exp is not None and now >= claims.exp:
        ttl = claims.exp - claims.iat
        raise TicketError(f"ticket expired (issued {_secs(age)} s ago, ttl {_secs(ttl)} s)")


def _secs(seconds: float) -> str:
    return f"{seconds:.1f}".removesuffix(".0")


class ReplayGuard:
    """Remembers used jti values until they would have expired anyway; memory bounded by capacity.

    An entry stays while ``now <= expires_at`` (verify still accepts a ticket at age == max_age).
    Each operation is O(log n) amortized: a dict jti -> expiry plus a min-heap of (expiry, jti),
    pruned lazily; heap entries made stale by re-remembering are skipped and compacted away.
    """

    def __init__(self, capacity: int = 65536) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def is_replay(self, jti: str, now: float) -> bool:
        """True when ``jti`` was remembered and has not expired at ``now``."""
        self._prune(now)
        return jti in self._expiry

    def remember(self, jti: str, expires_at: float, now: float) -> bool:
        """Record ``jti`` until ``expires_at``; False (nothing recorded) when full."""
        self._prune(now)
        if expires_at < now:
            return True  # verify already refuses the ticket; nothing to keep
        known = self._expiry.get(jti)
        if known is None and len(self._expiry) >= self.capacity:
            return False
        if known is None or expires_at > known:
            self._expiry[jti] = expires_at
            heapq.heappush(self._heap, (expires_at, jti))
            self._compact()
        return True

    def entries(self, now: float) -> list[tuple[str, float]]:
        """Every remembered jti with its expiry, the expired ones left out."""
        self._prune(now)
        return list(self._expiry.items())

    def _prune(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] < now:
            expires_at, jti = heapq.heappop(heap)
            if self._expiry.get(jti) == expires_at:
                del self._expiry[jti]

    def _compact(self) -> None:
        if len(self._heap) > 2 * self.capacity:
            self._heap = [(expires_at, jti) for jti, expires_at in self._expiry.items()]
            heapq.heapify(self._heap)
