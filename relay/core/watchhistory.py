"""The conversation so far, kept for the watchers of a connection: bounded by bytes.

Pure. The lines the controller sent to the agent and the lines the agent wrote, in the
order the relay carried them, each with its origin; a watcher that attaches is shown them
as frames of the watch profile (:mod:`relay.core.watchprofile`), then the conversation live.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from relay.core.watchprofile import ORIGINS, Origin, conversation_frame

_CODES = tuple(bytes((code,)) for code in range(len(ORIGINS)))  # a line's origin, kept


class History:
    """The conversation so far, bounded by bytes: the oldest whole lines go first.

    Lines are kept as they are (their frames are made when a watcher needs them); one
    line larger than the limit is still kept when it is the only one, so memory stays
    within the limit plus one line.
    """

    __slots__ = ("_lines", "_origins", "dropped", "last", "limit", "size")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.dropped = 0  # lines no longer kept
        self.last = 0  # the number of the last line recorded
        self._lines: deque[bytes] = deque()
        # Beside each line kept, its origin's index in ORIGINS: a byte, not a tuple per line.
        self._origins = bytearray()

    def __len__(self) -> int:
        return len(self._lines)

    def add(self, origin: Origin, lines: Sequence[bytes]) -> int:
        """Record ``lines`` (from ``origin``) as the next conversation lines; the number of
        the first."""
        first = self.last + 1
        self.last += len(lines)
        self._lines.extend(lines)
        self._origins += _CODES[ORIGINS.index(origin)] * len(lines)
        size = self.size + sum(map(len, lines))
        if size > self.limit:
            kept, dropped = self._lines, 0
            while size > self.limit and len(kept) > 1:
                size -= len(kept.popleft())
                dropped += 1
            del self._origins[:dropped]
            self.dropped += dropped
        self.size = size
        return first

    @property
    def first(self) -> int:
        """The number of the oldest line kept (``last + 1`` when none is)."""
        return self.last - len(self._lines) + 1

    def frames(self) -> list[bytes]:
        """The frames of the lines kept, oldest first."""
        first = self.first
        return [
            conversation_frame(first + i, origin, line)
            for i, (origin, line) in enumerate(
                zip(map(ORIGINS.__getitem__, self._origins), self._lines, strict=True)
            )
        ]
