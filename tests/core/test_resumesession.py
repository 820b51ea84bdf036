"""relay.core.resumesession: the resume profile's state machine, from tables, with the clock
passed in."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.resumeprofile import NO_CONNECTION, ProfileError, Resume, Welcome
from relay.core.resumesession import Batch, Duplicate, Refused, Resumed, Session, digest

OWNER = ("alice", "box-17")
GRACE, WINDOW = 30.0, 1000


def opened(lines: int = 0) -> Session:
    """A session welcomed on its first socket (secret "s1"), holding ``lines`` agent lines."""
    session = Session("c1", OWNER, grace=GRACE, window=WINDOW)
    session.open("s1")
    session.keep([b"line %d" % i for i in range(1, lines + 1)])
    return session


def resume(ack: int = 0, sent: int = 0, secret: str = "s1") -> Resume:
    return Resume("c1", secret, ack, sent)


def test_open_welcomes_from_record_one_with_a_new_epoch() -> None:
    """The first socket is welcomed at record 1, attached, with the secret it carries."""
    session = Session("c1", OWNER, grace=GRACE, window=WINDOW)
    assert session.epoch == 0
    welcome, epoch = session.open("s1")
    assert welcome == Welcome("c1", "s1", False, 0, 1, GRACE, WINDOW, 0)
    assert epoch == 1


@pytest.mark.parametrize(
    ("state_owner", "secret", "expected"),
    [
        (OWNER, "s1", True),
        (("mallory", "box-17"), "s1", False),  # another subject's ticket
        (("alice", "box-18"), "s1", False),  # a ticket for another relay
        (OWNER, "s2", False),  # a wrong secret
        (OWNER, "", False),
    ],
)
def test_claim_needs_the_owner_and_the_secret(
    state_owner: tuple[str, str | None], secret: str, expected: bool
) -> None:
    """Only the ticket's owner with the current secret may take the connection over."""
    session = opened()
    assert session.claim(resume(secret=secret), state_owner) is expected


def test_a_claim_spends_the_secret() -> None:
    """Of two sockets resuming with the same secret, exactly one wins."""
    session = opened()
    assert session.claim(resume(), OWNER)
    assert not session.claim(resume(), OWNER)


def test_an_ended_session_cannot_be_claimed() -> None:
    """Once ended, nothing resumes it, secret or not."""
    session = opened()
    session.end()
    assert not session.claim(resume(), OWNER)


@pytest.mark.parametrize(
    ("lines", "acked", "ack", "sent", "problem"),
    [
        (5, 0, 5, 0, None),
        (5, 0, 0, 0, None),
        (5, 2, 1, 0, "cannot resume: the client has record 1 and the relay keeps 3 to 5"),
        (5, 0, 6, 0, "cannot resume: the client has record 6 and the relay keeps 1 to 5"),
    ],
)
def test_resume_range_checks(
    lines: int, acked: int, ack: int, sent: int, problem: str | None
) -> None:
    """A resume is refused when the client's record is not one the window holds."""
    session = opened(lines)
    session.outbox.acknowledge(acked)
    result = session.resume(resume(ack, sent), "s2", attached=False)
    if problem is None:
        assert isinstance(result, Resumed)
    else:
        assert result == Refused(problem)


def test_resume_refused_when_the_client_sent_less_than_the_agent_got() -> None:
    """A client that claims fewer messages than were delivered cannot continue."""
    session = opened()
    session.take(b'{"seq":1}\n{}')
    session.take(b'{"seq":2}\n{}')
    result = session.resume(resume(0, 1), "s2", attached=False)
    assert result == Refused("cannot resume: the client sent 1 messages, the agent has more")


def test_resume_of_an_ended_session_says_there_is_none() -> None:
    """An ended connection answers with the profile's one refusal."""
    session = opened()
    session.end()
    assert session.resume(resume(), "s2", attached=False) == Refused(NO_CONNECTION)


def test_resume_after_a_loss_tells_what_is_replayed() -> None:
    """Resumed after a loss: records sent but unacknowledged come again (how long the
    connection was detached is the lifecycle's: tests/core/test_lifecycle.py)."""
    session = opened(5)
    session.sent_through(1, 4)  # the first socket got records 1 to 4 out
    result = session.resume(resume(ack=2, sent=0), "s2", attached=False)
    assert isinstance(result, Resumed)
    assert (result.replayed, result.resent, result.fenced) == (2, 0, False)
    assert result.welcome == Welcome("c1", "s2", True, 0, 3, GRACE, WINDOW, 5)
    assert (session.epoch, session.outbox.first_seq) == (2, 3)


