"""A tool call's locations and diff paths translated without the table's generic walk.

Pure. Nearly every agent line the boundary translates is a ``session/update`` whose update
is a ``tool_call`` or ``tool_call_update`` with ``locations[].path`` or the ``path`` of a
``diff`` in ``content[]``. :class:`ToolCallPaths` translates such a line on its own, and
gives None for any line it does not take, which the boundary then carries out as before
(read by :func:`relay.core.strictjson.loads`, the rows of the crossings table walked by
:class:`relay.acp.translating.MessageTranslator`, written by
:func:`relay.core.strictjson.dumps`).

What it keeps, so that a line it takes comes out as the full path makes it (the same
values, report and counts; spelled as the agent spelled it but for the paths, when
the splice can be sure of them):

- the read: :func:`relay.core.strictjson.object_or_none`, the same scanner and hooks as
  the full path's read (a key given twice anywhere, NaN, a number's spelling, invalid
  UTF-8 as strict as before); a line that read would check further (a surrogate escape,
  deep nesting) or that has anything around its object is not taken;
- the values written: each translated path spelled by :func:`relay.core.strictjson.dumps`,
  as the full path spells it;
- the places, their order and their names: those the table's rows for tool calls find
  (``params.update.locations[i].path``, then ``params.update.content[i].path`` of each
  diff), each translated by :func:`relay.acp.paths.to_editor` with the rules and the
  preferred rule the full path uses, reported and counted as it reports and counts them.

What goes is the cost around them: the rows looked up and filtered by markers, the
generic walk of each field path, the translation of a path already translated on this
connection under the same preferred rule (remembered, up to ``MEMO_MAX`` paths), and
the writing of the whole line. The translated values are spliced into the agent's own
bytes (:func:`splice`), which pass untouched around them, where the full path writes the
whole line again (its whitespace, its escapes): the same values, spelled as the agent
spelled them. A line where the splice cannot be sure of each place (an escape anywhere
in it, a path that occurs elsewhere, a path without a ``/``) is written whole, by
:func:`relay.core.strictjson.dumps`, as the full path writes it.

A line is not taken (None) when its update has content the URI rows read (a
``resource_link`` or ``resource`` inside a ``content`` block), when its lists are long
enough for the table's place limit (``TRANSLATE_MAX_PLACES``) to matter, or when it is
anything but a notification of ``session/update`` holding a tool call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from relay.acp.crossings import READ_MAX_BYTES, TRANSLATE_MAX_PLACES
from relay.acp.paths import CwdRule, to_editor
from relay.acp.rewrite import RewriteReport, Rewritten, SessionRewriter, Translation
from relay.core import strictjson

TOOL_CALLS = frozenset({"tool_call", "tool_call_update"})
_URI_BLOCKS = frozenset({"resource_link", "resource"})  # read by the table's URI rows
MEMO_MAX = 1024  # paths remembered per connection (a session's files, mostly the same few)
_UPDATE = "params.update"

Place = tuple[dict[str, Any], str]  # (the object holding a path, its name in the report)


@dataclass
class ToolCallPaths:
    """The tool-call lines of one connection translated on their own (see the module's doc).

    ``rules`` are the policy's; ``sessions`` gives the rule the editor's session was opened
    by (the preferred one); ``counts`` is the connection's, for its summary.
    """

    rules: Sequence[CwdRule]
    sessions: SessionRewriter
    counts: Counter[str]
    _memo: dict[str, str | None] = field(default_factory=dict)
    _memo_prefer: CwdRule | None = None

    def line(self, line: bytes) -> bytes | Rewritten | None:
        """The agent's ``line`` carried out as the full path carries it out (``line``
        itself when nothing changed; a translated line spliced when :func:`splice` can
        be sure, else written whole), or None when this does not take it."""
        message = strictjson.object_or_none(line, max_bytes=READ_MAX_BYTES)
        if message is None:
            return None
        update = tool_call_update(message)
        if update is None:
            return None
        places = path_places(update)
        if places is None:
            return None
        report = RewriteReport("session/update")
        self._translate(places, report)
        if not report.translations:
            return line
        self.counts["translated_to_editor"] += len(report.translations)
        spliced = splice(line, report.translations)
        return Rewritten(strictjson.dumps(message) if spliced is None else spliced, report)

    def _translate(self, places: list[Place], report: RewriteReport) -> None:
        prefer = self.sessions.last_rule
        if prefer is not self._memo_prefer or len(self._memo) >= MEMO_MAX:
            self._memo.clear()  # a path's editor spelling depends on the preferred rule
            self._memo_prefer = prefer
        for holder, where in places:
            value = holder["path"]
            if not isinstance(value, str):
                continue  # as the full path: only a string is a path
            path = self._editor_path(value, prefer)
            if path is None:
                report.left.append((where, value))
                self.counts["left_unmapped"] += 1
            elif path != value:
                holder["path"] = path
                report.translations.append(Translation(where, value, path))

    def _editor_path(self, value: str, prefer: CwdRule | None) -> str | None:
        try:
            return self._memo[value]
        except KeyError:
            translated = to_editor(value, self.rules, prefer)
            path = None if translated is None else translated.path
            self._memo[value] = path
            return path


def tool_call_update(message: dict[str, Any]) -> dict[str, Any] | None:
    """The update of a ``session/update`` notification holding a tool call, else None."""
    if message.get("method") != "session/update" or "id" in message:
        return None  # a request of that name (with an id) crosses by no row
    params = message.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    if not isinstance(update, dict):
        return None
    kind = update.get("sessionUpdate")
    return update if isinstance(kind, str) and kind in TOOL_CALLS else None


def path_places(update: dict[str, Any]) -> list[Place] | None:
    """The places of ``update`` that the rows for tool calls translate, in the rows' order
    (locations, then diffs); None when the URI rows would find something in it, or when
    its lists are long enough for the place limit to count."""
    locations = update.get("locations")
    content = update.get("content")
    located = locations if isinstance(locations, list) else ()
    blocks = content if isinstance(content, list) else ()
    # Each row walks each list in full against what is left of the limit: under this
    # bound no walk of the rows (URIs found nowhere) can go past it.
    if len(located) + 2 * len(blocks) > TRANSLATE_MAX_PLACES:
        return None
    places = [
        (item, f"{_UPDATE}.locations[{i}].path")
        for i, item in enumerate(located)
        if isinstance(item, dict) and "path" in item
    ]
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "diff" and "path" in block:
            places.append((block, f"{_UPDATE}.content[{i}].path"))
        elif kind == "content" and _holds_uri_block(block.get("content")):
            return None
    return places


def splice(line: bytes, translations: Sequence[Translation]) -> bytes | None:
    """``line`` (read strictly already) with each translation's value written in place of
    the string it translated, every other byte as it came; None when that cannot be sure.

    It is sure when the line holds no backslash and each translated value holds a ``/``.
    Without a backslash every string of the line is spelled as its bare UTF-8 between two
    quotes, with no quote inside: a quote followed by a value with a ``/`` and a quote can
    only be a string of that value, a ``/`` being nothing JSON has between two strings.
    So the line holds the value quoted exactly once for each place that held it when no
    other string (a title, a key, an unmapped path) is the same value: then every one of
    those is a translated place, and each is replaced. Any other count, or a translated
    value that is another's original (one replacement could be taken for the next), and
    the caller writes the whole line instead.
    """
    if line.find(b"\\") != -1:
        return None
    places: dict[str, int] = {}
    after: dict[str, str] = {}
    for translation in translations:
        before = translation.before
        places[before] = places.get(before, 0) + 1
        after[before] = translation.after
    if not places.keys().isdisjoint(after.values()):
        return None
    for before, count in places.items():
        if "/" not in before:
            return None
        quoted = b'"%b"' % before.encode()
        if line.count(quoted) != count:
            return None
        line = line.replace(quoted, strictjson.dumps(after[before]))
    return line


def _holds_uri_block(inner: Any) -> bool:
    kind = inner.get("type") if isinstance(inner, dict) else None
    return isinstance(kind, str) and kind in _URI_BLOCKS
