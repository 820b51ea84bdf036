"""Tests for relay.metrics: /metrics on a live relay, read back with prometheus-client's parser."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextlib import suppress

from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support.agents import ECHO_AGENT
from tests.support.http import http_get
from tests.support.live import LiveRelay, live_relay, make_ticket
from tests.support.waiting import until, until_async

EXIT_3 = ("sh", "-c", "read line; exit 3")
Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


def samples(text: str) -> Samples:
    """Every sample of the exposition, keyed by name and sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def scrape(live: LiveRelay) -> Samples:
    answer = await http_get(live.relay.port, "/metrics")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/plain; version=")
    return samples(answer.body)


def ended(close: str, exit_: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("acp_relay_connections_ended_total", (("close", close), ("exit", exit_)))


def direction(name: str, to: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (f"acp_relay_{name}_total", (("direction", to),))


def refused(reason: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("acp_relay_admissions_refused_total", (("reason", reason),))


async def test_a_connection_and_refusals_show_as_their_series() -> None:
    """Open connections, messages and bytes each way, and refusals by reason are counted."""
    async with live_relay(ECHO_AGENT) as live:
        async with connect(live.url(make_ticket())) as ws:
            await ws.send('{"id":1}')
            async with asyncio.timeout(5):
                assert await ws.recv() == '{"id":1}'
            during = await scrape(live)
        for ticket in ("garbage", None):
            with suppress(InvalidStatus):
                async with connect(live.url(ticket)):
                    pass
        await until(lambda: not live.relay.connections, "the connection to end")
        after = await scrape(live)
    assert during[("acp_relay_connections", (("state", "attached"),))] == 1
    assert during[direction("messages", "to_agent")] == 1
    assert during[direction("messages", "to_client")] == 1
    assert after[("acp_relay_connections", (("state", "attached"),))] == 0
    assert after[("acp_relay_connections_opened_total", ())] == 1
    assert after[direction("bytes", "to_agent")] == len('{"id":1}')
    assert after[refused("ticket_invalid")] == 1
    assert after[refused("ticket_missing")] == 1
    assert after[("acp_relay_agent_start_seconds_count", ())] == 1
    assert after[("acp_relay_first_byte_seconds_count", ())] == 1
    assert after[("acp_relay_connection_duration_seconds_count", ())] == 1
    assert ("process_open_fds", ()) in after


async def test_an_agent_exit_is_counted_by_its_classes() -> None:
    """An agent exiting 3 ends its connection as close class error, exit class nonzero."""
    async with live_relay(EXIT_3) as live:
        async with connect(live.url(make_ticket())) as ws:
            await ws.send("{}")
            async with asyncio.timeout(5):
                with suppress(ConnectionClosed):
                    await ws.recv()
        await until_async(
            lambda: _equals(scrape(live), ended("error", "nonzero"), 1), "an ended connection"
        )


async def _equals(scraped: Awaitable[Samples], key: tuple[str, Labels], value: float) -> bool:
    return (await scraped).get(key) == value


async def test_no_label_comes_from_a_client() -> None:
    """Label values are the relay's fixed sets: no path, subject, pid or connection id."""
    async with (
        live_relay(ECHO_AGENT) as live,
        connect(live.url(make_ticket(subject="alice-the-user"))) as ws,
    ):
        await ws.send("{}")
        async with asyncio.timeout(5):
            await ws.recv()
        text = (await http_get(live.relay.port, "/metrics")).body
    assert "alice" not in text
    assert "/acp" not in text


async def test_metrics_can_have_a_port_of_their_own() -> None:
    """With --metrics-listen, /metrics is served there too, and nothing else is."""
    async with live_relay(ECHO_AGENT, metrics_listen=("127.0.0.1", 0)) as live:
        port = live.relay.metrics_port
        assert port is not None
        assert port != live.relay.port
        metrics = await http_get(port, "/metrics")
        elsewhere = await http_get(port, "/busy")
    assert metrics.status == 200
    assert "acp_relay_connections_opened_total" in metrics.body
    assert elsewhere.status == 404


async def test_warm_agents_are_a_gauge_and_their_events_counted() -> None:
    """Warm agents waiting show as a gauge; started and taken ones are counted."""
    async with live_relay(ECHO_AGENT, warm_agents=1) as live:
        await until(lambda: live.relay.busy_report()["warm"] == 1, "a warm agent")
        async with connect(live.ticket_url()) as ws:
            await ws.send("{}")
            async with asyncio.timeout(5):
                await ws.recv()
            await until(lambda: live.relay.busy_report()["warm"] == 1, "its replacement")
            scraped = await scrape(live)

    def event(name: str) -> tuple[str, Labels]:
        return ("acp_relay_warm_agent_events_total", (("event", name),))

    assert scraped[("acp_relay_warm_agents", ())] == 1
    assert (scraped[event("started")], scraped[event("taken")]) == (2, 1)
    assert (scraped[event("ended")], scraped[event("recycled")]) == (0, 0)
