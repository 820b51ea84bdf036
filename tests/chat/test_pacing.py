import pytest

from relay.chat.pacing import EDIT_INTERVAL, MAX_RETRY, Hold, Pacer


@pytest.mark.parametrize(
    ("last", "hold", "now", "due"),
    [
        (None, 0.0, 10.0, 10.0),
        (10.0, 0.0, 10.2, 10.0 + EDIT_INTERVAL),
        (10.0, 0.0, 12.0, 12.0),
        (10.0, 15.0, 11.5, 15.0),
        (None, 15.0, 11.0, 15.0),
    ],
)
def test_the_next_round_is_due_after_the_interval_and_the_hold(
    last: float | None, hold: float, now: float, due: float
) -> None:
    """About one round per second per thread, never before the homeserver's retry time."""
    pacer = Pacer(Hold(hold), last=last)
    assert pacer.due(now) == pytest.approx(due)


@pytest.mark.parametrize(
    ("retry_after_ms", "until"),
    [(2500, 102.5), (None, 101.0), (-5, 100.0), (10_000_000, 100.0 + MAX_RETRY)],
)
def test_a_rate_limit_answer_holds_every_thread(retry_after_ms: int | None, until: float) -> None:
    """retry_after_ms is honoured (bounded); one hold is shared by the threads."""
    hold = Hold()
    first, second = Pacer(hold), Pacer(hold)
    assert hold.limited(100.0, retry_after_ms) == pytest.approx(until)
    assert first.due(100.0) == second.due(100.0) == pytest.approx(max(until, 100.0))


def test_a_later_shorter_limit_does_not_shorten_the_hold() -> None:
    """Two 429s: the later retry time wins."""
    hold = Hold()
    hold.limited(100.0, 5000)
    hold.limited(101.0, 1000)
    assert hold.until == pytest.approx(105.0)
