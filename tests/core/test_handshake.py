"""Tests for relay.core.handshake: which requests are real upgrades, before any ticket is spent."""

from __future__ import annotations

import pytest

from relay.core.admission import Refusal
from relay.core.handshake import HandshakeGate, Shape, check_upgrade, duplicated
from relay.core.resumeprofile import PROFILE
from relay.core.subprotocols import ACP_V1, SocketKind
from relay.core.watchprofile import WATCH_PROFILE

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
SPEAKS = (SocketKind.RESUMABLE, SocketKind.PLAIN)


def upgrade(*extra: tuple[str, str], drop: str = "") -> list[tuple[str, str]]:
    base = [
        ("Host", "127.0.0.1"),
        ("Upgrade", "websocket"),
        ("Connection", "keep-alive, Upgrade"),
        ("Sec-WebSocket-Key", KEY),
        ("Sec-WebSocket-Version", "13"),
    ]
    return [(k, v) for k, v in base if k != drop] + list(extra)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (upgrade(), Shape()),
        (upgrade(("Sec-WebSocket-Protocol", "acp.v1")), Shape(("acp.v1",), None, ACP_V1)),
        (upgrade(("Sec-WebSocket-Protocol", "acp.v1, acp-ticket.T.K.S")),
         Shape(("acp.v1",), "T.K.S", ACP_V1)),
        (upgrade(("Sec-WebSocket-Protocol", "acp.v1"), ("Sec-WebSocket-Protocol", PROFILE)),
         Shape(("acp.v1", PROFILE), None, PROFILE)),
        (upgrade(("Sec-WebSocket-Protocol", "x, acp.v1")), Shape(("x", "acp.v1"), None, ACP_V1)),
    ],
)  # fmt: skip
def test_real_upgrades_and_what_they_offer(headers: list[tuple[str, str]], expected: Shape) -> None:
    """An upgrade passes with the subprotocol to select (resume first) and its ticket."""
    assert check_upgrade(headers, speaks=SPEAKS) == expected


@pytest.mark.parametrize(
    ("select", "kind"),
    [
        (None, SocketKind.PLAIN),
        (ACP_V1, SocketKind.PLAIN),
        (PROFILE, SocketKind.RESUMABLE),
        (WATCH_PROFILE, SocketKind.WATCHER),
    ],
)
def test_the_subprotocol_selected_says_what_the_socket_is(
    select: str | None, kind: SocketKind
) -> None:
    """No subprotocol or acp.v1: a plain socket; the resume profile: a resumable one; the
    watch profile: a watcher's."""
    assert Shape(select=select).kind is kind


def test_a_watcher_offering_the_watch_profile_is_a_watchers_socket() -> None:
    """When the relay speaks the watch profile, an upgrade offering it makes a watcher."""
    speaks = (SocketKind.WATCHER, SocketKind.RESUMABLE, SocketKind.PLAIN)
    shape = check_upgrade(upgrade(("Sec-WebSocket-Protocol", WATCH_PROFILE)), speaks=speaks)
    assert isinstance(shape, Shape)
    assert shape.kind is SocketKind.WATCHER


@pytest.mark.parametrize(
    ("headers", "status", "words"),
    [
        (upgrade(drop="Upgrade"), 426, "WebSocket only"),
        (upgrade(drop="Connection"), 426, "Connection: Upgrade"),
        (upgrade(drop="Sec-WebSocket-Version"), 426, "version"),
        (upgrade(drop="Sec-WebSocket-Key"), 400, "Sec-WebSocket-Key"),
        ([*upgrade(drop="Sec-WebSocket-Key"), ("Sec-WebSocket-Key", "short")], 400, "16 bytes"),
        (upgrade(("Host", "evil.example")), 400, "Host header is given more than once"),
        (upgrade(("Origin", "http://a"), ("Origin", "http://b")), 400, "Origin header"),
        (upgrade(("Authorization", "Bearer a"), ("authorization", "Bearer b")), 400,
         "Authorization header"),
        (upgrade(("Sec-WebSocket-Protocol", "graphql-ws")), 400, "none of the offered"),
        (upgrade(("Sec-WebSocket-Protocol", "acp-ticket.T")), 400,
         "offer acp-relay.resume.v1 or acp.v1"),
        (upgrade(("Sec-WebSocket-Protocol", "acp.v1, acp-ticket.A, acp-ticket.B")), 400,
         "at most one acp-ticket"),
    ],
)  # fmt: skip
def test_requests_that_cannot_be_upgrades_are_refused(
    headers: list[tuple[str, str]], status: int, words: str
) -> None:
    """No upgrade, a bad key, a header twice, no subprotocol the relay speaks: refused, why."""
    refused = check_upgrade(headers, speaks=SPEAKS)
    assert isinstance(refused, Refusal)
    assert refused.status == status
    assert words in refused.reason


def test_a_ticket_subprotocol_is_never_in_the_reason() -> None:
    """A refusal never echoes the ticket a subprotocol carried."""
    refused = check_upgrade(upgrade(("Sec-WebSocket-Protocol", "acp-ticket.SECRET")), speaks=SPEAKS)
    assert isinstance(refused, Refusal)
    assert "SECRET" not in refused.reason


def test_resume_profile_is_not_spoken_when_resuming_is_off() -> None:
    """With resuming off the relay speaks acp.v1 only: the profile alone is refused."""
    refused = check_upgrade(
        upgrade(("Sec-WebSocket-Protocol", PROFILE)), speaks=(SocketKind.PLAIN,)
    )
    assert isinstance(refused, Refusal)
    assert refused.status == 400


def test_duplicated_checks_every_path() -> None:
    """A repeated Host is refused wherever the request goes; a single one passes."""
    assert duplicated([("Host", "a"), ("host", "b")]) is not None
    assert duplicated([("Host", "a"), ("X-Other", "1"), ("X-Other", "2")]) is None


def test_duplicated_checks_the_names_it_is_given() -> None:
    """Given names, only those must come once; the refusal names the header."""
    twice = [("Sec-Fetch-Site", "same-origin"), ("sec-fetch-site", "cross-site")]
    refused = duplicated(twice, ("Sec-Fetch-Site",))
    assert refused is not None
    assert (refused.status, refused.reason) == (
        400,
        "bad request: the Sec-Fetch-Site header is given more than once",
    )
    assert duplicated(twice) is None


def test_gate_caps_handshakes_overall_and_per_address() -> None:
    """Past either cap a handshake is refused (not counted); leaving frees its place."""
    gate = HandshakeGate(limit=3, per_address=2)
    assert gate.enter("a") is None
    assert gate.enter("a") is None
    assert "from a" in (gate.enter("a") or "")
    assert gate.enter("b") is None
    assert "handshakes in progress" in (gate.enter("c") or "")
    gate.leave("a")
    assert gate.enter("c") is None
    assert (gate.total, gate.by_address) == (3, {"a": 1, "b": 1, "c": 1})
    for address in ("a", "b", "c"):
        gate.leave(address)
    assert (gate.total, gate.by_address) == (0, {})
