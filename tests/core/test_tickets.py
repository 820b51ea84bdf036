"""Tests for relay.core.tickets: minting, verification, rotation, wire format and replay guard."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from itsdangerous import URLSafeTimedSerializer

from relay.core.redaction import Redactor
from relay.core.tickets import (
    BAD_SIGNATURE,
    CLOCK_SKEW,
    MALFORMED,
    NO_AUDIENCE,
    NO_TICKET,
    SALT,
    WRONG_AUDIENCE,
    Claims,
    ReplayGuard,
    TicketError,
    issue,
    mint,
    new_nonce,
    verify,
)

T0 = 1_700_000_000.0
SECRET = "s3cret-current"
OLD = "s3cret-old"
NONCE = new_nonce(bytes(range(16)))


def _mint(
    secret: str = SECRET,
    *,
    now: float = T0,
    audience: str | None = None,
    ttl: float | None = None,
) -> str:
    return mint(secret, now=now, nonce=NONCE, subject="alice", audience=audience, ttl=ttl)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _hand_mint(claims: object, iat: int, secret: str, *, compress: bool = False) -> str:
    """Mint a ticket with the standard library only, exactly as the documented format says."""
    body = json.dumps(claims, separators=(",", ":"), ensure_ascii=False).encode()
    payload = "." + _b64(zlib.compress(body)) if compress else _b64(body)
    return _sign(payload, iat, secret)


def _sign(payload: str, iat: int, secret: str) -> str:
    """Append the timestamp and the HMAC-SHA256 signature to an encoded payload segment."""
    key = hashlib.sha256(SALT.encode() + b"signer" + secret.encode()).digest()
    timestamp = _b64(struct.pack(">Q", iat).lstrip(b"\0"))
    signed = f"{payload}.{timestamp}"
    sig = hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()
    return f"{signed}.{_b64(sig)}"


def _reason(
    ticket: str | None,
    secrets: list[str] | None = None,
    *,
    now: float = T0,
    audience: str | None = None,
) -> str:
    """Return the refusal reason verify gives (max_age 60 s)."""
    with pytest.raises(TicketError) as info:
        verify(ticket, secrets or [SECRET], now=now, max_age=60.0, audience=audience)
    assert str(info.value) == info.value.reason
    return info.value.reason


# --- round trip -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("audience", "ttl", "exp"),
    [
        (None, None, None),
        ("relay-a", None, None),
        (None, 30.0, int(T0) + 30),
        ("b", 5.5, int(T0) + 5),
    ],
)
def test_round_trip(audience: str | None, ttl: float | None, exp: int | None) -> None:
    """A freshly minted ticket verifies and yields the claims it was minted with."""
    ticket = _mint(audience=audience, ttl=ttl)
    claims = verify(ticket, [SECRET], now=T0 + 1, max_age=60, audience=audience)
    assert claims == Claims(sub="alice", jti=NONCE, aud=audience, iat=int(T0), exp=exp)


def test_ticket_is_url_safe() -> None:
    """A ticket uses only url-safe characters and needs no quoting in a query string."""
    ticket = _mint(audience="x y/z?", ttl=10)
    assert set(ticket) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


@pytest.mark.parametrize(("raw", "length"), [(bytes(16), 22), (b"\xff" * 32, 43)])
def test_new_nonce(raw: bytes, length: int) -> None:
    """new_nonce gives unpadded url-safe base64 of the caller's bytes."""
    nonce = new_nonce(raw)
    assert len(nonce) == length
    assert base64.urlsafe_b64decode(nonce + "=" * (-len(nonce) % 4)) == raw


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ticket", [None, ""])
def test_missing_ticket(ticket: str | None) -> None:
    """An empty or absent ticket says how to pass one."""
    assert _reason(ticket) == NO_TICKET


def test_missing_ticket_hint_survives_redaction() -> None:
    """The 401 hint names the three places a ticket goes, and log redaction leaves it whole."""
    assert Redactor().redact_text(NO_TICKET) == NO_TICKET
    assert Redactor().redact_text(NO_AUDIENCE) == NO_AUDIENCE
    for place in ("ticket query parameter", "acp-ticket.<ticket> subprotocol", "Authorization"):
        assert place in NO_TICKET


