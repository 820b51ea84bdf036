"""``GET /metrics``: the relay's figures in the Prometheus text format, by prometheus-client.

The numbers are :mod:`relay.observe.stats`'s, kept as the relay goes; this module is a collector
that reads them at scrape time and hands them to the official client library, which
writes the exposition, with the library's default collectors beside it: process (CPU,
memory, open files), platform (``python_info``) and garbage collection. The library is
imported on the first scrape, so a relay that is never scraped never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from relay import __version__
from relay.observe.stats import (
    DROP_REASONS,
    REFUSAL_REASONS,
    WARM_EVENTS,
    WATCH_EVENTS,
    Histogram,
    RelayStats,
)

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

PREFIX = "acp_relay"
Gauges = Callable[[], dict[str, float]]  # "attached", "detached", "warm"


class Exposition:
    """The relay's registry, made on the first scrape; :meth:`render` is one scrape."""

    def __init__(self, stats: RelayStats, gauges: Gauges) -> None:
        self.stats = stats
        self.gauges = gauges
        self._registry: CollectorRegistry | None = None

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self._get_registry()), CONTENT_TYPE_LATEST

    def _get_registry(self) -> CollectorRegistry:
        if self._registry is None:
            from prometheus_client import (
                CollectorRegistry,
                GCCollector,
                PlatformCollector,
                ProcessCollector,
            )

            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            GCCollector(registry=registry)
            registry.register(_Collector(self.stats, self.gauges))
            self._registry = registry
        return self._registry


class _Collector:
    """A prometheus-client collector over :class:`relay.observe.stats.RelayStats`."""

    def __init__(self, stats: RelayStats, gauges: Gauges) -> None:
        self.stats = stats
        self.gauges = gauges

    def describe(self) -> list[Any]:
        return []  # families are built per scrape; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            InfoMetricFamily,
        )

        s = self.stats
        gauges = self.gauges()
        yield InfoMetricFamily(f"{PREFIX}_build", "The relay's version", {"version": __version__})
        connections = GaugeMetricFamily(
            f"{PREFIX}_connections", "Connections now, by state", labels=["state"]
        )
        for state in ("attached", "detached"):
            connections.add_metric([state], gauges.get(state, 0))
        yield connections
        yield GaugeMetricFamily(
            f"{PREFIX}_warm_agents", "Agents started ahead of demand, ready", gauges.get("warm", 0)
        )
        warm = CounterMetricFamily(
            f"{PREFIX}_warm_agent_events",
            "Warm agents started, failed to start, taken, ended while waiting, recycled",
            labels=["event"],
        )
        for event in WARM_EVENTS:
            warm.add_metric([event], s.warm.get(event, 0))
        yield warm
        yield GaugeMetricFamily(
            f"{PREFIX}_watchers",
            "Watchers attached now, all connections",
            gauges.get("watchers", 0),
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_watch_history_bytes",
            "The conversations kept for watchers, all connections",
            gauges.get("history", 0),
        )
        watch = CounterMetricFamily(
            f"{PREFIX}_watch_events",
            "Watchers attached, closed for falling behind, refused; answers taken (by the "
            "controller or a watcher) and dropped as late",
            labels=["event"],
        )
        for event in WATCH_EVENTS:
            watch.add_metric([event], s.watch.get(event, 0))
        yield watch
        yield CounterMetricFamily(f"{PREFIX}_connections_opened", "Connections opened", s.opened)
        ended = CounterMetricFamily(
            f"{PREFIX}_connections_ended",
            "Connections ended, by close-code class and agent exit class",
            labels=["close", "exit"],
        )
        for (close, exit_), count in sorted(s.ended.items()):
            ended.add_metric([close, exit_], count)
        yield ended
        refused = CounterMetricFamily(
            f"{PREFIX}_admissions_refused", "Requests refused before the upgrade", labels=["reason"]
        )
        for reason in REFUSAL_REASONS:
            refused.add_metric([reason], s.refused.get(reason, 0))
        yield refused
        yield from self._carried()
        dropped = CounterMetricFamily(
            f"{PREFIX}_lines_dropped",
            "Messages dropped: agent lines too large or not UTF-8 (too_large, not_utf8), "
            "client messages after the agent's stdin closed (stdin_closed)",
            labels=["reason"],
        )
        for reason in DROP_REASONS:
            dropped.add_metric([reason], s.dropped.get(reason, 0))
        yield dropped
        sessions = CounterMetricFamily(
            f"{PREFIX}_session_requests", "Session-opening requests", labels=["outcome"]
        )
        sessions.add_metric(["rewritten"], s.rewritten)
        sessions.add_metric(["refused"], s.session_refused)
        yield sessions
        yield CounterMetricFamily(
            f"{PREFIX}_frames_refused", "Client frames answered by the relay", s.frames_refused
        )
        for name, value, what in (
            ("detaches", s.detached, "Resumable connections that lost their socket"),
            ("resumes", s.resumed, "Resumes that succeeded"),
            ("expiries", s.expired, "Detached connections that waited past their grace"),
        ):
            yield CounterMetricFamily(f"{PREFIX}_{name}", what, value)
        yield _histogram(
            "agent_start_seconds", "Agent start, exec to running (cold and warm)", s.agent_start
        )
        yield _histogram(
            "first_byte_seconds", "Socket admitted to the agent's first line sent", s.first_byte
        )
        yield _histogram("connection_duration_seconds", "How long connections lasted", s.duration)

    def _carried(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        to_agent, bytes_to_agent, to_client, bytes_to_client = self.stats.carried()
        messages = CounterMetricFamily(
            f"{PREFIX}_messages", "Messages carried", labels=["direction"]
        )
        messages.add_metric(["to_agent"], to_agent)
        messages.add_metric(["to_client"], to_client)
        yield messages
        carried = CounterMetricFamily(f"{PREFIX}_bytes", "Bytes carried", labels=["direction"])
        carried.add_metric(["to_agent"], bytes_to_agent)
        carried.add_metric(["to_client"], bytes_to_client)
        yield carried


def _histogram(name: str, what: str, histogram: Histogram) -> Any:
    from prometheus_client.core import HistogramMetricFamily

    return HistogramMetricFamily(
        f"{PREFIX}_{name}",
        what,
        buckets=histogram.cumulative(),
        sum_value=histogram.total,
    )
