"""Tests for relay.observe.metrics: /metrics on a live relay, read back with prometheus-client's
parser."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Awaitable
from contextlib import suppress
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from relay import __version__
from tests.support.agents import CHOOSER, ECHO_AGENT
from tests.support.http import http_get
from tests.support.live import LiveRelay, live_relay, make_ticket
from tests.support.prometheus import prometheus
from tests.support.waiting import until, until_async
from tests.system import require_packages

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
    assert ("acp_relay_build_info", (("version", __version__),)) in after
    assert any(name == "python_info" for name, _ in after)
    assert any(name == "python_gc_collections_total" for name, _ in after)


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


@pytest.mark.slow
async def test_prometheus_scrapes_the_relay_and_sees_its_traffic() -> None:
    """Debian's Prometheus scrapes a live relay: a good connection, refusals, an agent exit."""
    async with live_relay(CHOOSER, metrics_listen=("127.0.0.1", 0)) as live:
        assert live.relay.metrics_port is not None
        target = f"127.0.0.1:{live.relay.metrics_port}"
        async with prometheus("acp-relay", [target]) as server:
            await _drive_traffic(live)
            await until(lambda: not live.relay.connections, "both connections to end")

            def scraped_after_the_traffic() -> bool:
                return server.value("sum(acp_relay_connections_ended_total)") == 2

            await until_async(
                lambda: asyncio.to_thread(scraped_after_the_traffic),
                "a scrape that saw both connections end",
                seconds=20,
            )
            values = {
                query: await asyncio.to_thread(server.value, query) for query in EXPECTED_SERIES
            }
            resident = await asyncio.to_thread(server.value, "process_resident_memory_bytes")
    assert values == EXPECTED_SERIES
    assert resident is not None
    assert resident > 0


EXPECTED_SERIES: dict[str, float | None] = {
    'up{job="acp-relay"}': 1,
    "acp_relay_connections_opened_total": 2,
    'acp_relay_connections_ended_total{close="error",exit="nonzero"}': 1,
    'acp_relay_admissions_refused_total{reason="ticket_invalid"}': 1,
    'acp_relay_admissions_refused_total{reason="ticket_missing"}': 1,
    'acp_relay_admissions_refused_total{reason="path"}': 1,
    'acp_relay_admissions_refused_total{reason="origin"}': 0,
    'acp_relay_messages_total{direction="to_client"}': 1,
    'acp_relay_messages_total{direction="to_agent"}': 4,  # {"exec": ...} and one each
    'acp_relay_connections{state="attached"}': 0,
    "acp_relay_agent_start_seconds_count": 2,
    "acp_relay_connection_duration_seconds_count": 2,
}


async def _drive_traffic(live: LiveRelay) -> None:
    """Refusals (bad ticket, none, wrong path), an echoed message, an agent exiting 3."""
    for url in (live.url("garbage"), live.url(None), live.url(make_ticket(), path="/nope")):
        with suppress(InvalidStatus):
            async with connect(url):
                pass
    async with connect(live.url(make_ticket())) as ws:
        await ws.send(json.dumps({"exec": list(ECHO_AGENT)}))
        await ws.send('{"id":1}')
        async with asyncio.timeout(5):
            assert await ws.recv() == '{"id":1}'
    async with connect(live.url(make_ticket())) as ws:
        await ws.send(json.dumps({"exec": list(EXIT_3)}))
        await ws.send("{}")
        async with asyncio.timeout(5):
            with suppress(ConnectionClosed):
                await ws.recv()


OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def runbook_rules() -> str:
    """The alerting rules of docs/operations.md, as written there."""
    found = re.search(r"```yaml\n(groups:.*?)```", OPERATIONS.read_text(), re.S)
    assert found is not None
    return found.group(1)


async def test_the_runbook_names_every_metric_the_relay_exposes() -> None:
    """Every acp_relay_ family of a scrape has its row in docs/operations.md, and no other."""
    async with live_relay(ECHO_AGENT) as live:
        text = (await http_get(live.relay.port, "/metrics")).body
    exposed = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in text_string_to_metric_families(text)
        if family.name.startswith("acp_relay_")
    }
    documented = set(re.findall(r"^\| `(acp_relay_\w+)`", OPERATIONS.read_text(), re.M))
    assert documented == exposed


@pytest.mark.slow
def test_the_runbooks_alerts_pass_promtool(tmp_path: Path) -> None:
    """promtool accepts the runbook's alerting rules; the metrics they use exist."""
    require_packages("prometheus", commands=("promtool",))
    rules = tmp_path / "rules.yml"
    rules.write_text(runbook_rules())
    checked = subprocess.run(
        ["promtool", "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    documented = set(re.findall(r"^\| `(acp_relay_\w+)`", OPERATIONS.read_text(), re.M))
    used = set(re.findall(r"\b(acp_relay_\w+?)(?:_bucket)?\b", runbook_rules()))
    assert used <= documented


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