@pytest.mark.parametrize(
    "ticket",
    [
        "garbage",
        "a.b",
        "a..b",
        "..a.b.c",
        "a.b.c d",
        "é.b.c",
        "a.b.c\n",
        "a.b.c=",
        "x" * 5000 + ".a.b",
        _hand_mint({"sub": "a", "jti": "n"}, int(T0), SECRET) + ".",
    ],
)
def test_malformed_shape(ticket: str) -> None:
    """Text that is not shaped like a ticket is refused as malformed."""
    assert _reason(ticket) == MALFORMED


@pytest.mark.parametrize(
    "claims",
    [
        ["sub", "jti"],
        "text",
        42,
        None,
        {},
        {"sub": "a"},
        {"jti": "n"},
        {"sub": 1, "jti": "n"},
        {"sub": "a", "jti": 7},
        {"sub": "a", "jti": ""},
        {"sub": "a", "jti": "n", "aud": 3},
        {"sub": "a", "jti": "n", "aud": ["x"]},
        {"sub": "a", "jti": "n", "exp": "soon"},
        {"sub": "a", "jti": "n", "exp": 1.7e9},
        {"sub": "a", "jti": "n", "exp": True},
    ],
)
def test_malformed_payload(claims: object) -> None:
    """A correctly signed ticket whose payload has the wrong shape is refused as malformed."""
    assert _reason(_hand_mint(claims, int(T0), SECRET)) == MALFORMED


@pytest.mark.parametrize("payload", [b"{not json", b"\xff\xfe", b""])
def test_undecodable_payload(payload: bytes) -> None:
    """A correctly signed ticket whose payload is not JSON is refused as malformed."""
    assert _reason(_sign(_b64(payload) or "A", int(T0), SECRET)) == MALFORMED


def test_null_aud_and_exp_mean_absent() -> None:
    """JSON null for aud or exp is read as 'not set' (minters in other languages emit null)."""
    ticket = _hand_mint({"sub": "a", "jti": "n", "aud": None, "exp": None}, int(T0), SECRET)
    claims = verify(ticket, [SECRET], now=T0, max_age=60)
    assert (claims.aud, claims.exp) == (None, None)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-2] + ("AA" if t[-2:] != "AA" else "BB"),
        lambda t: "e" + t[1:] if t[0] != "e" else "f" + t[1:],
        lambda t: t.rsplit(".", 1)[0] + ".",
    ],
    ids=["signature", "payload", "no-signature"],
)
def test_tampered_ticket(tamper: Callable[[str], str]) -> None:
    """A ticket altered after signing fails the signature check (or is malformed)."""
    ticket = tamper(_mint())
    assert _reason(ticket) in {BAD_SIGNATURE, MALFORMED}


def test_wrong_secret() -> None:
    """A ticket signed with a secret the relay does not know names the likely cause."""
    assert _reason(_mint(secret="someone-else")) == BAD_SIGNATURE


@pytest.mark.parametrize(
    ("now", "ttl", "prefix"),
    [
        (T0 + 61, None, "ticket expired (issued 61 s ago, max age 60 s)"),
        (T0 + 75.5, None, "ticket expired (issued 75.5 s ago, max age 60 s)"),
        (T0 + 30, 30.0, "ticket expired (issued 30 s ago, ttl 30 s)"),
        (T0 + 45, 30.0, "ticket expired (issued 45 s ago, ttl 30 s)"),
        (T0 + 61, 120.0, "ticket expired (issued 61 s ago, max age 60 s)"),
    ],
)
def test_expired(now: float, ttl: float | None, prefix: str) -> None:
    """An old ticket, or one past its own exp, is refused and the reason says how old it is."""
    assert _reason(_mint(ttl=ttl), now=now) == prefix


@pytest.mark.parametrize(("now", "ok"), [(T0 + 60, True), (T0 + 60.5, False), (T0 + 29, True)])
def test_expiry_boundaries(now: float, ok: bool) -> None:
    """Age == max_age is still accepted; anything beyond is not."""
    ticket = _mint()
    if ok:
        assert verify(ticket, [SECRET], now=now, max_age=60).jti == NONCE
    else:
        assert _reason(ticket, now=now).startswith("ticket expired")


