"""relay.client.link.dialing: every client's ticket and socket, and the kind the relay made it.

In process, against a relay in the test's loop on 127.0.0.1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from relay.client.link.dialing import (
    PLAIN_ONLY,
    RESUMABLE_OR_PLAIN,
    WATCHING,
    DialConfig,
    Offer,
    dial,
    ticket_for,
)
from relay.client.link.editorerrors import Failure
from relay.client.link.ticketsource import TicketSource
from relay.core.subprotocols import SocketKind
from tests.support.agents import ECHO_AGENT
from tests.support.live import live_relay, make_ticket
from tests.support.sockets import free_port

GIVEN = TicketSource(value="unused")


@pytest.mark.parametrize(
    ("offer", "grace", "kind", "selected"),
    [
        (PLAIN_ONLY, 30, SocketKind.PLAIN, None),
        (RESUMABLE_OR_PLAIN, 30, SocketKind.RESUMABLE, "acp-relay.resume.v1"),
        (RESUMABLE_OR_PLAIN, 0, SocketKind.PLAIN, "acp.v1"),
    ],
    ids=["plain-only", "resumable", "relay-without-resuming"],
)
async def test_dial_says_the_kind_the_relay_made_the_socket(
    offer: Offer, grace: float, kind: SocketKind, selected: str | None
) -> None:
    """Plain ACP only offers no subprotocol at all; the kind follows the relay's choice."""
    async with live_relay(ECHO_AGENT, resume_grace=grace) as live:
        dialed = await dial(DialConfig(url=live.url(), ticket=GIVEN), make_ticket(), offer)
        assert not isinstance(dialed, Failure)
        await dialed.ws.close()
    assert (dialed.kind, dialed.ws.subprotocol) == (kind, selected)


async def test_a_watchers_socket_is_of_the_watchers_kind() -> None:
    """Offering the watch profile with a watcher's ticket gives a watcher's socket."""
    async with live_relay(ECHO_AGENT) as live, connect(live.ticket_url()) as watched:
        assert watched.response is not None
        watch = watched.response.headers["Acp-Connection-Id"]
        config = DialConfig(url=live.url(), ticket=GIVEN)
        dialed = await dial(config, make_ticket(watch=watch), WATCHING)
        assert not isinstance(dialed, Failure)
        await dialed.ws.close()
    assert dialed.kind is SocketKind.WATCHER


async def test_a_refused_socket_is_a_failure_in_the_editors_words() -> None:
    """Nothing listening: the failure says the connection was refused, no exception."""
    url = f"ws://127.0.0.1:{free_port()}/acp"
    failure = await dial(DialConfig(url=url, ticket=GIVEN), "t", RESUMABLE_OR_PLAIN)
    assert isinstance(failure, Failure)
    assert (failure.message, failure.data["cause"]) == (
        f"cannot reach relay at {url}: connection refused",
        "refused",
    )


async def test_no_ticket_is_a_failure_saying_why(tmp_path: Path) -> None:
    """A ticket file that is not there: the failure names it, as the editor will see it."""
    missing = tmp_path / "ticket"
    config = DialConfig(url="ws://127.0.0.1:1/acp", ticket=TicketSource(file=str(missing)))
    failure = await ticket_for(config)
    assert isinstance(failure, Failure)
    assert failure.data["cause"] == "ticket"
    assert failure.message.startswith(f"cannot get a ticket for relay at {config.url}: ")
    assert str(missing) in failure.message
