"""Tests for relay.core.admission: the decision table for a WebSocket upgrade, and finding the
ticket."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.admission import (
    RETRY_AFTER_SECONDS,
    Admitted,
    Policy,
    Refusal,
    admit,
    ticket_from_request,
)
from relay.core.tickets import (
    BAD_SIGNATURE,
    MALFORMED,
    NO_AUDIENCE,
    NO_TICKET,
    WRONG_AUDIENCE,
    ReplayGuard,
    mint,
    new_nonce,
    verify,
)

NOW = 1_700_000_000.0
SECRET = "admission-secret-0123456789"
POLICY = Policy(
    secrets=(SECRET,),
    ticket_ttl=60,
    audience="this-box",
    allow_origins=(),
    max_connections=2,
)
RETRY_AFTER = (("Retry-After", str(RETRY_AFTER_SECONDS)),)
ALREADY_USED = "ticket was already used: tickets are single-use, get a new one"
LOCAL_ONLY = "only pages from this machine may connect unless --allow-origin is given"


def ticket(
    n: int = 0,
    *,
    secret: str = SECRET,
    now: float = NOW,
    audience: str | None = "this-box",
    ttl: float | None = None,
) -> str:
    """A ticket with nonce number ``n``, minted at ``now``."""
    return mint(
        secret,
        now=now,
        nonce=new_nonce(n.to_bytes(16, "big")),
        subject="alice",
        audience=audience,
        ttl=ttl,
    )


def decide(
    token: str | None,
    guard: ReplayGuard,
    *,
    origin: str | None = None,
    open_connections: int = 0,
    policy: Policy = POLICY,
    now: float = NOW,
) -> Admitted | Refusal:
    return admit(
        ticket=token,
        origin=origin,
        open_connections=open_connections,
        policy=policy,
        replay_guard=guard,
        now=now,
    )


# -- admit -------------------------------------------------------------------------


def test_success_returns_claims_and_spends_the_jti() -> None:
    """A good ticket is admitted with its claims, and its jti is remembered."""
    guard = ReplayGuard()
    verdict = decide(ticket(), guard)
    assert isinstance(verdict, Admitted)
    claims = verdict.claims
    assert (claims.sub, claims.aud, claims.iat, claims.exp) == ("alice", "this-box", int(NOW), None)
    assert claims.jti == new_nonce(bytes(16))
    assert guard.is_replay(claims.jti, NOW)
    assert len(guard) == 1


def test_replay_is_refused_401() -> None:
    """The second use of a ticket gets 401 saying tickets are single-use."""
    guard = ReplayGuard()
    token = ticket()
    assert isinstance(decide(token, guard), Admitted)
    refused = decide(token, guard, now=NOW + 1)
    assert isinstance(refused, Refusal)
    assert (refused.status, refused.reason) == (401, ALREADY_USED)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, NO_TICKET),
        ("", NO_TICKET),
        ("garbage", MALFORMED),
        ("a.b.c" + "x" * 5000, MALFORMED),
        (ticket(secret="another-secret"), BAD_SIGNATURE),
        (ticket(now=NOW - 61), "ticket expired (issued 61 s ago, max age 60 s)"),
        (ticket(now=NOW - 10, ttl=5), "ticket expired (issued 10 s ago, ttl 5 s)"),
        (
            ticket(now=NOW + 10),
            "ticket issued in the future (10 s ahead of this relay; check clocks)",
        ),
        (ticket(audience="other-box"), WRONG_AUDIENCE),
        (ticket(audience=None), NO_AUDIENCE),
    ],
)
def test_bad_ticket_is_refused_401_with_reason(token: str | None, reason: str) -> None:
    """Every ticket failure is a 401 whose body is the verifier's reason; nothing is spent."""
    guard = ReplayGuard()
    refused = decide(token, guard)
    assert isinstance(refused, Refusal)
    assert (refused.status, refused.reason) == (401, reason)
    assert len(guard) == 0


@pytest.mark.parametrize(
    ("token", "challenge"),
    [
        (None, 'Bearer realm="acp-relay"'),
        ("", 'Bearer realm="acp-relay"'),
        ("garbage", 'Bearer realm="acp-relay", error="invalid_token", '
         f'error_description="{MALFORMED}"'),
    ],
)  # fmt: skip
def test_401_carries_a_bearer_challenge(token: str | None, challenge: str) -> None:
    """A 401 says Bearer (RFC 6750): without a ticket no error; with a bad one, why."""
    refused = decide(token, ReplayGuard())
    assert isinstance(refused, Refusal)
    assert refused.headers == (("WWW-Authenticate", challenge),)