@pytest.mark.parametrize(("ahead", "ok"), [(1, True), (CLOCK_SKEW, True), (CLOCK_SKEW + 1, False)])
def test_issued_in_future(ahead: float, ok: bool) -> None:
    """Small clock skew is tolerated; a ticket from further in the future asks to check clocks."""
    ticket = _mint(now=T0 + ahead)
    if ok:
        assert verify(ticket, [SECRET], now=T0, max_age=60).iat == int(T0 + ahead)
    else:
        reason = _reason(ticket)
        assert reason.startswith("ticket issued in the future")
        assert "check clocks" in reason


def test_exp_shorter_than_max_age() -> None:
    """A ttl shorter than max_age wins, and expires_at reports it."""
    ticket = _mint(ttl=10)
    claims = verify(ticket, [SECRET], now=T0 + 9, max_age=60)
    assert claims.expires_at(60) == T0 + 10
    assert claims.expires_at(5) == T0 + 5
    assert _reason(ticket, now=T0 + 10).startswith("ticket expired")


# --- audience ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("minted", "wanted", "refusal"),
    [
        (None, None, None),
        ("relay-a", None, None),
        ("relay-a", "relay-a", None),
        ("relay-a", "relay-b", WRONG_AUDIENCE),
        (None, "relay-a", NO_AUDIENCE),
        ("", "relay-a", WRONG_AUDIENCE),
    ],
)
def test_audience(minted: str | None, wanted: str | None, refusal: str | None) -> None:
    """A required audience must match the claim exactly; without one any aud is accepted. A
    ticket without aud is told so, apart from one for another audience."""
    ticket = _mint(audience=minted)
    if refusal is None:
        assert verify(ticket, [SECRET], now=T0, max_age=60, audience=wanted).aud == minted
    else:
        assert _reason(ticket, audience=wanted) == refusal


# --- rotation and algorithm -------------------------------------------------------------------


@pytest.mark.parametrize(
    "secrets", [[OLD], [SECRET, OLD], [OLD, SECRET], ["a", OLD, "b"], ["a", "b", OLD]]
)
def test_rotation_accepts_any_listed_secret(secrets: list[str]) -> None:
    """A ticket signed with an old secret verifies wherever that secret sits in the list."""
    assert verify(_mint(secret=OLD), secrets, now=T0, max_age=60).sub == "alice"


def test_issue_mints_at_the_clocks_time_with_a_nonce_of_the_randomness() -> None:
    """issue is mint at clock()'s time with a nonce of 16 bytes of the randomness given."""
    asked: list[int] = []

    def randomness(count: int) -> bytes:
        asked.append(count)
        return bytes(range(count))

    ticket = issue(
        SECRET, clock=lambda: T0, randomness=randomness, subject="alice", audience="a", ttl=30
    )
    assert asked == [16]
    assert ticket == mint(SECRET, now=T0, nonce=NONCE, subject="alice", audience="a", ttl=30)


def test_issue_refuses_randomness_too_short_for_a_nonce() -> None:
    """Randomness that gives fewer than 16 bytes is a programming error, never a weak ticket."""
    with pytest.raises(ValueError, match="at least 16 random bytes"):
        issue(SECRET, clock=lambda: T0, randomness=lambda n: bytes(n - 1), subject="alice")


def test_mint_signs_with_the_given_secret() -> None:
    """mint signs with exactly the secret passed, so a list without it refuses the ticket."""
    ticket = _mint(secret=OLD)
    assert ticket == _hand_mint({"sub": "alice", "jti": NONCE}, int(T0), OLD)
    assert _reason(ticket, [SECRET, "other"]) == BAD_SIGNATURE


def test_signature_is_hmac_sha256() -> None:
    """The signature is 32 bytes and an itsdangerous SHA-1 ticket with the same salt is refused."""
    sig = _mint().rsplit(".", 1)[1]
    assert len(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))) == 32
    sha1 = URLSafeTimedSerializer(SECRET, salt=SALT).dumps({"sub": "a", "jti": "n"})
    assert _reason(sha1, now=T0) in {BAD_SIGNATURE}


