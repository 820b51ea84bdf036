"""The warm pool's decisions (relay.server.agents.warmplan): starts, backoff after start-up crashes,
recycling."""

from __future__ import annotations

import pytest

from relay.server.agents.warmplan import Ended, Plan, WarmPolicy, WarmPool

POLICY = WarmPolicy(size=2, max_age=100.0, startup_window=10.0, backoff_first=1.0, backoff_max=8.0)


def pool_with_waiting(*started_at: float, policy: WarmPolicy = POLICY) -> WarmPool:
    """A pool whose agents were started (and wait since) at ``started_at``."""
    pool = WarmPool(policy)
    numbers = pool.plan(min(started_at, default=0.0)).start
    for number, at in zip(numbers, started_at, strict=False):
        pool.started(number, at)
    return pool


def test_an_empty_pool_starts_its_size_at_once() -> None:
    """The first plan starts as many agents as the pool's size, each with its own number."""
    plan = WarmPool(POLICY).plan(0.0)
    assert (len(plan.start), len(set(plan.start)), plan.retire) == (2, 2, ())


def test_a_pool_of_size_zero_starts_nothing() -> None:
    """Size 0 (no --warm-agents): nothing to start, nothing to wait for."""
    assert WarmPool(WarmPolicy(size=0, max_age=100.0)).plan(0.0) == Plan()


def test_agents_starting_are_not_started_twice() -> None:
    """While the first agents are starting, a second plan starts no more."""
    pool = WarmPool(POLICY)
    pool.plan(0.0)
    assert pool.plan(0.1).start == ()


def test_a_full_pool_waits_until_its_oldest_agent_reaches_its_max_age() -> None:
    """With every agent waiting: nothing to start; plan again when the oldest must be recycled."""
    pool = pool_with_waiting(0.0, 3.0)
    assert (pool.ready, pool.plan(5.0)) == (2, Plan(wake_at=100.0))


def test_a_taken_agent_is_replaced_right_after() -> None:
    """A connection takes the longest-waiting agent; its replacement starts once the refill
    delay has passed (so as not to slow that socket's first exchange)."""
    pool = pool_with_waiting(0.0, 3.0)
    first = pool.waiting()[0]
    assert pool.take(first, 5.0) == 0.0
    assert (pool.ready, pool.plan(5.0)) == (1, Plan(wake_at=5.0 + POLICY.refill_delay))
    assert len(pool.plan(5.0 + POLICY.refill_delay).start) == 1


def test_the_longest_waiting_agent_is_taken_first() -> None:
    """waiting() lists agents by how long they have waited, the longest first."""
    pool = WarmPool(POLICY)
    a, b = pool.plan(0.0).start
    pool.started(b, 1.0)
    pool.started(a, 2.0)
    assert pool.waiting() == [b, a]


def test_taking_an_agent_no_longer_waiting_gives_nothing() -> None:
    """A number that is not waiting (taken already, never started) cannot be taken."""
    pool = pool_with_waiting(0.0, 0.0)
    number = pool.waiting()[0]
    pool.take(number, 1.0)
    assert (pool.take(number, 1.0), pool.take(999, 1.0)) == (None, None)


@pytest.mark.parametrize(
    ("crashes", "wait"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (30, 8.0)],
)
def test_the_wait_after_crashes_doubles_up_to_its_cap(crashes: int, wait: float) -> None:
    """Each start-up crash in a row doubles the wait before the next start, up to the cap."""
    assert WarmPool(POLICY).backoff(crashes) == wait


@pytest.mark.parametrize(
    ("lived", "expected"),
    [
        (0.5, Ended(0.5, at_startup=True, crashes=1, retry_in=1.0)),
        (9.9, Ended(9.9, at_startup=True, crashes=1, retry_in=1.0)),
        (10.0, Ended(10.0, at_startup=False, crashes=0, retry_in=1.0)),
        (500.0, Ended(500.0, at_startup=False, crashes=0, retry_in=1.0)),
    ],
)
def test_an_end_inside_the_window_is_a_start_up_crash(lived: float, expected: Ended) -> None:
    """An exit within the start-up window is a start-up crash; a later one is not."""
    pool = pool_with_waiting(0.0, 0.0)
    assert pool.exited(pool.waiting()[0], lived) == expected


