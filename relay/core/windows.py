"""What each side of the resume profile keeps until the other acknowledges it.

Pure. The relay keeps the agent's lines in an :class:`Outbox` (the replay window,
bounded by ``--resume-buffer``); ``acp-relay connect`` keeps the editor's messages in
:class:`Sent` and counts what it received in :class:`Received`, and waits between
reconnects as :func:`backoff` and :class:`Outage` say. The frames they travel in are
:mod:`relay.core.resumeprofile`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from relay.core.resumeprofile import ProfileError, Record


class Outbox:
    """The records the client has not acknowledged yet, bounded by their bytes.

    Records are numbered as they are added (from 1). :meth:`has_room` tells the reader
    of the agent's output whether to add more: past ``limit`` bytes it waits (the agent
    pauses on its full pipe) until acknowledgements make room. One record larger than
    ``limit`` is still taken when the outbox is empty, so memory stays within
    ``limit`` plus one message.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.first_seq = 1  # the oldest record kept (``next_seq`` when none is)
        self._lines: list[bytes] = []  # records first_seq, first_seq + 1, ... from _head on
        self._head = 0

    def __len__(self) -> int:
        return len(self._lines) - self._head

    @property
    def next_seq(self) -> int:
        """The number the next record gets."""
        return self.first_seq + len(self)

    @property
    def acked(self) -> int:
        """The last record acknowledged (every record before ``first_seq``)."""
        return self.first_seq - 1

    def has_room(self) -> bool:
        return self.size < self.limit or not len(self)

    def add(self, line: bytes) -> int:
        """Keep ``line`` as the next record; its number."""
        lines = self._lines
        lines.append(line)
        self.size += len(line)
        return self.first_seq + len(lines) - self._head - 1

    def take(self, lines: Sequence[bytes], start: int = 0) -> int:
        """Keep ``lines[start:]`` as the next records while there is room before each (as
        :meth:`has_room` says); how many were kept. One call per read of the agent's output
        instead of two per line: this is the profile's hot path."""
        kept, size, limit = self._lines, self.size, self.limit
        end, index = len(lines), start
        rest = lines[start:] if start else lines
        total = sum(map(len, rest))
        if rest and size + total - len(rest[-1]) < limit:
            # Nearly always: room before each line (the last may pass the limit): all kept.
            kept += rest
            self.size = size + total
            return len(rest)
        while index < end and (size < limit or len(kept) == self._head):
            line = lines[index]
            kept.append(line)
            size += len(line)
            index += 1
        self.size = size
        return index - start

    def acknowledge(self, ack: int) -> None:
        """Forget every record up to ``ack``; ProfileError for a record never sent."""
        if ack >= self.first_seq + len(self._lines) - self._head:  # next_seq, inlined
            raise ProfileError(f"ack {ack} is for a record the relay never sent")
        drop = ack - (self.first_seq - 1)  # past the last record acknowledged
        if drop <= 0:
            return
        lines, head = self._lines, self._head
        if drop == 1:  # an ack riding on each client message: nearly always one record
            self.size -= len(lines[head])
        else:
            self.size -= sum(map(len, lines[head : head + drop]))
        self._head = head + drop
        self.first_seq += drop
        if self._head > len(lines) // 2:  # compact: the list never holds twice what is kept
            del lines[: self._head]
            self._head = 0

    def since(self, seq: int, limit: int | None = None) -> list[bytes]:
        """The lines of the records from ``seq`` on (at most ``limit``), oldest first."""
        start = self._head + max(seq - self.first_seq, 0)
        return self._lines[start : None if limit is None else start + limit]


class Sent:
    """The client's messages the relay has not acknowledged yet, to re-send after a resume.

    Bounded by count and bytes: :meth:`has_room` tells the reader of the editor's lines
    whether to take more (past the bound it waits, and the editor waits on its pipe).
    One message larger than the byte bound is still taken when nothing else is kept.
    """

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.size = 0
        self.last = 0  # the number of the last message numbered
        self._messages: dict[int, bytes] = {}  # in number order (dicts keep insertion order)

    def __len__(self) -> int:
        return len(self._messages)

    def has_room(self) -> bool:
        if not self._messages:
            return True
        return len(self._messages) < self.max_messages and self.size < self.max_bytes

    def number(self, message: bytes) -> int:
        """Keep ``message`` as the next message; its number."""
        self.last += 1
        self._messages[self.last] = message
        self.size += len(message)
        return self.last

    def acknowledge(self, ack: int) -> None:
        """Forget every message up to ``ack`` (the relay has them)."""
        messages = self._messages
        while messages:
            seq = next(iter(messages))
            if seq > ack:
                return
            self.size -= len(messages.pop(seq))

    def after(self, received: int) -> list[tuple[int, bytes]]:
        """The messages after ``received``, in order: what to re-send after a resume."""
        self.acknowledge(received)
        return list(self._messages.items())