@pytest.mark.parametrize(
    ("allow", "origin", "hint"),
    [
        ((), "https://evil.example", LOCAL_ONLY),
        ((), "null", LOCAL_ONLY),
        ((), "http://localhost.evil.example", LOCAL_ONLY),
        (("https://app.example.com",), "https://evil.example", "add it with --allow-origin"),
        (("https://app.example.com",), "http://app.example.com", "add it with --allow-origin"),
        (("https://*.example.com",), "https://example.com.evil.net", "add it with --allow-origin"),
    ],
)
def test_origin_refused_403(allow: tuple[str, ...], origin: str, hint: str) -> None:
    """A disallowed browser origin gets 403 naming it and saying how to allow it; nothing spent."""
    guard = ReplayGuard()
    verdict = decide(ticket(), guard, origin=origin, policy=replace(POLICY, allow_origins=allow))
    assert verdict == Refusal(403, f"origin {origin} is not allowed: {hint}", kind="origin")
    assert len(guard) == 0


@pytest.mark.parametrize(
    ("allow", "origin"),
    [
        ((), None),
        (("https://app.example.com",), None),
        ((), "http://localhost:3000"),
        ((), "http://127.0.0.1:8080"),
        ((), "http://[::1]"),
        (("https://app.example.com",), "https://APP.example.com:443"),
        (("https://*.example.com",), "https://a.b.example.com"),
        (("*",), "https://anything.example"),
    ],
)
def test_allowed_origin_or_no_origin_is_admitted(
    allow: tuple[str, ...], origin: str | None
) -> None:
    """No Origin header (a non-browser client) or an allowed origin lets the ticket decide."""
    verdict = decide(
        ticket(), ReplayGuard(), origin=origin, policy=replace(POLICY, allow_origins=allow)
    )
    assert isinstance(verdict, Admitted)


def test_origin_refusal_does_not_spend_the_ticket() -> None:
    """A ticket refused for its page's origin still works from an allowed page."""
    guard = ReplayGuard()
    token = ticket()
    refused = decide(token, guard, origin="https://evil.example")
    assert isinstance(refused, Refusal)
    assert refused.status == 403
    assert isinstance(decide(token, guard, origin="http://localhost"), Admitted)


def test_capacity_refused_503_without_spending_the_ticket() -> None:
    """At the connection limit: 503 with Retry-After; the same ticket works once a slot frees."""
    guard = ReplayGuard()
    token = ticket()
    full = decide(token, guard, open_connections=2)
    assert full == Refusal(
        503,
        f"relay is at its limit of 2 connections; retry in {RETRY_AFTER_SECONDS} s",
        RETRY_AFTER,
        kind="capacity",
    )
    assert len(guard) == 0
    assert isinstance(
        decide(token, guard, open_connections=1, now=NOW + RETRY_AFTER_SECONDS), Admitted
    )


@pytest.mark.parametrize(
    ("limit", "says"), [(1, "its limit of 1 connection;"), (3, "its limit of 3 connections;")]
)
def test_the_limit_is_said_in_words_that_agree_with_it(limit: int, says: str) -> None:
    """One connection is "1 connection", more are "connections"."""
    policy = replace(POLICY, max_connections=limit)
    full = decide(ticket(), ReplayGuard(), open_connections=limit, policy=policy)
    assert isinstance(full, Refusal)
    assert says in full.reason


@pytest.mark.parametrize("audience", ["other-box", None])
def test_a_ticket_for_no_or_another_audience_counts_as_audience(audience: str | None) -> None:
    """Both audience refusals count as ticket_audience in the metrics."""
    refused = decide(ticket(audience=audience), ReplayGuard())
    assert isinstance(refused, Refusal)
    assert refused.kind == "ticket_audience"


def test_replay_guard_full_is_503_without_spending() -> None:
    """When the replay memory is full the relay answers 503; the ticket works once room frees."""
    guard = ReplayGuard(capacity=1)
    assert isinstance(decide(ticket(1), guard), Admitted)
    later = ticket(2, now=NOW + 30)
    full = decide(later, guard, now=NOW + 30)
    assert full == Refusal(
        503,
        f"too many recent tickets to remember; retry in {RETRY_AFTER_SECONDS} s",
        RETRY_AFTER,
        kind="capacity",
    )
    assert not guard.is_replay(new_nonce((2).to_bytes(16, "big")), NOW + 30)
    # Ticket 1 (expiring at NOW + 60) is forgotten after its lifetime: room for ticket 2.
    assert isinstance(decide(later, guard, now=NOW + 61), Admitted)


