"""Tests for relay.core.subprotocols: what the subprotocol a relay selected makes of a socket."""

from __future__ import annotations

import pytest

from relay.core.resumeprofile import PROFILE
from relay.core.subprotocols import ACP_V1, SocketKind, selected_kind
from relay.core.watchprofile import WATCH_PROFILE


@pytest.mark.parametrize(
    ("selected", "kind"),
    [
        (None, SocketKind.PLAIN),
        (ACP_V1, SocketKind.PLAIN),
        (PROFILE, SocketKind.RESUMABLE),
        (WATCH_PROFILE, SocketKind.WATCHER),
    ],
)
def test_the_relays_choice_says_what_the_socket_is(selected: str | None, kind: SocketKind) -> None:
    """No subprotocol or acp.v1: a plain socket; the resume profile: a resumable one; the
    watch profile: a watcher's."""
    assert selected_kind(selected) is kind


@pytest.mark.parametrize("selected", ["acp.v2", "acp-ticket.T.K.S", "", "ACP.V1"])
def test_a_subprotocol_the_relay_does_not_speak_is_no_kind_of_socket(selected: str) -> None:
    """What a relay selected that is none of its subprotocols makes no known socket."""
    assert selected_kind(selected) is None


def test_each_kind_is_named_by_the_subprotocol_on_the_wire() -> None:
    """The kinds' values are the subprotocol names, which are public: they do not change."""
    assert [kind.value for kind in SocketKind] == [
        "acp.v1",
        "acp-relay.resume.v1",
        "acp-relay.watch.v1",
    ]
