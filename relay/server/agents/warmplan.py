"""The warm pool's decisions: how many agents to start ahead of demand, how long to wait
after start-up crashes, which waiting agents have waited too long.

Pure: :mod:`relay.server.agents.warm` reports what happened to the agents it started
(started, failed to start, exited while waiting, taken by a connection) with the monotonic
time, and asks :meth:`WarmPool.plan` what to do now; nothing here starts or stops a process.

The rules:

- Keep ``size`` agents waiting: a taken, recycled or crashed agent is replaced. After a
  take the replacement waits ``refill_delay`` (a tenth of a second): started in the same
  instant, its exec and its interpreter's start compete for the CPU with the first
  exchange of the socket that took the agent (docs/performance.md, "Warm agents").
- An agent that ends while waiting within ``startup_window`` seconds of its start has
  crashed at start-up. Each such crash in a row doubles the wait before the next start
  (``backoff_first``, 2x, 4x, ... up to ``backoff_max``), and while crashes are counted
  one agent at a time is tried: only once it has lived through the window are the others
  started (and the count reset). Connections meanwhile start their agents cold.
- An agent that ends later than the window (its own idle timeout, an OOM kill) is
  replaced after ``backoff_first``, without counting as a start-up crash.
- An agent that has waited ``max_age`` seconds is recycled: stopped and replaced, so that
  what an agent reads at start-up (configuration, credentials) is never older than that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STARTUP_WINDOW = 10.0  # seconds: an agent ending sooner after its start crashed at start-up
BACKOFF_FIRST = 1.0  # seconds before the start that follows an agent's end
BACKOFF_MAX = 60.0  # seconds: the longest wait between starts after crashes
LOUD_AFTER = 3  # start-up crashes in a row after which the log says so as an error
REFILL_DELAY = 0.1  # seconds between a take and its replacement's start


@dataclass(frozen=True)
class WarmPolicy:
    """How many agents to keep waiting, and for how long each may wait."""

    size: int
    max_age: float  # seconds an agent may wait before it is recycled; 0: never
    startup_window: float = STARTUP_WINDOW
    backoff_first: float = BACKOFF_FIRST
    backoff_max: float = BACKOFF_MAX
    refill_delay: float = REFILL_DELAY


@dataclass(frozen=True)
class Plan:
    """What to do now: start ``start`` (new agents' numbers), stop ``retire`` (waited
    past the policy's ``max_age``), and plan again at ``wake_at`` at the latest."""

    start: tuple[int, ...] = ()
    retire: tuple[int, ...] = ()
    wake_at: float | None = None


@dataclass(frozen=True)
class Ended:
    """A warm agent that ended before any connection took it, and what follows."""

    lived: float  # seconds from its start to its end
    at_startup: bool  # within the start-up window: a start-up crash
    crashes: int  # start-up crashes in a row, this one included (0 if not one)
    retry_in: float  # seconds until the next start may begin

    @property
    def loud(self) -> bool:
        """Whether to log it as an error: start-up keeps failing."""
        return self.crashes >= LOUD_AFTER


@dataclass
class WarmPool:
    """The state of the warm agents: starting, waiting (by start time), crashes in a row."""

    policy: WarmPolicy
    _waiting: dict[int, float] = field(default_factory=dict)  # number -> started at
    _starting: set[int] = field(default_factory=set)
    _crashes: int = 0
    _not_before: float = float("-inf")
    _numbers: int = 0

    @property
    def ready(self) -> int:
        """Agents waiting for a connection now."""
        return len(self._waiting)

    @property
    def crashes(self) -> int:
        """Start-up crashes in a row (0 once an agent lived through the window)."""
        return self._crashes

    def waiting(self) -> list[int]:
        """The waiting agents' numbers, the longest waiting first (the one to take)."""
        return sorted(self._waiting, key=lambda number: (self._waiting[number], number))

    def plan(self, now: float) -> Plan:
        """What to start and what to retire now; the started are counted as starting."""
        window = self.policy.startup_window
        if self._crashes and any(now - at >= window for at in self._waiting.values()):
            self._crashes = 0  # an agent lived through the window: start-up works again
        retire = self._aged(now)
        for number in retire:
            del self._waiting[number]
        missing = self.policy.size - len(self._waiting) - len(self._starting)
        on_trial = self._on_trial(now) if self._crashes else []
        starts = 0
        if missing > 0 and now >= self._not_before and not on_trial:
            starts = 1 if self._crashes else missing
        start = tuple(self._new_number() for _ in range(starts))
        self._starting.update(start)
        return Plan(start, retire, self._wake_at(now, missing - starts, on_trial))

    def started(self, number: int, now: float) -> None:
        """Agent ``number`` runs and waits for a connection since ``now``."""
        self._starting.discard(number)
        self._waiting[number] = now

    def start_failed(self, number: int, now: float) -> Ended:
        """Agent ``number`` could not be started at all: a start-up crash."""
        self._starting.discard(number)
        return self._crashed(0.0, now)

    def exited(self, number: int, now: float) -> Ended | None:
        """Waiting agent ``number`` ended; None if it was no longer waiting (taken, retired)."""
        started = self._waiting.pop(number, None)
        if started is None:
            return None
        lived = now - started
        if lived < self.policy.startup_window:
            return self._crashed(lived, now)
        self._crashes = 0
        self._not_before = now + self.policy.backoff_first
        return Ended(lived, at_startup=False, crashes=0, retry_in=self.policy.backoff_first)

    def take(self, number: int, now: float) -> float | None:
        """A connection takes waiting agent ``number`` at ``now``; since when it waited (None
        if it is not waiting). Its replacement starts ``refill_delay`` later."""
        since = self._waiting.pop(number, None)
        if since is not None:
            self._not_before = max(self._not_before, now + self.policy.refill_delay)
        return since

    def backoff(self, crashes: int) -> float:
        """The wait before the next start after ``crashes`` start-up crashes in a row."""
        policy = self.policy
        return min(policy.backoff_max, policy.backoff_first * 2.0 ** max(0, crashes - 1))

    def _crashed(self, lived: float, now: float) -> Ended:
        self._crashes += 1
        retry_in = self.backoff(self._crashes)
        self._not_before = now + retry_in
        return Ended(lived, at_startup=True, crashes=self._crashes, retry_in=retry_in)

    def _aged(self, now: float) -> tuple[int, ...]:
        max_age = self.policy.max_age
        if max_age <= 0:
            return ()
        return tuple(n for n in self.waiting() if now - self._waiting[n] >= max_age)

    def _on_trial(self, now: float) -> list[float]:
        """When the agents inside their start-up window leave it (starting ones: now); after
        crashes, no other agent starts until they have (or have crashed too)."""
        window = self.policy.startup_window
        young = [at + window for at in self._waiting.values() if now - at < window]
        return young + [now] * len(self._starting)

    def _wake_at(self, now: float, still_missing: int, on_trial: list[float]) -> float | None:
        times = [at for at in on_trial if at > now]
        if still_missing > 0 and not on_trial and now < self._not_before:
            times.append(self._not_before)
        if self.policy.max_age > 0:
            times.extend(at + self.policy.max_age for at in self._waiting.values())
        return min(times, default=None)

    def _new_number(self) -> int:
        self._numbers += 1
        return self._numbers