def test_a_crash_delays_the_next_start_by_its_backoff() -> None:
    """After a start-up crash, no start before the backoff has passed; then one."""
    pool = pool_with_waiting(0.0, policy=WarmPolicy(size=1, max_age=0.0))
    pool.exited(pool.waiting()[0], 0.5)
    assert pool.plan(0.6) == Plan(wake_at=1.5)
    assert len(pool.plan(1.5).start) == 1


def test_after_a_crash_the_agents_in_their_window_are_waited_for() -> None:
    """After a crash, an agent still young may crash too: no start until it has lived
    through the window, then the count is reset and the pool filled."""
    pool = pool_with_waiting(0.0, 0.0)
    pool.exited(pool.waiting()[0], 0.5)
    assert pool.plan(1.5) == Plan(wake_at=10.0)
    assert (len(pool.plan(10.0).start), pool.crashes) == (1, 0)


def test_crashes_in_a_row_double_the_wait() -> None:
    """Three start-up crashes in a row: waits of 1, 2 then 4 seconds, the third one loud."""
    pool = WarmPool(WarmPolicy(size=1, max_age=0.0, startup_window=10.0))
    now, waits, loud = 0.0, [], []
    for _ in range(3):
        (number,) = pool.plan(now).start
        pool.started(number, now)
        ended = pool.exited(number, now + 0.1)
        assert ended is not None
        waits.append(ended.retry_in)
        loud.append(ended.loud)
        now += 0.1 + ended.retry_in
    assert (waits, loud) == ([1.0, 2.0, 4.0], [False, False, True])


def test_an_agent_that_cannot_be_started_counts_as_a_crash() -> None:
    """A failed exec is a start-up crash: backoff, and the count goes up."""
    pool = WarmPool(POLICY)
    first, second = pool.plan(0.0).start
    pool.start_failed(first, 0.0)
    assert pool.start_failed(second, 0.0) == Ended(0.0, at_startup=True, crashes=2, retry_in=2.0)
    assert pool.plan(1.0) == Plan(wake_at=2.0)


def test_after_crashes_one_agent_is_tried_at_a_time() -> None:
    """While crashes are counted, one agent is on trial; the others start once it lived
    through the start-up window, and the count is reset."""
    pool = WarmPool(POLICY)
    for number in pool.plan(0.0).start:
        pool.start_failed(number, 0.0)
    (trial,) = pool.plan(2.0).start  # backoff 2 s after the second crash: one start only
    pool.started(trial, 2.0)
    assert pool.plan(3.0) == Plan(wake_at=12.0)
    assert (len(pool.plan(12.0).start), pool.crashes) == (1, 0)


def test_an_exit_after_the_window_resets_the_crash_count() -> None:
    """An agent that lived past the window and then ended starts the count over."""
    pool = WarmPool(WarmPolicy(size=1, max_age=0.0))
    (number,) = pool.plan(0.0).start
    pool.start_failed(number, 0.0)
    (number,) = pool.plan(1.0).start
    pool.started(number, 1.0)
    ended = pool.exited(number, 60.0)
    assert (ended, pool.crashes) == (Ended(59.0, False, 0, 1.0), 0)


def test_an_agent_past_its_max_age_is_retired_and_replaced() -> None:
    """At its max age a waiting agent is retired and a fresh one started in the same plan."""
    pool = pool_with_waiting(0.0, 50.0)
    oldest = pool.waiting()[0]
    plan = pool.plan(100.0)
    assert (plan.retire, len(plan.start), plan.wake_at, pool.ready) == ((oldest,), 1, 150.0, 1)


def test_max_age_zero_never_recycles() -> None:
    """With max_age 0 agents wait for ever: no retirement, no wake-up for it."""
    pool = pool_with_waiting(0.0, 0.0, policy=WarmPolicy(size=2, max_age=0.0))
    assert pool.plan(1e9) == Plan()


def test_an_exit_of_an_agent_no_longer_waiting_is_ignored() -> None:
    """The exit of an agent a connection took (or that was retired) is not the pool's."""
    pool = pool_with_waiting(0.0, 0.0)
    number = pool.waiting()[0]
    pool.take(number, 0.2)
    assert (pool.exited(number, 0.5), pool.crashes) == (None, 0)
