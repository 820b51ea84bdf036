"""Tests for relay.core.watchhistory: the conversation kept for watchers, bounded by bytes."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.watchhistory import History
from relay.core.watchprofile import FROM_AGENT, FROM_CLIENT, Origin, conversation_frame


@pytest.mark.parametrize(
    ("limit", "lines", "kept", "dropped"),
    [
        (100, [b"a" * 10] * 5, 5, 0),
        (25, [b"a" * 10] * 5, 2, 3),  # oldest whole lines go first
        (5, [b"a" * 10], 1, 0),  # one line over the limit is kept alone
        (5, [b"a" * 10, b"b" * 10], 1, 1),
    ],
)
def test_history_is_bounded_by_bytes_dropping_the_oldest(
    limit: int, lines: list[bytes], kept: int, dropped: int
) -> None:
    """The history keeps the newest whole lines within its limit, plus one line at most."""
    history = History(limit)
    for line in lines:
        history.add(FROM_AGENT, [line])
    assert (len(history), history.dropped, history.last) == (kept, dropped, len(lines))
    assert history.first == len(lines) - kept + 1


def test_history_frames_are_numbered_across_both_directions() -> None:
    """Lines of both directions share one numbering, in the order they were recorded."""
    history = History(1000)
    assert history.add(FROM_CLIENT, [b"q"]) == 1
    assert history.add(FROM_AGENT, [b"a1", b"a2"]) == 2
    assert history.frames() == [
        b'{"seq":1,"from":"client"}\nq',
        b'{"seq":2,"from":"agent"}\na1',
        b'{"seq":3,"from":"agent"}\na2',
    ]


@given(st.integers(min_value=1, max_value=200), st.lists(st.binary(max_size=50), max_size=60))
def test_history_never_holds_more_than_its_limit_and_one_line(
    limit: int, lines: list[bytes]
) -> None:
    """Whatever comes, the kept lines are the newest and fit the limit, or are one line."""
    history = History(limit)
    for line in lines:
        history.add(FROM_AGENT, [line])
    kept = lines[len(lines) - len(history) :]
    size = sum(map(len, kept))
    assert history.size == size
    assert size <= limit or len(kept) == 1
    assert history.dropped + len(history) == len(lines)


@given(
    st.integers(min_value=1, max_value=200),
    st.lists(
        st.tuples(
            st.sampled_from([FROM_CLIENT, FROM_AGENT, Origin.WATCHER]),
            st.lists(st.binary(max_size=40), min_size=1, max_size=5),
        ),
        max_size=30,
    ),
)
def test_history_frames_keep_each_lines_origin_through_drops(
    limit: int, batches: list[tuple[Origin, list[bytes]]]
) -> None:
    """Batches from several origins: the frames are the newest lines kept, each with the
    origin and number it was recorded with."""
    history = History(limit)
    every = []
    for origin, lines in batches:
        first = history.add(origin, lines)
        every += [(first + i, origin, line) for i, line in enumerate(lines)]
    kept = every[len(every) - len(history) :]
    assert history.frames() == [conversation_frame(n, o, line) for n, o, line in kept]


def held_bytes(history: History) -> int:
    """The bytes of every line the history still refers to, however it keeps them."""
    seen: set[int] = set()
    found = 0
    pending = list(gc.get_referents(history))
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if type(item) is bytes:
            found += len(item)
        elif isinstance(item, list | tuple):
            pending += gc.get_referents(item)
    return found


@given(
    st.integers(min_value=0, max_value=300),
    st.lists(st.lists(st.binary(min_size=2, max_size=60), max_size=8), max_size=80),
)
def test_lines_let_go_are_no_longer_held(limit: int, batches: list[list[bytes]]) -> None:
    """Whatever batches come, the lines the history still refers to are the ones it
    keeps: within its limit and one line, never the lines it let go."""
    history = History(limit)
    for lines in batches:
        history.add(FROM_AGENT, [bytes(bytearray(line)) for line in lines])  # distinct objects
        assert held_bytes(history) == history.size
        assert history.size <= limit or len(history) == 1


@given(
    st.integers(min_value=0, max_value=120),
    st.lists(
        st.tuples(st.booleans(), st.lists(st.binary(max_size=40), min_size=1, max_size=4)),
        max_size=40,
    ),
)
def test_a_line_added_alone_is_as_a_batch_of_one(
    limit: int, batches: list[tuple[bool, list[bytes]]]
) -> None:
    """add_line(origin, line) keeps, numbers and lets go as add(origin, [line]) does."""
    one, other = History(limit), History(limit)
    for alone, lines in batches:
        if alone:
            assert one.add_line(FROM_CLIENT, lines[0]) == other.add(FROM_CLIENT, lines[:1])
        else:
            assert one.add(FROM_AGENT, lines) == other.add(FROM_AGENT, lines)
        assert (one.size, one.dropped, one.first, len(one)) == (
            other.size,
            other.dropped,
            other.first,
            len(other),
        )
    assert one.frames() == other.frames()