@pytest.mark.parametrize(
    ("secrets", "error"), [([], ValueError), ([""], ValueError), (SECRET, TypeError)]
)
def test_bad_secret_list_is_a_programming_error(secrets: object, error: type[Exception]) -> None:
    """An empty secret list, an empty secret or a bare string is a bug, not a refused ticket."""
    with pytest.raises(error):
        verify(_mint(), secrets, now=T0, max_age=60)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "call",
    [
        lambda: mint("", now=T0, nonce="n", subject="a"),
        lambda: mint(SECRET, now=T0, nonce="", subject="a"),
        lambda: mint(SECRET, now=T0, nonce="n", subject="a", ttl=0),
        lambda: verify("x.y.z", [SECRET], now=T0, max_age=0),
        lambda: new_nonce(bytes(15)),
        lambda: ReplayGuard(0),
    ],
)
def test_bad_arguments_raise_value_error(call: Callable[[], object]) -> None:
    """Nonsensical arguments from the calling code raise ValueError."""
    with pytest.raises(ValueError):  # noqa: PT011 - the message is not the point here
        call()


# --- documented wire format -------------------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_interop_stdlib_minted_ticket_verifies(compress: bool) -> None:
    """A ticket built with only hmac/hashlib/base64/json/struct/zlib per the docs verifies."""
    claims = {"sub": "ci-bot", "jti": "abc123", "aud": "relay-1", "exp": int(T0) + 30, "x": 1}
    ticket = _hand_mint(claims, int(T0) - 3, OLD, compress=compress)
    got = verify(ticket, [SECRET, OLD], now=T0, max_age=60, audience="relay-1")
    assert got == Claims(
        sub="ci-bot", jti="abc123", aud="relay-1", iat=int(T0) - 3, exp=int(T0) + 30
    )


def test_interop_mint_matches_stdlib_bytes() -> None:
    """mint produces byte-for-byte the documented format (claim order sub, jti, aud, exp)."""
    claims = {"sub": "alice", "jti": NONCE, "aud": "r", "exp": int(T0) + 30}
    assert _mint(audience="r", ttl=30) == _hand_mint(claims, int(T0), SECRET)


# --- replay guard -----------------------------------------------------------------------------


def test_replay_detected_until_expiry() -> None:
    """A remembered jti is a replay up to and including expires_at, then it is forgotten."""
    guard = ReplayGuard()
    assert not guard.is_replay("a", T0)
    assert guard.remember("a", T0 + 60, T0)
    assert guard.is_replay("a", T0 + 1)
    assert not guard.is_replay("b", T0 + 1)
    assert guard.is_replay("a", T0 + 60)
    assert not guard.is_replay("a", T0 + 60.1)
    assert len(guard) == 0


def test_replay_guard_with_verify() -> None:
    """The intended flow: verify, check replay, remember until the ticket would expire anyway."""
    guard = ReplayGuard()
    ticket = _mint(ttl=20)
    for now, replay in [(T0, False), (T0 + 5, True), (T0 + 19, True)]:
        claims = verify(ticket, [SECRET], now=now, max_age=60)
        assert guard.is_replay(claims.jti, now) is replay
        assert guard.remember(claims.jti, claims.expires_at(60), now)
    assert _reason(ticket, now=T0 + 20).startswith("ticket expired")


def test_expired_entries_are_pruned() -> None:
    """Expired entries are dropped lazily, so len counts only live ones."""
    guard = ReplayGuard()
    for i in range(10):
        guard.remember(f"j{i}", T0 + i, T0)
    assert len(guard) == 10
    assert not guard.is_replay("j0", T0 + 4.5)
    assert len(guard) == 5


def test_remember_already_expired_is_a_no_op() -> None:
    """Remembering a jti whose expiry has passed stores nothing (verify refuses it anyway)."""
    guard = ReplayGuard(capacity=1)
    assert guard.remember("old", T0 - 1, T0)
    assert len(guard) == 0


