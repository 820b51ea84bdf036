"""relay.client.link.opening: the relay's choice of subprotocol makes the link's kind.

In process, against a relay in the test's loop on 127.0.0.1, the client being ``connect``'s
own bridge over real OS pipes (:func:`tests.support.pipes.os_pipe`).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from relay.client.editor.bridge import Bridge
from relay.client.link.dialing import DialConfig
from relay.client.link.editorerrors import Failure
from relay.client.link.opening import ONE_OFF_TICKET, open_link, resumable_socket
from relay.client.link.plain import PlainLink
from relay.client.link.resuming import ResumingLink
from relay.client.link.ticketsource import TicketSource
from tests.support.agents import ECHO_AGENT
from tests.support.connect import notification
from tests.support.live import live_relay, make_ticket, until_idle
from tests.support.pipes import os_pipe

AGAIN = TicketSource(command=("a-ticket-command",))  # a ticket can be had for each socket
ONE_OFF = TicketSource(value="a-ticket-given-once")


async def editor_still_writing() -> None:
    """The editor's side of a link that the test stops: stdin that never ends."""
    await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("grace", "source", "resume", "kind", "selected", "unresumable"),
    [
        (30, AGAIN, True, ResumingLink, "acp-relay.resume.v1", None),
        (0, AGAIN, True, PlainLink, "acp.v1", None),
        (30, ONE_OFF, True, PlainLink, None, ONE_OFF_TICKET),
        (30, AGAIN, False, PlainLink, None, None),
    ],
    ids=["resumable", "relay-without-resuming", "one-off-ticket", "no-resume"],
)
async def test_the_relays_choice_makes_the_links_kind_and_it_carries_lines(
    grace: float,
    source: TicketSource,
    resume: bool,
    kind: type[PlainLink | ResumingLink],
    selected: str | None,
    unresumable: str | None,
) -> None:
    """The profile is offered only when resuming is on and the ticket can be had again; the
    relay's choice makes the link resumable or plain (a one-off ticket's link says why it
    cannot resume), and either kind carries a line to the agent and its echo back."""
    async with (
        live_relay(ECHO_AGENT, resume_grace=grace) as live,
        os_pipe() as stdin,
        os_pipe() as stdout,
    ):
        config = DialConfig(url=live.url(), ticket=source, resume=resume)
        bridge = Bridge(config, stdin.reader, stdout.writer)
        link = await open_link(bridge, make_ticket(), stdout.writer)
        assert isinstance(link, PlainLink | ResumingLink)
        assert (type(link), link.ws.subprotocol) == (kind, selected)
        assert getattr(link, "unresumable", None) == unresumable
        stop, editing = asyncio.Event(), asyncio.create_task(editor_still_writing())
        carrying = asyncio.create_task(link.run(editing, stop))
        line = json.dumps(notification(1)).encode()
        await link.send_lines([line])
        async with asyncio.timeout(10):
            echoed = await stdout.reader.readline()
        stop.set()
        assert await carrying is True  # the client was done: closed with 1000
        editing.cancel()
        await until_idle(live.relay)
    assert echoed == line + b"\n"


async def test_a_client_that_needs_resuming_refuses_a_plain_socket() -> None:
    """A relay that does not resume: the socket is closed with 1000 and the failure names the
    client that needs the profile."""
    async with live_relay(ECHO_AGENT, resume_grace=0) as live:
        config = DialConfig(url=live.url(), ticket=AGAIN)
        refused = await resumable_socket(config, make_ticket(), "a chat thread")
        await until_idle(live.relay)
    assert isinstance(refused, Failure)
    assert refused.data == {
        "url": live.url(),
        "cause": "handshake",
        "detail": "the relay does not offer resuming, which a chat thread needs",
    }
