"""The conversation so far, kept for the watchers of a connection: bounded by bytes.

Pure. The lines the controller sent to the agent and the lines the agent wrote, in the
order the relay carried them, each with its origin; a watcher that attaches is shown them
as frames of the watch profile (:mod:`relay.core.watchprofile`), then the conversation live.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

from relay.core.watchprofile import ORIGINS, Origin, conversation_frame

_CODES = tuple(bytes((code,)) for code in range(len(ORIGINS)))  # a line's origin, kept
_FEW = 16  # lines to let go that are counted one by one; past a batch this long, bisected


class History:
    """The conversation so far, bounded by bytes: the oldest whole lines go first.

    Lines are kept as they are (their frames are made when a watcher needs them); one
    line larger than the limit is still kept when it is the only one, so memory stays
    within the limit plus one line. A batch of lines is recorded in a few C-speed calls,
    whatever its length: the lines, their origins (a byte each) and where each begins in
    the conversation's bytes (``_starts``), by which the lines to let go are found with
    one bisection. A line let go is released at once; its slot is reclaimed with the
    others once they are half of the list, so that letting go costs no move of the whole
    list each time.
    """

    __slots__ = (
        "_head",
        "_lines",
        "_origins",
        "_starts",
        "_total",
        "dropped",
        "last",
        "limit",
        "size",
    )

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0  # bytes of the lines kept
        self.dropped = 0  # lines no longer kept
        self.last = 0  # the number of the last line recorded
        self._lines: list[bytes | None] = []  # None: a line let go, its slot not reclaimed yet
        self._head = 0  # the slot of the oldest line kept
        # Beside each line, its origin's index in ORIGINS: a byte, not a tuple per line.
        self._origins = bytearray()
        # Beside each line, the conversation's bytes before it (``_total`` after all).
        self._starts = array("q")
        self._total = 0

    def __len__(self) -> int:
        return len(self._lines) - self._head

    def add(self, origin: Origin, lines: Sequence[bytes]) -> int:
        """Record ``lines`` (from ``origin``) as the next conversation lines; the number of
        the first."""
        first = self.last + 1
        if not lines:
            return first
        self.last += len(lines)
        self._lines += lines
        self._origins += _CODES[ORIGINS.index(origin)] * len(lines)
        starts = self._starts
        starts.extend(accumulate(map(len, lines), initial=self._total))
        self._total = starts.pop()
        self._fit(len(lines))
        return first

    def add_line(self, origin: Origin, line: bytes) -> int:
        """:meth:`add` of one line (a client's frame: the most frequent), with fewer calls."""
        self.last += 1
        self._lines.append(line)
        self._origins.append(ORIGINS.index(origin))
        self._starts.append(self._total)
        self._total += len(line)
        self._fit(1)
        return self.last

    def _fit(self, added: int) -> None:
        """Let the oldest lines go until the rest fits the limit (one is kept), ``added``
        lines having just come."""
        kept, starts, head, total = self._lines, self._starts, self._head, self._total
        size = total - starts[head]
        if size > self.limit:
            last = len(kept) - 1
            if added <= _FEW:  # a few lines came, about as many go: counted
                cut = head
                while size > self.limit and cut < last:
                    size -= len(kept[cut])  # type: ignore[arg-type]  # kept: never None
                    kept[cut] = None
                    cut += 1
            else:  # a long batch: the first line from which the rest fits, bisected
                cut = min(bisect_left(starts, total - self.limit, head), last)
                kept[head:cut] = [None] * (cut - head)
                size = total - starts[cut]
            self.dropped += cut - head
            head = self._head = cut
            if head > len(starts) // 2:  # the slots of lines let go: reclaimed together
                del kept[:head], self._origins[:head], starts[:head]
                self._head = 0
        self.size = size

    @property
    def first(self) -> int:
        """The number of the oldest line kept (``last + 1`` when none is)."""
        return self.last - len(self) + 1

    def frames(self) -> list[bytes]:
        """The frames of the lines kept, oldest first."""
        head, first = self._head, self.first
        origins = map(ORIGINS.__getitem__, self._origins[head:])
        return [
            conversation_frame(first + i, origin, line)
            for i, (origin, line) in enumerate(zip(origins, self._lines[head:], strict=True))
            if line is not None
        ]
