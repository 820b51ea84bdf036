"""Who may prompt and who may approve in a served room: user ids and power levels.

Pure. A person is judged by the Matrix user id the homeserver put on the event
(``sender``), never by a display name. Approvers are the ``--approver`` ids and, with
``--approver-level N``, everyone whose power level in the room is at least N; prompters
likewise, and by default exactly the approvers. Who may ``share`` (attach the room to
an editor's connection, whose requests the approvers then answer): the approvers, or with
``--share-by prompters`` the prompters. The room's power levels come in as the
content of its ``m.room.power_levels`` state event (or None when unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Access:
    """The rules of one bot: who may approve, and who may prompt."""

    approvers: frozenset[str] = frozenset()
    approver_level: int | None = None
    prompters: frozenset[str] | None = None  # None: the approvers
    prompter_level: int | None = None
    share_by: str = "approvers"  # or "prompters"

    def may_approve(self, user: str, power: Mapping[str, Any] | None) -> bool:
        """Whether ``user`` may answer the agent's permission requests in that room."""
        return _allowed(user, self.approvers, self.approver_level, power)

    def may_prompt(self, user: str, power: Mapping[str, Any] | None) -> bool:
        """Whether ``user`` may open a thread, prompt, cancel and end a session."""
        if self.prompters is None and self.prompter_level is None:
            return self.may_approve(user, power)
        return _allowed(user, self.prompters or frozenset(), self.prompter_level, power)

    def may_share(self, user: str, power: Mapping[str, Any] | None) -> bool:
        """Whether ``user`` may attach the room to a connection of the relay (``share``)."""
        if self.share_by == "prompters":
            return self.may_prompt(user, power)
        return self.may_approve(user, power)

    def approvers_text(self) -> str:
        """Who may approve, in words for a permission request's message."""
        names = sorted(self.approvers)
        if self.approver_level is not None:
            names.append(f"power level {self.approver_level} or more")
        return ", ".join(names) if names else "nobody"


def power_level(user: str, power: Mapping[str, Any] | None) -> int:
    """``user``'s power level from the room's ``m.room.power_levels`` content (0 if unknown)."""
    if power is None:
        return 0
    users = power.get("users")
    level = users.get(user) if isinstance(users, dict) else None
    if level is None:
        level = power.get("users_default", 0)
    return level if isinstance(level, int) and not isinstance(level, bool) else 0


def _allowed(
    user: str, ids: frozenset[str], level: int | None, power: Mapping[str, Any] | None
) -> bool:
    if user in ids:
        return True
    return level is not None and power is not None and power_level(user, power) >= level