def backoff(attempt: int, rand: float, *, first: float = 0.1, most: float = 2.0) -> float:
    """Seconds to wait before reconnect ``attempt`` (0 first): exponential, full jitter.

    ``rand`` is a random number in [0, 1), passed in so this stays pure.
    """
    return rand * min(most, first * 2.0**attempt)


SETTLE_SECONDS = 5.0  # a resumed socket that lived this long ended its outage
FLAP_PAUSE_FIRST = 0.5  # seconds added before the resume after a resumed socket's quick loss
FLAP_PAUSE_MOST = 30.0


def flap_pause(flaps: int) -> float:
    """Seconds added before each resume once ``flaps`` resumed sockets of one outage were
    lost before settling: none, then FLAP_PAUSE_FIRST, doubling up to FLAP_PAUSE_MOST."""
    if flaps <= 0:
        return 0.0
    return min(FLAP_PAUSE_MOST, FLAP_PAUSE_FIRST * 2.0 ** min(flaps - 1, 32))


class Outage:
    """The client's resuming, across losses: when the relay went, until when to try, and
    how long to wait before each attempt. Times are ``time.monotonic()`` values, passed in.

    An outage begins when a socket is lost, and ends once a resumed socket *settles*:
    lives SETTLE_SECONDS. A resumed socket lost before that (a relay that welcomes, then
    drops) does not end it: the grace still counts from the outage's first loss, the
    attempt count (and so :func:`backoff`) goes on, and each such loss adds a
    :func:`flap_pause`. A relay that keeps doing it is resumed ever more slowly, and given
    up on when the grace is over.
    """

    def __init__(self) -> None:
        self.began: float | None = None  # the first loss of the current outage
        self.deadline = 0.0  # the last moment to try a resume
        self.attempt = 0  # attempts made in this outage
        self.flaps = 0  # resumed sockets of this outage lost before settling
        self._resumed_at = 0.0  # when the last resumed socket was welcomed

    def lost(self, now: float, grace: float) -> bool:
        """The socket was lost at ``now``: True when an outage begins (with ``grace``
        seconds to resume), False when it goes on (the last resume did not settle)."""
        if self.began is None or now - self._resumed_at >= SETTLE_SECONDS:
            self.began, self.deadline = now, now + grace
            self.attempt = self.flaps = 0
            return True
        self.flaps += 1
        return False

    def pause(self, rand: float) -> float:
        """Seconds to wait before the next attempt (``rand`` in [0, 1)); counts it."""
        seconds = backoff(self.attempt, rand) + flap_pause(self.flaps)
        self.attempt += 1
        return seconds

    def left(self, now: float) -> float:
        """Seconds left to resume in (0 or less: give up)."""
        return self.deadline - now

    def resumed(self, now: float) -> None:
        """A resumed socket was welcomed at ``now``: it settles if it lives long enough."""
        self._resumed_at = now


class Received:
    """The client's record of what the relay sent: the last record, and what to acknowledge."""

    def __init__(self, ack_every: int = 64) -> None:
        self.ack_every = ack_every
        self.last = 0  # the last record received (every one before it too)
        self.acked = 0  # the last record the relay was told of

    def take(self, record_: Record) -> bytes | None:
        """The record's line if it is new, None for one the client already has."""
        if record_.seq <= self.last:
            return None
        if record_.seq != self.last + 1:
            raise ProfileError(f"record {self.last + 1} is missing (got {record_.seq})")
        self.last = record_.seq
        return record_.line

    def due(self) -> bool:
        """Whether an acknowledgement should go now rather than ride on a later message."""
        return self.last - self.acked >= self.ack_every

    def ack(self) -> int | None:
        """The acknowledgement to send, if there is anything new to acknowledge."""
        if self.last == self.acked:
            return None
        self.acked = self.last
        return self.last
