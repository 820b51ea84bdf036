"""One message's places translated, or refused, by the rows of the crossings table.

Pure. :class:`MessageTranslator` carries out, on one parsed message, the rows of
:data:`relay.acp.crossings.CROSSINGS` that apply to it (:func:`relay.acp.crossings.rows_for`):
capabilities withheld, paths and ``file:`` URIs translated, or the relay's own answer
(:mod:`relay.acp.refusals`) where a path cannot cross. A message is translated whole or not
at all. :class:`relay.acp.boundary.Boundary` decides which lines are read and hands it
each message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from relay.acp.crossings import (
    ANSWERED,
    BOX_URI,
    EDITOR_URI,
    KEY_ESCAPE,
    LIST_FILTER,
    MCP,
    OPENING,
    REQUEST_PATH,
    TO_AGENT,
    TRANSLATE_MAX_PLACES,
    WITHHELD_BECAUSE,
    WITHHOLD,
    Action,
    Crossing,
    Direction,
    Message,
    rows_for,
)
from relay.acp.fieldpaths import TooManyPlaces, parse_field, walk
from relay.acp.fileuris import uri_to_box, uri_to_editor
from relay.acp.paths import PathRefused, Translated, real_path_outside, to_editor, translate
from relay.acp.refusals import (
    ToAgent,
    linked_out,
    refused_filter,
    unmapped_request,
    withheld_method,
)
from relay.acp.rewrite import (
    Files,
    RewritePolicy,
    RewriteReport,
    Rewritten,
    SessionRewriter,
    Translation,
)
from relay.core import strictjson
from relay.core.framing import FrameRefused

_BACKSLASH = 0x5C  # by its code: ``b"\\" in line`` makes and drops a TypeError (CPython 3.11)


@dataclass
class _Work:
    """One message being translated: what changed, and the first refusal, if any."""

    report: RewriteReport
    refused: FrameRefused | ToAgent | None = None
    changed: bool = False


@dataclass
class MessageTranslator:
    """The rows carried out on one connection's messages, one message at a time.

    ``sessions`` gives the rule the editor's session was opened by (and learns it from a
    ``session/list`` filter); ``exists`` and ``resolve`` are the box's ``os.path.isdir``
    and ``os.path.realpath`` (see :class:`relay.acp.boundary.Boundary`); ``counts`` is the
    connection's, for its summary.
    """

    policy: RewritePolicy | None
    files: Files
    sessions: SessionRewriter
    exists: Callable[[str], bool]
    resolve: Callable[[str], str]
    counts: Counter[str]

    def cross(
        self, line: bytes, message: dict[str, Any], direction: Direction, kind: Message, method: str
    ) -> bytes | Rewritten | FrameRefused | ToAgent:
        """The rows of ``message`` (``line`` parsed) carried out: ``line`` when nothing
        changed or its rows only translate and find over TRANSLATE_MAX_PLACES places, the
        message translated whole, or the first refusal."""
        rows = rows_for(direction, kind, method, self.files)
        if not (_BACKSLASH in line and KEY_ESCAPE.search(line)):
            rows = tuple(row for row in rows if row.may_be_in(line))
        if not rows:
            return line
        try:
            found = _places(rows, message)
        except TooManyPlaces:
            self.counts["over_cap"] += 1
            return line
        work = _Work(RewriteReport(method))
        for row, places in found:
            self._apply(row, places, message, work)
            if work.refused is not None:
                return work.refused
        if not work.changed:
            return line
        count = "translated_to_agent" if direction == TO_AGENT else "translated_to_editor"
        self.counts[count] += len(work.report.translations)
        return Rewritten(strictjson.dumps(message), work.report)

    def _apply(self, row: Crossing, places: Places, message: dict[str, Any], work: _Work) -> None:
        action = row.action
        if action is ANSWERED:
            work.refused = withheld_method(message, work.report)
            return
        for container, key, where in places:
            value = container[key]
            if action is WITHHOLD:
                self._withhold(container, key, value, work)
            elif isinstance(value, str):
                self._translate(action, message, container, key, where, work)
            if work.refused is not None:
                return

    def _withhold(self, container: dict[str, Any], key: str, value: Any, work: _Work) -> None:
        if not _offers(value):
            return
        del container[key]
        work.report.withheld.append(key)
        work.report.withheld_because = WITHHELD_BECAUSE
        work.changed = True
        self.counts["withheld"] += 1

    def _translate(
        self,
        action: Action,
        message: dict[str, Any],
        container: Any,
        key: Any,
        where: str,
        work: _Work,
    ) -> None:
        value: str = container[key]
        rules = self.policy.cwd.rules if self.policy is not None else ()
        prefer = self.sessions.last_rule
        result: Translated | PathRefused | None
        if action is LIST_FILTER:
            result = self._filter(value)
        elif action is BOX_URI:
            result = uri_to_box(value, rules)
        elif action is EDITOR_URI:
            result = uri_to_editor(value, rules, prefer)
        else:
            result = to_editor(value, rules, prefer)
        if isinstance(result, PathRefused):
            assert self.policy is not None
            work.refused = refused_filter(message, where, value, result, self.policy.cwd)
        elif result is None and action is REQUEST_PATH:
            work.refused = unmapped_request(message, where, value, work.report, rules)
        elif result is None:
            work.report.left.append((where, value))
            self.counts["left_unmapped"] += 1
        elif action is REQUEST_PATH:
            self._request_path(message, container, key, where, result, work)
        else:
            self._put(container, key, where, result.path, work)

    def _put(self, container: Any, key: Any, where: str, path: str, work: _Work) -> None:
        value = container[key]
        if path != value:
            container[key] = path
            work.report.translations.append(Translation(where, value, path))
            work.changed = True

    def _request_path(
        self,
        message: dict[str, Any],
        container: Any,
        key: Any,
        where: str,
        result: Translated,
        work: _Work,
    ) -> None:
        """The path of a request the editor acts on: refused when its symbolic links lead
        out of its rule's folder on the box (the editor would follow the same links in its
        own copy of the folder), else translated."""
        value: str = container[key]
        assert result.rule is not None
        real = real_path_outside(value, result.rule, self.resolve)
        if real is not None:
            work.refused = linked_out(message, where, value, real, result.rule, work.report)
            return
        self._put(container, key, where, result.path, work)

    def _filter(self, value: str) -> Translated | PathRefused:
        assert self.policy is not None
        result = translate(value, replace(self.policy.cwd, must_exist=False), self.exists)
        if isinstance(result, Translated) and result.rule is not None:
            self.sessions.last_rule = result.rule
        return result


Places = list[tuple[Any, Any, str]]  # (container, key or index, name) of each place


def _places(rows: Sequence[Crossing], message: dict[str, Any]) -> list[tuple[Crossing, Places]]:
    """Each row and the places of ``message`` it finds; TooManyPlaces when the rows that
    only translate find over TRANSLATE_MAX_PLACES together (a row that must be read is
    never cut short: each finds one place or two)."""
    budget = TRANSLATE_MAX_PLACES
    found: list[tuple[Crossing, Places]] = []
    for row in rows:
        if row.action is OPENING or row.action is MCP:
            continue  # the session-opening rewrite did these
        if row.action.must_read:
            found.append((row, list(walk(message, parse_field(row.field)))))
            continue
        places = list(walk(message, parse_field(row.field), limit=budget))
        budget -= len(places)
        if budget < 0:
            raise TooManyPlaces(f"over {TRANSLATE_MAX_PLACES} places")
        found.append((row, places))
    return found


def _offers(capability: Any) -> bool:
    """Whether a capability value offers anything (absent, false, null and {} do not)."""
    if capability is None or capability is False:
        return False
    if isinstance(capability, dict):
        return any(v is not None and v is not False for k, v in capability.items() if k != "_meta")
    return True