def test_capacity_bound() -> None:
    """When full of live entries remember returns False; len never exceeds capacity."""
    guard = ReplayGuard(capacity=3)
    assert all(guard.remember(f"j{i}", T0 + 10 + i, T0) for i in range(3))
    assert not guard.remember("j3", T0 + 100, T0)
    assert len(guard) == 3
    assert not guard.is_replay("j3", T0)
    assert guard.remember("j0", T0 + 50, T0), "re-remembering a known jti needs no room"
    assert guard.remember("j3", T0 + 100, T0 + 11.5), "room again once j1 has expired"
    assert len(guard) == 3


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 50)), max_size=200))
def test_capacity_never_exceeded(ops: list[tuple[str, int]]) -> None:
    """Under any sequence of remembers with a moving clock, len and heap stay bounded."""
    guard = ReplayGuard(capacity=4)
    for step, (jti, ttl) in enumerate(ops):
        guard.remember(jti, T0 + step + ttl, T0 + step)
        assert len(guard) <= 4
        assert len(guard._heap) <= 2 * 4 + 1


def test_re_remember_extends_without_growing() -> None:
    """Remembering the same jti again keeps one entry with the later expiry."""
    guard = ReplayGuard(capacity=2)
    for i in range(100):
        assert guard.remember("a", T0 + i, T0)
    assert len(guard) == 1
    assert guard.is_replay("a", T0 + 99)


# --- robustness -------------------------------------------------------------------------------

_ticketish = st.text(alphabet="ABCDEFabcdef0123456789-_.", max_size=120)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
        st.binary(max_size=200).map(lambda b: b.decode("utf-8", "surrogateescape")),
        _ticketish,
    )
)
def test_verify_only_raises_ticket_error(text: str) -> None:
    """verify on arbitrary text either returns Claims or raises TicketError, nothing else."""
    with contextlib.suppress(TicketError):
        verify(text, [SECRET, OLD], now=T0, max_age=60, audience="a")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)
_claimish = st.fixed_dictionaries(
    {}, optional={"sub": _json, "jti": _json, "aud": _json, "exp": _json}
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.one_of(_json, _claimish), st.integers(1, 2**64 - 1), st.booleans())
def test_signed_garbage_only_raises_ticket_error(claims: object, iat: int, compress: bool) -> None:
    """Even correctly signed tickets with arbitrary JSON and timestamps only raise TicketError."""
    ticket = _hand_mint(claims, iat, SECRET, compress=compress)
    try:
        got = verify(ticket, [SECRET], now=T0, max_age=60)
    except TicketError:
        return
    assert isinstance(got.sub, str)
    assert isinstance(got.jti, str)


def test_signed_payload_nested_too_deeply_is_malformed() -> None:
    """A correctly signed ticket whose claims nest too deeply is malformed, not an exception."""
    payload = _b64(("[" * 1500 + "]" * 1500).encode())
    assert len(payload) < 4096
    assert _reason(_sign(payload, int(T0), SECRET)) == MALFORMED


def test_a_watchers_ticket_carries_its_connection_and_right_to_answer() -> None:
    """--watch and --may-answer travel signed in the ticket, and come back as claims."""
    ticket = mint(SECRET, now=T0, nonce=NONCE, subject="lead", watch="c-1", may_answer=True)
    claims = verify(ticket, [SECRET], now=T0, max_age=60)
    assert (claims.watch, claims.may_answer) == ("c-1", True)
    plain = verify(_mint(), [SECRET], now=T0, max_age=60)
    assert (plain.watch, plain.may_answer) == (None, False)


def test_the_right_to_answer_goes_with_a_watch() -> None:
    """A ticket may not carry the right to answer without the connection it watches."""
    with pytest.raises(ValueError, match="may_answer goes with watch"):
        mint(SECRET, now=T0, nonce=NONCE, subject="a", may_answer=True)


@pytest.mark.parametrize(
    "extra", [{"watch": ""}, {"watch": 7}, {"watch": "x" * 65}, {"answer": True}, {"answer": 1}]
)
def test_odd_watch_claims_are_malformed(extra: dict[str, object]) -> None:
    """A watch claim that is empty, not text, too long, or an answer right alone: refused."""
    ticket = _hand_mint({"sub": "a", "jti": NONCE, **extra}, int(T0), SECRET)
    with pytest.raises(TicketError, match=MALFORMED):
        verify(ticket, [SECRET], now=T0, max_age=60)
