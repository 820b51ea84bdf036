"""relay.chat.limits: the caps on threads and the idle timeout, decided without a clock."""

from relay.chat.limits import Idleness, Limits

ALICE, BOB = "@alice:t", "@bob:t"


def test_a_new_thread_is_refused_past_the_bots_cap_then_past_the_persons() -> None:
    """Per person: their own live threads counted; per bot: every live thread, restored
    ones (opener unknown) included; the words name the option."""
    limits = Limits(max_threads=3, per_person=2)
    assert limits.refusal(ALICE, {"$1": ALICE, "$2": BOB}) is None
    mine = limits.refusal(ALICE, {"$1": ALICE, "$2": ALICE})
    assert mine is not None
    assert "--max-threads-per-person 2" in mine
    full = limits.refusal(BOB, {"$1": ALICE, "$2": None, "$3": None})
    assert full is not None
    assert "--max-threads 3" in full


def test_a_thread_is_idle_once_the_timeout_passed_since_its_last_activity() -> None:
    """Activity moves a thread's time on; a timeout of 0 ends nothing; checks come at a
    quarter of the timeout, at most every 30 s."""
    idleness = Idleness(10.0)
    idleness.active("$1", 0.0)
    idleness.active("$2", 0.0)
    idleness.active("$2", 5.0)
    assert idleness.idle(10.0) == ["$1"]
    idleness.forget("$1")
    assert idleness.idle(15.0) == ["$2"]
    assert idleness.check_every() == 2.5
    never = Idleness(0.0)
    never.active("$1", 0.0)
    assert never.idle(1e9) == []
    assert Idleness(3600.0).check_every() == 30.0
