"""How many threads a bot runs, how many one person opens, and when an idle one ends.

Pure. Each thread holds one relay connection and one agent process, so a room must not be
able to take all of a relay's: a new thread (a mention, a ``share``) is refused, in words
for the room, past ``--max-threads`` live threads of the bot or ``--max-threads-per-person``
opened by its sender. A session thread idle for ``--idle-timeout`` (no prompt, no turn
running, no request pending) is ended: :class:`Idleness` keeps when each was last active,
the clock coming in as an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from relay.chat.text import safe_line

MAX_THREADS = 16  # per bot: a quarter of serve's default --max-connections (64)
MAX_THREADS_PER_PERSON = 4  # so one person's mentions cannot take the bot's whole share
IDLE_TIMEOUT = 3600.0  # seconds: an hour covers a lunch break, not a forgotten thread's week


@dataclass(frozen=True)
class Limits:
    """The bot's caps on threads, and its idle timeout (0: never)."""

    max_threads: int = MAX_THREADS
    per_person: int = MAX_THREADS_PER_PERSON
    idle_timeout: float = IDLE_TIMEOUT

    def refusal(self, sender: str, opened_by: Mapping[str, str | None]) -> str | None:
        """Why ``sender`` may not open another thread now (None: they may); ``opened_by``
        maps each live thread to who opened it (None when unknown: restored)."""
        if len(opened_by) >= self.max_threads:
            return (
                f"{safe_line(sender)}: {len(opened_by)} threads are running, this bot's "
                f"most (--max-threads {self.max_threads}): end one with !end, or wait "
                "for one to end."
            )
        mine = sum(1 for who in opened_by.values() if who == sender)
        if mine >= self.per_person:
            return (
                f"{safe_line(sender)}: you have {mine} threads running, the most one "
                f"person may (--max-threads-per-person {self.per_person}): end one with "
                "!end first."
            )
        return None

    def idle_words(self) -> str:
        """Who ended an idle thread, for its "Session ended by …" line."""
        return (
            f"the bot: no prompt and no agent activity for {self.idle_timeout:g} s (--idle-timeout)"
        )


class Idleness:
    """When each thread was last active; which have been idle for the timeout."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.last: dict[str, float] = {}

    def active(self, root: str, now: float) -> None:
        self.last[root] = now

    def forget(self, root: str) -> None:
        self.last.pop(root, None)

    def idle(self, now: float) -> list[str]:
        """The threads idle for the timeout (none when it is 0: never)."""
        if self.timeout <= 0:
            return []
        return [root for root, at in self.last.items() if now - at >= self.timeout]

    def check_every(self) -> float:
        """Seconds between two checks: a quarter of the timeout, at most 30."""
        return min(self.timeout / 4, 30.0) if self.timeout > 0 else 30.0
