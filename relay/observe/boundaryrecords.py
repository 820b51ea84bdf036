"""What the filesystem boundary did on one connection, kept for the dev console.

The console shows its connection's lines as its socket carried them; what the relay
changed on the way (the editor's capabilities withheld from ``initialize``, each path
translated, the agent's requests the relay answered itself) is not on that wire, and
must not be added to it: the conversation belongs to the two sides. So under ``serve
--dev`` each connection's observer keeps these records here, and the console reads them
out of band (``GET /console-boundary``, :mod:`relay.server.http.devconsole`). Memory stays
bounded: the newest :data:`MAX_RECORDS` records, each value shortened; without the
console nothing is kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from relay.core.framing import Dropped
from relay.observe.logs import shortened
from relay.streams.pump import answered

if TYPE_CHECKING:
    from relay.acp.rewrite import RewriteReport
    from relay.streams.pump import AgentLine

MAX_RECORDS = 100  # per connection: the oldest go first
VALUE_CHARS = 512  # a path or a reason longer than this is cut, saying how long it was
TO_AGENT = "to_agent"  # the console's names of the two directions
TO_CLIENT = "to_client"


class BoundaryRecords:
    """One connection's boundary records, newest last, numbered from 1."""

    def __init__(self, most: int = MAX_RECORDS) -> None:
        self._records: deque[dict[str, Any]] = deque(maxlen=most)
        self.made = 0  # records made since the connection opened

    def client(self, report: RewriteReport) -> None:
        """A client message the boundary changed on its way to the agent."""
        if report.withheld:
            self._add("withheld", TO_AGENT, report.method, capabilities=list(report.withheld))
        self._translations(TO_AGENT, report)

    def agent(self, verdicts: Sequence[AgentLine]) -> None:
        """The agent's lines of one read, as the boundary handled them."""
        for verdict in verdicts:
            if isinstance(verdict, bytes | Dropped):
                continue
            if answered(verdict):  # the relay answered the agent's request itself
                reason = shortened(verdict.reason, VALUE_CHARS)
                self._add("answered", TO_CLIENT, verdict.report.method, reason=reason)
            else:
                self._translations(TO_CLIENT, verdict.report)

    def snapshot(self) -> dict[str, Any]:
        """The records kept, oldest first, and how many older ones are gone."""
        return {"records": list(self._records), "dropped": self.made - len(self._records)}

    def _translations(self, direction: str, report: RewriteReport) -> None:
        for crossing in report.crossings():
            self._add(
                "translated",
                direction,
                report.method,
                field=shortened(crossing.field, VALUE_CHARS),
                **{
                    "from": shortened(crossing.before, VALUE_CHARS),
                    "to": shortened(crossing.after, VALUE_CHARS),
                },
            )

    def _add(self, kind: str, direction: str, method: str, **fields: Any) -> None:
        self.made += 1
        shown = shortened(method, VALUE_CHARS)
        record = {"n": self.made, "kind": kind, "direction": direction, "method": shown}
        self._records.append(record | fields)
