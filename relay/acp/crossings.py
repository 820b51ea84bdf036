"""Every place a path crosses between the editor's machine and the box, as one table.

Pure. :data:`CROSSINGS` lists each place of ACP v1 where a path or a ``file:`` URI
crosses, as (methods, message kind, direction, field, action); a new place is one row,
and docs/paths-and-mcp.md's table is made from it (:func:`crossings_table`). Each row
also names the byte markers by which a raw line may hold it, so that only such lines
are parsed. :class:`relay.acp.boundary.Boundary` carries the table out for one
connection.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Literal

from relay.acp.fieldpaths import Key, When, parse_field
from relay.acp.rewrite import SESSION_OPENING_METHODS, Files

Direction = Literal["editor → agent", "agent → editor"]
Message = Literal["request", "notification", "response"]
Messages = Literal["request", "notification", "response", "request or notification"]
CALLS: Messages = "request or notification"  # an ACP request sent without an id is one too
TO_AGENT: Direction = "editor → agent"
TO_EDITOR: Direction = "agent → editor"

READ_MAX_BYTES = 8 << 20  # larger lines are not read for translation (they pass as they came)
# A line only translated (no row of it must be read) is read when it holds at most this
# many JSON values, counted from its bytes (value_bound), and translated when its rows
# find at most TRANSLATE_MAX_PLACES places; past either it passes as it came, so that
# one line's translation costs the event loop a bounded time (docs/paths-and-mcp.md).
READ_MAX_VALUES = 25_000
TRANSLATE_MAX_PLACES = 1_000
JOIN_MAX_BYTES = 1 << 20  # the lines of one read are looked at together up to this size
MAX_PENDING_LISTS = 64  # session/list requests of one connection awaiting their answer
SHOWN_CHARS = 512  # of a path echoed in an error's data

WITHHELD_BECAUSE = "--files box: the agent uses the box's own filesystem and terminal"

ALL: frozenset[Files] = frozenset(Files)
BOX_AND_SHARED: frozenset[Files] = frozenset({Files.BOX, Files.SHARED})


@dataclass(frozen=True)
class Action:
    """What the relay does with a row's field, and under which ``--files`` policies.

    ``must_read``: a line that may hold it is refused (editor) or answered (agent) when
    the relay cannot read it, rather than passed on unchecked.
    """

    name: str
    does: str  # for the table in docs/paths-and-mcp.md
    policies: frozenset[Files]
    must_read: bool = False
    elsewhere: tuple[tuple[Files, str], ...] = ()  # the table's cell where it does not apply

    def cell(self, files: Files) -> str:
        if files in self.policies:
            return self.does
        return dict(self.elsewhere).get(files, "passes")


OPENING = Action(
    "opening", "editor → box (`--cwd-map`, `--cwd-fallback`, `--cwd-must-exist`)", ALL, True
)
MCP = Action("mcp", "`--mcp-servers` merged in", ALL, True)
WITHHOLD = Action("withhold", "withheld (taken out)", frozenset({Files.BOX}), True)
LIST_FILTER = Action(
    "list-filter",
    "editor → box, as `cwd` in session/new (not checked for existence)",
    BOX_AND_SHARED,
    True,
)
ANSWERED = Action(
    "answered",
    "answered by the relay with -32601 (the capability was "
    "withheld; a notification's answer has id null); never reaches the editor",
    frozenset({Files.BOX}),
    True,
)
REQUEST_PATH = Action(
    "request-path",
    "box → editor; under no rule, or when its symbolic "
    "links lead out of the rule's folder, the relay answers -32602 and the "
    "message never reaches the editor",
    frozenset({Files.SHARED}),
    True,
    ((Files.BOX, "(answered by the relay: row above)"),),
)
EDITOR_PATH = Action("editor-path", "box → editor; left as it is under no rule", BOX_AND_SHARED)
EDITOR_URI = Action(
    "editor-uri", "`file:` URI box → editor; left as it is under no rule", BOX_AND_SHARED
)
BOX_URI = Action("box-uri", "`file:` URI editor → box; left as it is under no rule", BOX_AND_SHARED)


@dataclass(frozen=True)
class Crossing:
    """One place a path crosses: a field of a message kind of some methods, one way.

    ``markers``: bytes a line holding it holds when spelled without escapes (a line with
    an escape that could spell a key or method is looked at anyway).
    """

    methods: tuple[str, ...]
    message: Messages
    direction: Direction
    field: str  # "" for the whole message
    action: Action
    markers: tuple[bytes, ...]

    def carries(self, kind: Message) -> bool:
        """Whether the row applies to a message of ``kind``."""
        return kind == self.message or (self.message == CALLS and kind != "response")

    def matches(self, method: str) -> bool:
        return any(
            m == method or (m.endswith("/*") and method.startswith(m[:-1])) for m in self.methods
        )

    def may_be_in(self, line: bytes) -> bool:
        """False: ``line``, spelled without escapes, lacks a key or a value the field's
        steps need (so walking its message would find nothing)."""
        for names in _names(self.field):
            for name in names:
                if line.find(name) != -1:  # not ``in``: see relay.acp.boundary's _BACKSLASH
                    break
            else:
                return False
        return True


@cache
def _names(field: str) -> tuple[tuple[bytes, ...], ...]:
    """Per step of ``field``, last step first (the rarest names): the quoted names of which
    the line must hold one."""
    needs: list[tuple[bytes, ...]] = []
    for step in parse_field(field):
        if isinstance(step, Key):
            needs.append(_quoted(step.name))
        elif isinstance(step, When):
            needs.append(_quoted(*sorted(step.values)))
    return tuple(reversed(needs))


def _quoted(*methods: str) -> tuple[bytes, ...]:
    return tuple(f'"{m}"'.encode() for m in methods)


_TOOL_CALLS = "{sessionUpdate=tool_call|tool_call_update}"
_CHUNKS = "{sessionUpdate=agent_message_chunk|user_message_chunk|agent_thought_chunk}"
_LINK = "content{type=resource_link}.uri"
_RESOURCE = "content{type=resource}.resource.uri"
_IN_CONTENT = "content[]{type=content}."
_UPDATE = "params.update"
_PERMISSION = ("session/request_permission",)
_URI = (b'"uri"',)
_PATH = (b'"path"',)

CROSSINGS: tuple[Crossing, ...] = (
    Crossing(
        ("initialize",),
        "request",
        TO_AGENT,
        "params.clientCapabilities.fs",
        WITHHOLD,
        _quoted("initialize"),
    ),
    Crossing(
        ("initialize",),
        "request",
        TO_AGENT,
        "params.clientCapabilities.terminal",
        WITHHOLD,
        _quoted("initialize"),
    ),
    Crossing(
        SESSION_OPENING_METHODS,
        "request",
        TO_AGENT,
        "params.cwd",
        OPENING,
        _quoted(*SESSION_OPENING_METHODS),
    ),
    Crossing(
        SESSION_OPENING_METHODS,
        "request",
        TO_AGENT,
        "params.additionalDirectories[]",
        OPENING,
        _quoted(*SESSION_OPENING_METHODS),
    ),
    Crossing(
        SESSION_OPENING_METHODS,
        "request",
        TO_AGENT,
        "params.mcpServers",
        MCP,
        _quoted(*SESSION_OPENING_METHODS),
    ),
    Crossing(
        ("session/list",), "request", TO_AGENT, "params.cwd", LIST_FILTER, _quoted("session/list")
    ),
    Crossing(
        ("session/list",),
        "response",
        TO_EDITOR,
        "result.sessions[].cwd",
        EDITOR_PATH,
        (b'"sessions"',),
    ),
    Crossing(
        ("session/list",),
        "response",
        TO_EDITOR,
        "result.sessions[].additionalDirectories[]",
        EDITOR_PATH,
        (b'"sessions"',),
    ),
    Crossing(
        ("session/prompt",),
        "request",
        TO_AGENT,
        "params.prompt[]{type=resource_link}.uri",
        BOX_URI,
        _URI,
    ),
    Crossing(
        ("session/prompt",),
        "request",
        TO_AGENT,
        "params.prompt[]{type=resource}.resource.uri",
        BOX_URI,
        _URI,
    ),
    Crossing(("fs/*", "terminal/*"), CALLS, TO_EDITOR, "", ANSWERED, (b'"fs/', b'"terminal/')),
    Crossing(
        ("fs/read_text_file", "fs/write_text_file"),
        CALLS,
        TO_EDITOR,
        "params.path",
        REQUEST_PATH,
        (b'"fs/',),
    ),
    Crossing(("terminal/create",), CALLS, TO_EDITOR, "params.cwd", REQUEST_PATH, (b'"terminal/',)),
    Crossing(
        ("session/update",),
        "notification",
        TO_EDITOR,
        f"{_UPDATE}{_TOOL_CALLS}.locations[].path",
        EDITOR_PATH,
        _PATH,
    ),
    Crossing(
        ("session/update",),
        "notification",
        TO_EDITOR,
        f"{_UPDATE}{_TOOL_CALLS}.content[]{{type=diff}}.path",
        EDITOR_PATH,
        _PATH,
    ),
    Crossing(
        ("session/update",),
        "notification",
        TO_EDITOR,
        f"{_UPDATE}{_TOOL_CALLS}.{_IN_CONTENT}{_LINK}",
        EDITOR_URI,
        _URI,
    ),
    Crossing(
        ("session/update",),
        "notification",
        TO_EDITOR,
        f"{_UPDATE}{_TOOL_CALLS}.{_IN_CONTENT}{_RESOURCE}",
        EDITOR_URI,
        _URI,
    ),
    Crossing(
        ("session/update",),
        "notification",
        TO_EDITOR,
        f"{_UPDATE}{_CHUNKS}.{_LINK}",
        EDITOR_URI,
        _URI,
    ),
    Crossing(
        ("session/update",),
        "notification",
        TO_EDITOR,
        f"{_UPDATE}{_CHUNKS}.{_RESOURCE}",
        EDITOR_URI,
        _URI,
    ),
    Crossing(
        _PERMISSION, "request", TO_EDITOR, "params.toolCall.locations[].path", EDITOR_PATH, _PATH
    ),
    Crossing(
        _PERMISSION,
        "request",
        TO_EDITOR,
        "params.toolCall.content[]{type=diff}.path",
        EDITOR_PATH,
        _PATH,
    ),
    Crossing(
        _PERMISSION, "request", TO_EDITOR, f"params.toolCall.{_IN_CONTENT}{_LINK}", EDITOR_URI, _URI
    ),
    Crossing(
        _PERMISSION,
        "request",
        TO_EDITOR,
        f"params.toolCall.{_IN_CONTENT}{_RESOURCE}",
        EDITOR_URI,
        _URI,
    ),
)
"""The boundary: each place of ACP v1 where a path crosses, and what the relay does there."""

# JSON may spell a method with escapes ("fs\/read_text_file", "\u0066s/..."): an escape of
# '/' or of a lowercase letter may hide a method (METHOD_ESCAPE). A key or value ("loc\u0061tions",
# "tool\u005fcall", "tool\u0043all") may also escape '$', '_' or an uppercase letter. An
# ordinary serializer escapes none of these, so plain text (newlines, quotes, non-ASCII
# letters, Go's \u003c) does not match.
KEY_ESCAPE = re.compile(rb"\\(?:/|u00(?:2[4fF]|[4-7][0-9a-fA-F]))")
KEY_ESCAPE_LONGEST = len(b"\\u0024")  # bytes of its longest match; each begins with a backslash
CANCEL = b'"$/cancel_request"'
CAPABILITIES = b'"agentCapabilities"'
ANSWER_MARKERS = (b'"error"',)  # an error answer also ends a pending session/list


def markers(direction: Direction, files: Files, *, must: bool) -> tuple[bytes, ...]:
    """The byte markers of the rows of ``direction`` in force under ``files`` that must be
    read (``must``) or that are only translated (not ``must``), responses aside."""
    found = {
        marker
        for row in CROSSINGS
        if row.direction == direction
        and row.message != "response"
        and files in row.action.policies
        and row.action.must_read == must
        for marker in row.markers
    }
    return tuple(sorted(found))


@lru_cache(maxsize=256)  # methods come from the wire: bounded
def rows_for(
    direction: Direction, message: Message, method: str, files: Files
) -> tuple[Crossing, ...]:
    """The rows that apply to one message."""
    return tuple(
        row
        for row in CROSSINGS
        if row.direction == direction
        and row.carries(message)
        and files in row.action.policies
        and row.matches(method)
    )


def value_bound(line: bytes) -> int:
    """At least the number of JSON values in ``line``: each value but the first of an array
    or object follows a comma, and each array or object opens with a bracket (those inside
    strings only raise the count)."""
    return line.count(b",") + line.count(b"{") + line.count(b"[") + 1


def may_hold_too_many_values(line: bytes) -> bool:
    """Whether ``line`` may hold more than ``READ_MAX_VALUES`` JSON values (by
    :func:`value_bound`; values are fewer than bytes, so only a longer line is counted)."""
    return len(line) > READ_MAX_VALUES and value_bound(line) > READ_MAX_VALUES


def crossings_table(rows: Sequence[Crossing] = CROSSINGS) -> str:
    """The markdown table of ``rows`` in docs/paths-and-mcp.md."""
    out = [
        "| methods | message | direction | field | box | shared | pass |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            ", ".join(f"`{m}`" for m in row.methods),
            row.message,
            row.direction,
            f"`{row.field}`" if row.field else "(the request)",
            *(row.action.cell(files) for files in _POLICY_ORDER),
        ]
        out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(out) + "\n"


_POLICY_ORDER: tuple[Files, ...] = (Files.BOX, Files.SHARED, Files.PASS)