@pytest.mark.parametrize(
    ("origin", "token", "open_connections", "status"),
    [
        ("https://evil.example", "garbage", 2, 403),
        (None, "garbage", 2, 401),
        (None, "fresh", 2, 503),
        (None, "used", 2, 401),
    ],
)
def test_checks_run_origin_then_ticket_then_capacity(
    origin: str | None, token: str, open_connections: int, status: int
) -> None:
    """Origin is judged before the ticket, the ticket (and replay) before capacity."""
    guard = ReplayGuard()
    used = ticket(1)
    assert isinstance(decide(used, guard), Admitted)
    tokens = {"garbage": "garbage", "fresh": ticket(2), "used": used}
    verdict = decide(tokens[token], guard, origin=origin, open_connections=open_connections)
    assert isinstance(verdict, Refusal)
    assert verdict.status == status


def test_secret_rotation_admits_any_configured_secret() -> None:
    """Tickets signed with any of the policy's secrets are admitted."""
    guard = ReplayGuard()
    policy = replace(POLICY, secrets=("new-secret-abcdef", SECRET))
    assert isinstance(decide(ticket(1, secret="new-secret-abcdef"), guard, policy=policy), Admitted)
    assert isinstance(decide(ticket(2), guard, policy=policy), Admitted)


# -- ticket_from_request -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "authorization", "expected"),
    [
        ("/acp?ticket=abc", None, "abc"),
        ("/acp?x=1&ticket=abc&y=2", None, "abc"),
        ("/acp?ticket=a&ticket=b", None, "a"),
        ("/acp?ticket=a%2Eb%3D%3D", None, "a.b=="),
        ("/acp", "Bearer abc", "abc"),
        ("/acp", "bearer abc", "abc"),
        ("/acp", "BEARER abc", "abc"),
        ("/acp", "  Bearer   abc  ", "abc"),
        ("/acp?ticket=query", "Bearer header", "query"),
        ("/acp?ticket=", "Bearer header", "header"),
        ("/acp?other=x", "Bearer header", "header"),
        ("/acp?ticket=", None, None),
        ("/acp", "Bearer ", None),
        ("/acp", "Bearer", None),
        ("/acp", "", None),
        ("/acp", None, None),
        ("/acp", "Basic dXNlcjpwYXNz", None),
        ("/acp", "Bearerabc", None),
        ("/acp", "Token abc", None),
        ("/acp?tickets=abc", None, None),
    ],
)
def test_ticket_from_request(path: str, authorization: str | None, expected: str | None) -> None:
    """The ticket comes from ?ticket= first, else from Authorization: Bearer; else None."""
    assert ticket_from_request(path, authorization) == expected


def test_minted_ticket_survives_a_query_string_unencoded() -> None:
    """A minted ticket pasted into ?ticket= as it is comes back intact and verifies."""
    token = ticket()
    found = ticket_from_request(f"/acp?ticket={token}", None)
    assert found == token
    assert verify(found, (SECRET,), now=NOW, max_age=60).sub == "alice"


# -- robustness: whatever arrives in a request --------------------------------------------------

REQUEST_TEXT = st.text(max_size=80) | st.sampled_from(
    ["/acp?ticket=", "/acp?ticket=%ff%00", "/acp?&&==&ticket", "?ticket=a.b.c#x", "/%zz?%"]
)


@settings(max_examples=300)
@given(REQUEST_TEXT, st.none() | st.text(max_size=40), st.none() | REQUEST_TEXT)
def test_any_request_is_admitted_or_refused_never_raises(
    path: str, authorization: str | None, origin: str | None
) -> None:
    """Arbitrary paths, Authorization and Origin headers get a verdict; junk is never admitted."""
    ticket = ticket_from_request(path, authorization)
    assert ticket is None or isinstance(ticket, str)
    verdict = admit(
        ticket=ticket,
        origin=origin,
        open_connections=0,
        policy=POLICY,
        replay_guard=ReplayGuard(),
        now=NOW,
    )
    assert isinstance(verdict, Refusal)
    assert verdict.status in (401, 403)
