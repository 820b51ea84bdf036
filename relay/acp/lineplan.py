"""What the boundary looks for in raw lines under one ``--files`` policy, before reading any.

Pure. :func:`plan_for` makes, once per policy, the byte markers of the rows of
:data:`relay.acp.crossings.CROSSINGS` in force and the one search over a whole line that
finds any of them; :class:`Interest` says what a line that the search found may hold:
something the relay must read (refused or answered when it cannot), or something it only
translates. :class:`relay.acp.boundary.Boundary` asks these first, so that nearly every
line passes after one search and is never parsed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from relay.acp.crossings import (
    ANSWER_MARKERS,
    CAPABILITIES,
    CROSSINGS,
    TO_AGENT,
    TO_EDITOR,
    markers,
)
from relay.acp.rewrite import Files


@dataclass(frozen=True)
class Interest:
    """What the byte tests found a line may hold."""

    must: bool  # something the relay must read (refused or answered if it cannot)
    may: bool  # something only translated


NONE = Interest(False, False)


@dataclass(frozen=True)
class LinePlan:
    """What one ``--files`` policy looks for in lines, made once per policy."""

    client_must: tuple[bytes, ...]
    client_may: tuple[bytes, ...]
    agent_must: tuple[bytes, ...]
    agent_may: tuple[bytes, ...]
    answered: frozenset[str]  # methods whose responses cross
    answers: tuple[bytes, ...]  # and their markers
    client_seek: re.Pattern[bytes]
    # (pending session/list, watching the agent's capabilities) -> its markers, its search
    _agent_markers: dict[tuple[bool, bool], tuple[bytes, ...]] = field(default_factory=dict)
    _agent_seekers: dict[tuple[bool, bool], re.Pattern[bytes]] = field(default_factory=dict)

    def agent_markers(self, pending: bool, capabilities: bool) -> tuple[bytes, ...]:
        """The markers of the agent's lines while a session/list is ``pending`` and while
        the agent's ``capabilities`` are still to be learnt."""
        found = self._agent_markers.get((pending, capabilities))
        if found is None:
            found = self.agent_must + self.agent_may + (self.answers if pending else ())
            found = tuple(sorted(set(found + ((CAPABILITIES,) if capabilities else ()))))
            self._agent_markers[(pending, capabilities)] = found
        return found

    def agent_seek(self, pending: bool, capabilities: bool) -> re.Pattern[bytes]:
        """The one search for any of :meth:`agent_markers`."""
        seek = self._agent_seekers.get((pending, capabilities))
        if seek is None:
            seek = seeker(self.agent_markers(pending, capabilities))
            self._agent_seekers[(pending, capabilities)] = seek
        return seek


@cache
def plan_for(files: Files) -> LinePlan:
    """The plan of ``files``, shared by every connection under it."""
    answers = [
        row for row in CROSSINGS if row.message == "response" and files in row.action.policies
    ]
    client_must = markers(TO_AGENT, files, must=True)
    client_may = markers(TO_AGENT, files, must=False)
    return LinePlan(
        client_must,
        client_may,
        markers(TO_EDITOR, files, must=True),
        markers(TO_EDITOR, files, must=False),
        frozenset(m for row in answers for m in row.methods),
        tuple(sorted({m for row in answers for m in row.markers})) + ANSWER_MARKERS,
        seeker(client_must + client_may),
    )


@cache
def seeker(markers: Sequence[bytes]) -> re.Pattern[bytes]:
    """One search for any of ``markers``: a pass over a long line, not one per marker."""
    return re.compile(b"|".join(re.escape(marker) for marker in sorted(set(markers))))
