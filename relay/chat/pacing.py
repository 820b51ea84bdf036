"""When a thread may next show something: about one round of edits per second, and the
homeserver's rate-limit answers honoured.

Pure: the clock comes in as ``now`` (seconds, monotonic). A thread's changes are
gathered and shown in rounds; :meth:`Pacer.due` says when the next round may go. A
``429 M_LIMIT_EXCEEDED`` answer's ``retry_after_ms`` holds every round until then
(the limit is the bot's, across its threads: :class:`Hold` is shared by them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EDIT_INTERVAL = 1.0  # seconds between two rounds of edits in one thread
DEFAULT_RETRY = 1.0  # seconds to wait after a 429 that names no retry_after_ms
MAX_RETRY = 60.0  # a longer retry_after_ms is taken as this


@dataclass
class Hold:
    """The homeserver's last word on the bot's sending: nothing goes before ``until``."""

    until: float = 0.0

    def limited(self, now: float, retry_after_ms: int | None) -> float:
        """A 429 came at ``now``: hold every send until its retry time; that time."""
        wait = DEFAULT_RETRY if retry_after_ms is None else retry_after_ms / 1000
        self.until = max(self.until, now + min(max(wait, 0.0), MAX_RETRY))
        return self.until


@dataclass
class Pacer:
    """One thread's rounds: the next is due ``interval`` after the last, and not before the
    shared hold ends."""

    hold: Hold = field(default_factory=Hold)
    interval: float = EDIT_INTERVAL
    last: float | None = None

    def due(self, now: float) -> float:
        """When the next round may go (``now`` or later)."""
        earliest = now if self.last is None else max(now, self.last + self.interval)
        return max(earliest, self.hold.until)

    def went(self, now: float) -> None:
        """A round went at ``now``."""
        self.last = now
