"""Tests for relay.core.windows: connect's resuming across losses (:class:`Outage`).

The replay window and the client's kept messages (:class:`Outbox`, :class:`Sent`) are
tested with the frames they carry, in tests/core/test_resumeprofile.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.windows import (
    FLAP_PAUSE_FIRST,
    FLAP_PAUSE_MOST,
    SETTLE_SECONDS,
    Outage,
    backoff,
    flap_pause,
)

GRACE = 60.0


@pytest.mark.parametrize(
    ("flaps", "seconds"),
    [(0, 0.0), (1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (6, 16.0), (7, 30.0), (10**6, 30.0)],
)
def test_flap_pause_doubles_up_to_its_most(flaps: int, seconds: float) -> None:
    """No pause before any quick loss, then 0.5 s doubling, never past 30 s."""
    assert flap_pause(flaps) == seconds
    assert (FLAP_PAUSE_FIRST, FLAP_PAUSE_MOST) == (0.5, 30.0)


def test_the_first_loss_begins_an_outage_with_the_grace() -> None:
    """A loss starts the grace's count and the backoff from its first attempt."""
    outage = Outage()
    assert outage.lost(100.0, GRACE)
    assert (outage.began, outage.left(100.0), outage.flaps) == (100.0, GRACE, 0)
    assert outage.pause(0.5) == backoff(0, 0.5)
    assert outage.pause(0.5) == backoff(1, 0.5)


def test_a_resumed_socket_lost_at_once_goes_on_with_the_same_outage() -> None:
    """Welcomed then dropped: the grace still counts from the first loss, a larger welcome's
    grace does not extend it, the attempts go on and a flap pause is added."""
    outage = Outage()
    outage.lost(100.0, GRACE)
    outage.pause(0.0)
    outage.resumed(101.0)
    assert not outage.lost(101.5, 10 * GRACE)
    assert (outage.began, outage.left(101.5), outage.flaps) == (100.0, GRACE - 1.5, 1)
    assert outage.pause(0.0) == FLAP_PAUSE_FIRST
    assert outage.pause(0.99) == backoff(2, 0.99) + FLAP_PAUSE_FIRST
    outage.resumed(110.0)
    assert not outage.lost(110.0 + SETTLE_SECONDS - 0.01, GRACE)
    assert outage.pause(0.0) == 2 * FLAP_PAUSE_FIRST


def test_a_resumed_socket_that_settled_ends_the_outage() -> None:
    """A resumed socket that lived SETTLE_SECONDS: its loss is a new outage, counted afresh."""
    outage = Outage()
    outage.lost(100.0, GRACE)
    outage.resumed(101.0)
    outage.lost(101.1, GRACE)
    outage.pause(0.5)
    outage.resumed(102.0)
    assert outage.lost(102.0 + SETTLE_SECONDS, 5.0)
    assert (outage.began, outage.left(107.0), outage.flaps, outage.attempt) == (107.0, 5.0, 0, 0)


@given(
    quick=st.lists(st.floats(0, SETTLE_SECONDS - 0.01), min_size=1, max_size=60),
    rand=st.floats(0, 0.999),
)
def test_a_flapping_relay_is_resumed_ever_more_slowly_within_one_grace(
    quick: list[float], rand: float
) -> None:
    """However a relay times its drops under SETTLE_SECONDS, each pause is at least the last
    one's flap pause, at most 2 s past FLAP_PAUSE_MOST, and the deadline never moves."""
    outage = Outage()
    now = 0.0
    outage.lost(now, GRACE)
    deadline = outage.deadline
    floor = 0.0
    for lived in quick:
        pause = outage.pause(rand)
        assert floor <= pause <= FLAP_PAUSE_MOST + 2.0
        now += pause
        outage.resumed(now)
        now += lived
        assert not outage.lost(now, GRACE * 1000)
        assert outage.deadline == deadline
        floor = flap_pause(outage.flaps)