def test_resume_while_attached_fences_the_older_socket() -> None:
    """A resume that comes before the loss is seen supersedes the socket still attached:
    the older socket's sends count for nothing from then on."""
    session = opened(1)
    result = session.resume(resume(), "s2", attached=True)
    assert isinstance(result, Resumed)
    assert result.fenced
    session.sent_through(1, 1)  # the fenced socket's
    assert session.sent == 0


def test_the_secret_rotates_at_each_welcome() -> None:
    """The secret of a welcome replaces the one before: the old one no longer claims."""
    session = opened()
    assert session.claim(resume(secret="s1"), OWNER)
    session.resume(resume(), "s2", attached=False)
    assert not session.claim(resume(secret="s1"), OWNER)
    assert session.claim(resume(secret="s2"), OWNER)


@pytest.mark.parametrize(
    ("frames", "results", "delivered"),
    [
        ([b'{"seq":1}\n{"a":1}'], [b'{"a":1}'], 1),
        ([b'{"seq":1}\n{}', b'{"seq":1}\n{}'], [b"{}", Duplicate(2)], 1),
        ([b'{"ack":0}'], [None], 0),
        ([b'{"seq":1,"ack":0}\n{}', b'{"seq":2}\n[]'], [b"{}", b"[]"], 2),
    ],
)
def test_take_delivers_each_message_once(
    frames: list[bytes], results: list[object], delivered: int
) -> None:
    """Messages are delivered in order and once; an acknowledgement alone delivers nothing."""
    session = opened()
    assert [session.take(frame) for frame in frames] == results
    assert session.delivered == delivered


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b'{"seq":2}\n{}', "message 1 is missing (got 2)"),
        (b'{"ack":9}', "ack 9 is for a record the relay never sent"),
        (b"{}", "'ack' must be a whole number"),
        (b"nope", "frame header is not JSON"),
    ],
)
def test_take_refuses_what_breaks_the_profile(frame: bytes, message: str) -> None:
    """A gap, an ack of a record never sent, or a frame that is no envelope: ProfileError."""
    session = opened(3)
    with pytest.raises(ProfileError, match=re.escape(message)):
        session.take(frame)


def test_acks_free_the_window() -> None:
    """An acknowledgement riding on a message frees the records up to it."""
    session = opened(4)
    session.take(b'{"seq":1,"ack":3}\n{}')
    assert (session.outbox.first_seq, len(session.outbox)) == (4, 1)


def test_batches_carry_the_acknowledgement_due_once() -> None:
    """The first batch after a delivery carries its ack; the next one does not repeat it."""
    session = opened(3)
    session.take(b'{"seq":1}\n{}')
    assert session.batch(1, 2) == Batch(1, [b"line 1", b"line 2"], 1)
    assert session.batch(3, 2) == Batch(3, [b"line 3"], None)
    assert session.batch(4, 2) == Batch(4, [], None)


def test_an_ack_alone_goes_only_when_one_is_due() -> None:
    """With nothing to ride on, a delivery is acknowledged alone, once."""
    session = opened()
    assert session.ack_alone() is None
    session.take(b'{"seq":1}\n{}')
    assert session.ack_alone() == 1
    assert session.ack_alone() is None


def test_sends_of_a_fenced_socket_count_for_nothing() -> None:
    """Only the attached socket's progress moves what the relay thinks was sent."""
    session = opened(3)
    session.resume(resume(), "s2", attached=False)  # epoch 2 now
    session.sent_through(1, 3)
    assert not session.all_sent()
    session.sent_through(2, 3)
    assert session.all_sent()


def test_the_secret_is_kept_as_a_digest_only() -> None:
    """What the session keeps of a secret is its SHA-256, never the secret itself."""
    session = opened()
    assert "s1" not in repr(vars(session))
    assert digest("s1") in vars(session).values()


@given(st.lists(st.integers(min_value=1, max_value=5), max_size=30))
def test_resends_after_any_resume_deliver_every_message_once(cuts: list[int]) -> None:
    """However often the client resumes and re-sends, each message reaches the agent once."""
    session = opened()
    got: list[bytes] = []
    sent = 0
    for step, burst in enumerate(cuts):
        for _ in range(burst):
            sent += 1
            taken = session.take(b'{"seq":%d}\n{"n":%d}' % (sent, sent))
            if isinstance(taken, bytes):
                got.append(taken)
        result = session.resume(resume(0, sent, ""), f"s{step + 2}", attached=False)
        assert isinstance(result, Resumed)
        for again in range(result.welcome.received + 1, sent + 1):
            assert isinstance(session.take(b'{"seq":%d}\n{}' % again), Duplicate)
    assert got == [b'{"n":%d}' % n for n in range(1, sent + 1)]
