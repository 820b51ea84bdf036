"""What the relay has done, counted for ``/metrics``: plain numbers, no labels from clients.

Pure: events in, numbers kept. :mod:`relay.observe.metrics` turns them into the Prometheus text
format through the official client library, when a scrape asks. Counting here costs a
dictionary increment per event and nothing per message: messages and bytes are the
connections' own counters (:class:`relay.observe.observer.Counters`), read at scrape time.

Every label takes its values from a fixed, small set (close-code class, exit class,
refusal reason, drop reason, direction), never from a client, a path or a pid.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# Histogram buckets, in seconds.
START_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DURATION_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0)

REFUSAL_REASONS = (
    "origin",
    "ticket_missing",
    "ticket_invalid",
    "ticket_expired",
    "ticket_audience",
    "ticket_replayed",
    "capacity",
    "path",
    "not_upgrade",
    "subprotocol",
    "bad_request",
    "method",
    "handshakes",
    "resume",
    "watch",
)
CLOSE_CLASSES = ("normal", "going_away", "error", "protocol", "relay", "none")
EXIT_CLASSES = ("zero", "nonzero", "signal", "not_started")
# Agent lines over --max-message-bytes or not UTF-8; client messages after the agent's stdin closed.
DROP_REASONS = ("too_large", "not_utf8", "stdin_closed")
# What became of warm agents (relay.server.agents.warm): started ahead of demand (or
# failed to start at all), taken by a connection, ended while waiting (crashed, or exited
# by themselves), recycled after --warm-max-age.
WARM_EVENTS = ("started", "failed", "taken", "ended", "recycled")
# What watchers did (relay.server.connections.sharing): attached; closed for falling behind; sent a
# frame that was refused; permission requests answered first by the controller or a
# watcher; answers dropped for coming after the first.
WATCH_EVENTS = (
    "attached",
    "fell_behind",
    "refused",
    "answer_controller",
    "answer_watcher",
    "answer_late",
)


def close_class(code: int | None) -> str:
    """A close code as one of CLOSE_CLASSES."""
    if code is None or code == 1006:
        return "none"
    if code == 1000:
        return "normal"
    if code == 1001:
        return "going_away"
    if code == 1011:
        return "error"
    if code in (1002, 1003, 1007, 1008, 1009):
        return "protocol"
    return "relay"  # the relay's own codes, 4000-4999


def exit_class(returncode: int | None) -> str:
    """An agent's exit status as one of EXIT_CLASSES."""
    if returncode is None:
        return "not_started"
    if returncode == 0:
        return "zero"
    return "signal" if returncode < 0 else "nonzero"


@dataclass
class Histogram:
    """Observations counted into fixed buckets (cumulative at exposition), with their sum."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    observed: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)  # the last one is +Inf

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.observed += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, count of observations at most it)`` pairs, ending with +Inf."""
        running, out = 0, []
        for bound, count in zip((*map(str, self.buckets), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


class Carried(Protocol):
    """What a live connection has carried so far (its observer's counters)."""

    def carried(self) -> tuple[int, int, int, int]:
        """Messages and bytes to the agent, messages and bytes to the client."""
        ...


@dataclass
class RelayStats:
    """Everything ``/metrics`` reports, kept by the relay as it goes."""

    opened: int = 0
    ended: dict[tuple[str, str], int] = field(default_factory=dict)  # (close, exit) classes
    refused: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    rewritten: int = 0
    session_refused: int = 0
    frames_refused: int = 0
    detached: int = 0
    resumed: int = 0
    expired: int = 0
    agent_start: Histogram = field(default_factory=lambda: Histogram(START_BUCKETS))
    first_byte: Histogram = field(default_factory=lambda: Histogram(START_BUCKETS))
    duration: Histogram = field(default_factory=lambda: Histogram(DURATION_BUCKETS))
    carried_before: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    live: set[Carried] = field(default_factory=set)
    warm: dict[str, int] = field(default_factory=dict)  # WARM_EVENTS
    watch: dict[str, int] = field(default_factory=dict)  # WATCH_EVENTS

    def warm_event(self, event: str) -> None:
        self.warm[event] = self.warm.get(event, 0) + 1

    def watch_event(self, event: str) -> None:
        self.watch[event] = self.watch.get(event, 0) + 1

    def refusal(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def opened_connection(self, connection: Carried) -> None:
        self.opened += 1
        self.live.add(connection)

    def ended_connection(
        self, connection: Carried, close_code: int | None, returncode: int | None, seconds: float
    ) -> None:
        """A connection is over: its classes counted, what it carried kept in the totals."""
        key = (close_class(close_code), exit_class(returncode))
        self.ended[key] = self.ended.get(key, 0) + 1
        self.duration.observe(seconds)
        if connection in self.live:
            self.live.discard(connection)
            self.carried_before = _add(self.carried_before, connection.carried())

    def carried(self) -> list[int]:
        """Messages and bytes each way so far, ended connections and live ones together."""
        return _sum([self.carried_before, *(c.carried() for c in self.live)])


def _add(a: Sequence[int], b: Sequence[int]) -> list[int]:
    return [x + y for x, y in zip(a, b, strict=True)]


def _sum(rows: Iterable[Sequence[int]]) -> list[int]:
    total = [0, 0, 0, 0]
    for row in rows:
        total = _add(total, row)
    return total
