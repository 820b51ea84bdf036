"""Every place a path crosses between the editor's machine and the box, as one table.

Pure. :data:`CROSSINGS` lists each place of ACP v1 where a path or a ``file:`` URI
crosses, as (methods, message kind, direction, field, action); a new place is one row.
:class:`Boundary` carries it out for one connection, on each line both ways:

- editor -> agent (:meth:`Boundary.client_line`): the session-opening rewrite
  (:mod:`relay.acp.rewrite`), the editor's ``fs`` and ``terminal`` capabilities withheld
  from ``initialize`` under ``--files box``, the ``session/list`` filter and the
  ``file:`` URIs of a prompt's resources translated to the box;
- agent -> editor (:meth:`Boundary.agent_line`): the box's paths and URIs of tool calls,
  permission requests, message content and ``session/list`` results translated to the
  editor's (left as they are when no rule maps them); the agent's ``fs/*`` and
  ``terminal/*`` requests answered by the relay under ``box`` (the capability was
  withheld), their path translated under ``shared`` (answered by the relay when no rule
  maps it, so that no box path reaches the editor as a request).

``--files pass`` keeps only the session-opening rewrite. Every other field passes as it
came: text, terminal output, ``rawInput``/``rawOutput``, ``_meta``.

A line is parsed only when cheap byte tests say it may hold a row's method or key (or a
JSON escape that could spell one); streamed message text is never parsed. A translated
line is re-serialized by :mod:`relay.acp.strictjson`: ids and numbers as spelled, every
other field and its order kept. A message is translated whole or not at all.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from functools import cache, lru_cache
from typing import Any, Literal

from relay.acp import strictjson
from relay.acp.fileuris import uri_to_box, uri_to_editor
from relay.acp.paths import PathRefused, Translated, to_editor, translate
from relay.acp.rewrite import (
    METHOD_ESCAPE,
    SESSION_OPENING_METHODS,
    Files,
    PathProblem,
    RewritePolicy,
    RewriteReport,
    Rewritten,
    SessionRewriter,
    Translation,
    refusal,
    unreadable,
)
from relay.core.framing import FrameRefused, error_reply

Direction = Literal["editor → agent", "agent → editor"]
Message = Literal["request", "notification", "response"]
TO_AGENT: Direction = "editor → agent"
TO_EDITOR: Direction = "agent → editor"

READ_MAX_BYTES = 8 << 20  # larger lines are not read for translation (they pass as they came)
JOIN_MAX_BYTES = 1 << 20  # the lines of one read are looked at together up to this size
MAX_PENDING_LISTS = 64  # session/list requests of one connection awaiting their answer
SHOWN_CHARS = 512  # of a path echoed in an error's data

WITHHELD_BECAUSE = "--files box: the agent uses the box's own filesystem and terminal"

ALL: frozenset[Files] = frozenset({"box", "shared", "pass"})
BOX_AND_SHARED: frozenset[Files] = frozenset({"box", "shared"})


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


OPENING = Action("opening", "editor → box (`--cwd-map`, `--cwd-fallback`, "
                 "`--cwd-must-exist`)", ALL, True)  # fmt: skip
MCP = Action("mcp", "`--mcp-servers` merged in", ALL, True)
WITHHOLD = Action("withhold", "withheld (taken out)", frozenset({"box"}), True)
LIST_FILTER = Action("list-filter", "editor → box, as `cwd` in session/new (not checked "
                     "for existence)", BOX_AND_SHARED, True)  # fmt: skip
ANSWERED = Action("answered", "answered by the relay with -32601 (the capability was "
                  "withheld); never reaches the editor", frozenset({"box"}), True)  # fmt: skip
REQUEST_PATH = Action("request-path", "box → editor; under no rule the relay answers "
                      "-32602 and the request never reaches the editor",
                      frozenset({"shared"}), True,
                      (("box", "(the request is answered by the relay: row above)"),))  # fmt: skip
EDITOR_PATH = Action("editor-path", "box → editor; left as it is under no rule",
                     BOX_AND_SHARED)  # fmt: skip
EDITOR_URI = Action("editor-uri", "`file:` URI box → editor; left as it is under no rule",
                    BOX_AND_SHARED)  # fmt: skip
BOX_URI = Action("box-uri", "`file:` URI editor → box; left as it is under no rule",
                 BOX_AND_SHARED)  # fmt: skip


@dataclass(frozen=True)
class Key:
    name: str


@dataclass(frozen=True)
class Each:
    pass


@dataclass(frozen=True)
class When:
    key: str
    values: frozenset[str]


Step = Key | Each | When
_SEGMENT = re.compile(r"^([A-Za-z_]+)(\[\])?(?:\{([A-Za-z_]+)=([a-z_|]+)\})?$")


@cache
def parse_field(text: str) -> tuple[Step, ...]:
    """``params.update{sessionUpdate=tool_call|tool_call_update}.locations[].path`` as steps:
    a key, ``[]`` each element of an array, ``{key=a|b}`` only where that key is a or b."""
    steps: list[Step] = []
    for segment in text.split(".") if text else ():
        found = _SEGMENT.match(segment)
        if found is None:
            raise ValueError(f"bad field {text!r} at {segment!r}")
        name, each, key, values = found.groups()
        steps.append(Key(name))
        if each:
            steps.append(Each())
        if key:
            steps.append(When(key, frozenset(values.split("|"))))
    return tuple(steps)


@dataclass(frozen=True)
class Crossing:
    """One place a path crosses: a field of a message kind of some methods, one way.

    ``markers``: bytes a line holding it holds when spelled without escapes (a line with
    an escape that could spell a key or method is looked at anyway).
    """

    methods: tuple[str, ...]
    message: Message
    direction: Direction
    field: str  # "" for the whole message
    action: Action
    markers: tuple[bytes, ...]

    def matches(self, method: str) -> bool:
        return any(
            m == method or (m.endswith("/*") and method.startswith(m[:-1])) for m in self.methods
        )


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
    Crossing(("initialize",), "request", TO_AGENT, "params.clientCapabilities.fs", WITHHOLD,
             _quoted("initialize")),
    Crossing(("initialize",), "request", TO_AGENT, "params.clientCapabilities.terminal",
             WITHHOLD, _quoted("initialize")),
    Crossing(SESSION_OPENING_METHODS, "request", TO_AGENT, "params.cwd", OPENING,
             _quoted(*SESSION_OPENING_METHODS)),
    Crossing(SESSION_OPENING_METHODS, "request", TO_AGENT, "params.additionalDirectories[]",
             OPENING, _quoted(*SESSION_OPENING_METHODS)),
    Crossing(SESSION_OPENING_METHODS, "request", TO_AGENT, "params.mcpServers", MCP,
             _quoted(*SESSION_OPENING_METHODS)),
    Crossing(("session/list",), "request", TO_AGENT, "params.cwd", LIST_FILTER,
             _quoted("session/list")),
    Crossing(("session/list",), "response", TO_EDITOR, "result.sessions[].cwd", EDITOR_PATH,
             (b'"sessions"',)),
    Crossing(("session/list",), "response", TO_EDITOR,
             "result.sessions[].additionalDirectories[]", EDITOR_PATH, (b'"sessions"',)),
    Crossing(("session/prompt",), "request", TO_AGENT, "params.prompt[]{type=resource_link}.uri",
             BOX_URI, _URI),
    Crossing(("session/prompt",), "request", TO_AGENT,
             "params.prompt[]{type=resource}.resource.uri", BOX_URI, _URI),
    Crossing(("fs/*", "terminal/*"), "request", TO_EDITOR, "", ANSWERED,
             (b'"fs/', b'"terminal/')),
    Crossing(("fs/read_text_file", "fs/write_text_file"), "request", TO_EDITOR, "params.path",
             REQUEST_PATH, (b'"fs/',)),
    Crossing(("terminal/create",), "request", TO_EDITOR, "params.cwd", REQUEST_PATH,
             (b'"terminal/',)),
    Crossing(("session/update",), "notification", TO_EDITOR,
             f"{_UPDATE}{_TOOL_CALLS}.locations[].path", EDITOR_PATH, _PATH),
    Crossing(("session/update",), "notification", TO_EDITOR,
             f"{_UPDATE}{_TOOL_CALLS}.content[]{{type=diff}}.path", EDITOR_PATH, _PATH),
    Crossing(("session/update",), "notification", TO_EDITOR,
             f"{_UPDATE}{_TOOL_CALLS}.{_IN_CONTENT}{_LINK}", EDITOR_URI, _URI),
    Crossing(("session/update",), "notification", TO_EDITOR,
             f"{_UPDATE}{_TOOL_CALLS}.{_IN_CONTENT}{_RESOURCE}", EDITOR_URI, _URI),
    Crossing(("session/update",), "notification", TO_EDITOR, f"{_UPDATE}{_CHUNKS}.{_LINK}",
             EDITOR_URI, _URI),
    Crossing(("session/update",), "notification", TO_EDITOR, f"{_UPDATE}{_CHUNKS}.{_RESOURCE}",
             EDITOR_URI, _URI),
    Crossing(_PERMISSION, "request", TO_EDITOR, "params.toolCall.locations[].path", EDITOR_PATH,
             _PATH),
    Crossing(_PERMISSION, "request", TO_EDITOR, "params.toolCall.content[]{type=diff}.path",
             EDITOR_PATH, _PATH),
    Crossing(_PERMISSION, "request", TO_EDITOR, f"params.toolCall.{_IN_CONTENT}{_LINK}",
             EDITOR_URI, _URI),
    Crossing(_PERMISSION, "request", TO_EDITOR, f"params.toolCall.{_IN_CONTENT}{_RESOURCE}",
             EDITOR_URI, _URI),
)  # fmt: skip
"""The boundary: each place of ACP v1 where a path crosses, and what the relay does there."""

# JSON may spell a method with escapes ("fs\/read_text_file", "\u0066s/..."): an escape of
# '/' or of a lowercase letter may hide a method (METHOD_ESCAPE). A key or value ("loc\u0061tions",
# "tool\u005fcall", "tool\u0043all") may also escape '$', '_' or an uppercase letter. An
# ordinary serializer escapes none of these, so plain text (newlines, quotes, non-ASCII
# letters, Go's \u003c) does not match.
_KEY_ESCAPE = re.compile(rb"\\(?:/|u00(?:2[4fF]|[4-7][0-9a-fA-F]))")
_CANCEL = b'"$/cancel_request"'
_CAPABILITIES = b'"agentCapabilities"'
_ANSWER_MARKERS = (b'"error"',)  # an error answer also ends a pending session/list


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
        and row.message == message
        and files in row.action.policies
        and row.matches(method)
    )


def walk(value: Any, steps: Sequence[Step], where: str = "") -> Iterator[tuple[Any, Any, str]]:
    """Each place ``steps`` lead to in ``value``: (its container, its key or index, its name)."""
    if not steps:
        return
    step, rest = steps[0], steps[1:]
    if isinstance(step, Key):
        if isinstance(value, dict) and step.name in value:
            name = f"{where}.{step.name}" if where else step.name
            if rest:
                yield from walk(value[step.name], rest, name)
            else:
                yield value, step.name, name
    elif isinstance(step, Each):
        if isinstance(value, list):
            for index, item in enumerate(value):
                if rest:
                    yield from walk(item, rest, f"{where}[{index}]")
                else:
                    yield value, index, f"{where}[{index}]"
    elif isinstance(value, dict) and _is_one_of(value.get(step.key), step.values):
        yield from walk(value, rest, where)


def _is_one_of(value: Any, values: frozenset[str]) -> bool:
    return isinstance(value, str) and value in values


@dataclass(frozen=True)
class ToAgent:
    """Send ``reply`` (a JSON-RPC error line, no ``\\n``) back to the agent instead of
    forwarding its line to the editor; ``reason`` is for the log."""

    reply: bytes
    reason: str
    report: RewriteReport


@dataclass
class _Interest:
    """What the byte tests found a line may hold."""

    must: bool  # something the relay must read (refused or answered if it cannot)
    may: bool  # something only translated


_NONE = _Interest(False, False)

COUNTS = (
    "translated_to_agent",
    "translated_to_editor",
    "left_unmapped",
    "withheld",
    "answered_to_agent",
    "refused_to_editor",
    "not_read",
)


@dataclass
class _Work:
    """One message being translated: what changed, and the first refusal, if any."""

    report: RewriteReport
    refused: FrameRefused | ToAgent | None = None
    changed: bool = False


class Boundary:
    """Translates the paths of one connection's messages, both ways (see the module's doc).

    ``policy`` None: nothing is touched. ``exists`` tells whether a box folder exists
    (for ``--cwd-must-exist``). :attr:`counts` keeps what happened, for one summary log
    line per connection (:meth:`summary`, counts only); :attr:`parses` how many lines
    were parsed.
    """

    def __init__(
        self,
        policy: RewritePolicy | None,
        exists: Callable[[str], bool] = lambda _path: True,
        *,
        max_pending_lists: int = MAX_PENDING_LISTS,
    ) -> None:
        self.policy = policy
        self.sessions = SessionRewriter(policy, exists)
        self.exists = exists
        self.max_pending_lists = max_pending_lists
        self.pending: dict[tuple[str, object], str] = {}  # editor request ids -> method
        self.counts: Counter[str] = Counter()
        self.parses = 0
        files: Files = "pass" if policy is None else policy.files
        self.files = files
        self._client_must = markers(TO_AGENT, files, must=True)
        self._client_may = markers(TO_AGENT, files, must=False)
        self._agent_must = markers(TO_EDITOR, files, must=True)
        self._agent_may = markers(TO_EDITOR, files, must=False)
        answers = [
            row for row in CROSSINGS if row.message == "response" and files in row.action.policies
        ]
        self._answered = frozenset(m for row in answers for m in row.methods)
        self._answers = tuple({m for row in answers for m in row.markers}) + _ANSWER_MARKERS
        # One pass of byte tests says whether anything may be there at all (_agent_may_hold).
        self._client_markers = self._client_must + self._client_may
        self._agent_markers = self._agent_must + self._agent_may
        self._client_escape = METHOD_ESCAPE if files == "pass" else _KEY_ESCAPE
        self._agent_escape = None if files == "pass" else _KEY_ESCAPE

    # -- what the pumps call -------------------------------------------------------------

    @property
    def watches_agent(self) -> bool:
        """Whether agent lines must be shown to :meth:`agent_line` at all (False: never
        again, under ``--files pass`` once the agent's ``initialize`` reply was seen)."""
        if self.policy is None:
            return False
        return self.files != "pass" or self.sessions.watches_agent

    def client_line(self, line: bytes) -> bytes | FrameRefused | Rewritten:
        """The line for the agent (``is line`` when unchanged), a refusal to answer the
        editor with, or the translated line and its report."""
        if self.policy is None or not self._client_may_hold(line):
            return line
        interest = self._client_interest(line)
        if not (interest.must or interest.may):
            return line
        message = self._read(line, READ_MAX_BYTES)
        if isinstance(message, strictjson.JsonRefused):
            if interest.must:
                self.counts["refused_to_editor"] += 1
                return unreadable(message, "may be initialize, session/list or open a session")
            self.counts["not_read"] += 1
            return line
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return line  # an answer to the agent, or not a message: nothing crosses here
        return self._from_editor(line, message, message["method"])

    def agent_lines(self, lines: Sequence[bytes]) -> list[bytes | Rewritten | ToAgent] | None:
        """:meth:`agent_line` of each line of one read from the agent, or None when every
        line passes unchanged (nearly always: decided by one look at all of them)."""
        if not lines or not self.watches_agent:
            return None
        if len(lines) == 1 or sum(map(len, lines)) > JOIN_MAX_BYTES:
            if not any(map(self._agent_may_hold, lines)):
                return None
        elif not self._agent_may_hold(b"\n".join(lines)):  # no marker spans a newline
            return None
        results = [self.agent_line(line) for line in lines]
        if all(result is line for result, line in zip(results, lines, strict=True)):
            return None
        return results

    def agent_line(self, line: bytes) -> bytes | Rewritten | ToAgent:
        """The line for the editor (``is line`` when unchanged), the translated line and
        its report, or the relay's answer to send the agent instead."""
        if not self.watches_agent or not self._agent_may_hold(line):
            return line
        interest = self._agent_interest(line)
        if not (interest.must or interest.may):
            return line
        message = self._read(line, len(line) if interest.must else READ_MAX_BYTES)
        if isinstance(message, strictjson.JsonRefused):
            if interest.must:
                return self._unreadable_request(message)
            self.counts["not_read"] += 1
            return line
        if not isinstance(message, dict):
            return line
        method = message.get("method")
        if isinstance(method, str):
            kind: Message = "request" if "id" in message else "notification"
            return self._from_agent(line, message, kind, method)
        return self._answer(line, message)

    def summary(self) -> dict[str, int]:
        """What this connection's boundary did, in counts (never paths): for one log line."""
        out = {name: self.counts[name] for name in COUNTS}
        out["parses"] = self.parses
        return out

    # -- byte tests ------------------------------------------------------------------------

    def _client_may_hold(self, data: bytes) -> bool:
        """False: ``data`` certainly holds nothing the boundary acts on (nearly every line)."""
        for marker in self._client_markers:
            if marker in data:
                return True
        if self.pending and _CANCEL in data:
            return True
        return b"\\" in data and self._client_escape.search(data) is not None

    def _agent_may_hold(self, data: bytes) -> bool:
        """False: ``data`` certainly holds nothing the boundary acts on (nearly every line)."""
        for marker in self._agent_markers:
            if marker in data:
                return True
        if self.pending:
            for marker in self._answers:
                if marker in data:
                    return True
        if self.sessions.watches_agent and _CAPABILITIES in data:
            return True
        escape = self._agent_escape
        return escape is not None and b"\\" in data and escape.search(data) is not None

    def _client_interest(self, line: bytes) -> _Interest:
        escaped = b"\\" in line
        must = any(m in line for m in self._client_must)
        must = must or (escaped and METHOD_ESCAPE.search(line) is not None)
        may = any(m in line for m in self._client_may) or (bool(self.pending) and _CANCEL in line)
        may = may or (escaped and self.files != "pass" and _KEY_ESCAPE.search(line) is not None)
        return _Interest(must, may) if must or may else _NONE

    def _agent_interest(self, line: bytes) -> _Interest:
        escaped = b"\\" in line
        must = any(m in line for m in self._agent_must)
        if self.files != "pass":
            must = must or (escaped and METHOD_ESCAPE.search(line) is not None)
        may = any(m in line for m in self._agent_may)
        may = may or (bool(self.pending) and any(m in line for m in self._answers))
        may = may or (self.sessions.watches_agent and _CAPABILITIES in line)
        may = may or (escaped and self.files != "pass" and _KEY_ESCAPE.search(line) is not None)
        return _Interest(must, may) if must or may else _NONE

    def _read(self, line: bytes, max_bytes: int) -> Any:
        self.parses += 1
        try:
            return strictjson.loads(line, max_bytes=max_bytes)
        except strictjson.JsonRefused as exc:
            return exc

    # -- editor -> agent -------------------------------------------------------------------

    def _from_editor(
        self, line: bytes, message: dict[str, Any], method: str
    ) -> bytes | FrameRefused | Rewritten:
        request = "id" in message
        if method in SESSION_OPENING_METHODS:
            result = self.sessions.rewrite_parsed(line, message)
            if isinstance(result, FrameRefused):
                self.counts["refused_to_editor"] += 1
            elif isinstance(result, Rewritten):
                self.counts["translated_to_agent"] += len(result.report.crossings())
            return result
        if method == "$/cancel_request" and not request:
            self._forget(_param(message, "requestId"))
            return line
        if request and method in self._answered:
            refused = self._remember(message["id"], method)
            if refused is not None:
                return refused
        kind: Message = "request" if request else "notification"
        crossed = self._cross(line, message, TO_AGENT, kind, method)
        assert not isinstance(crossed, ToAgent)  # only the agent's requests are answered so
        if isinstance(crossed, FrameRefused):
            self._forget(message.get("id"))
            self.counts["refused_to_editor"] += 1
        return crossed

    def _remember(self, request_id: Any, method: str) -> FrameRefused | None:
        key = id_key(request_id)
        if key is None:
            return None
        if len(self.pending) >= self.max_pending_lists and key not in self.pending:
            self.counts["refused_to_editor"] += 1
            return _too_many_pending(request_id, method, self.max_pending_lists)
        self.pending[key] = method
        return None

    def _forget(self, request_id: Any) -> str | None:
        key = id_key(request_id)
        return None if key is None else self.pending.pop(key, None)

    # -- agent -> editor -------------------------------------------------------------------

    def _from_agent(
        self, line: bytes, message: dict[str, Any], kind: Message, method: str
    ) -> bytes | Rewritten | ToAgent:
        result = self._cross(line, message, TO_EDITOR, kind, method)
        assert not isinstance(result, FrameRefused)  # only the editor's requests are refused so
        if isinstance(result, ToAgent):
            self.counts["answered_to_agent"] += 1
        return result

    def _answer(self, line: bytes, message: dict[str, Any]) -> bytes | Rewritten:
        if self.sessions.watches_agent and self.sessions.learn_capabilities(message):
            return line
        if not self.pending or "id" not in message:
            return line
        method = self._forget(message["id"])
        if method is None:
            return line
        result = self._from_agent(line, message, "response", method)
        assert not isinstance(result, ToAgent)  # answers are never refused
        return result

    def _unreadable_request(self, problem: strictjson.JsonRefused) -> ToAgent:
        reason = f"an agent line that may be an fs/ or terminal/ request is unreadable: {problem}"
        reply = error_reply(
            -32600,
            "Invalid request: the relay cannot read this request, so it did not pass it on",
            reason,
            "write each request as one JSON object per line, each key once, with valid "
            "Unicode text",
        )
        self.counts["answered_to_agent"] += 1
        return ToAgent(reply, reason, RewriteReport("(unreadable)", refused="(the line)"))

    # -- one row ---------------------------------------------------------------------------

    def _apply(self, row: Crossing, message: dict[str, Any], work: _Work) -> None:
        action = row.action
        if action is ANSWERED:
            work.refused = self._withheld_method(message, work.report)
            return
        if action in (OPENING, MCP):
            return  # the session-opening rewrite did these
        for container, key, where in list(walk(message, parse_field(row.field))):
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
            work.refused = self._refused_filter(message, where, value, result)
        elif result is None and action is REQUEST_PATH:
            work.refused = self._unmapped_request(message, where, value, work.report)
        elif result is None:
            work.report.left.append((where, value))
            self.counts["left_unmapped"] += 1
        elif result.path != value:
            container[key] = result.path
            work.report.translations.append(Translation(where, value, result.path))
            work.changed = True

    def _filter(self, value: str) -> Translated | PathRefused:
        assert self.policy is not None
        result = translate(value, replace(self.policy.cwd, must_exist=False), self.exists)
        if isinstance(result, Translated) and result.rule is not None:
            self.sessions.last_rule = result.rule
        return result

    def _cross(
        self, line: bytes, message: dict[str, Any], direction: Direction, kind: Message, method: str
    ) -> bytes | Rewritten | FrameRefused | ToAgent:
        """The rows of one message carried out: translated whole, or the first refusal."""
        rows = rows_for(direction, kind, method, self.files)
        if not rows:
            return line
        work = _Work(RewriteReport(method))
        for row in rows:
            self._apply(row, message, work)
            if work.refused is not None:
                return work.refused
        if not work.changed:
            return line
        count = "translated_to_agent" if direction == TO_AGENT else "translated_to_editor"
        self.counts[count] += len(work.report.translations)
        return Rewritten(strictjson.dumps(message), work.report)

    # -- the relay's own answers -----------------------------------------------------------

    def _refused_filter(
        self, message: dict[str, Any], where: str, value: str, refused: PathRefused
    ) -> FrameRefused:
        assert self.policy is not None
        name = where.removeprefix("params.")
        return refusal(message.get("id"), PathProblem(name, value, refused), self.policy.cwd)

    def _withheld_method(self, message: dict[str, Any], report: RewriteReport) -> ToAgent:
        method = str(message.get("method"))
        capability = method.split("/")[0]
        report.refused = method
        text = (
            f"Method not found: {method} is not available: the relay withheld the editor's "
            f"{capability} capability (--files box)"
        )
        data = {
            "method": method,
            "withheld": capability,
            "files": "box",
            "hint": "use the box's own filesystem and terminal (the session's cwd is a folder "
            "of the box); to use the editor's instead, the relay's operator sets --files "
            "shared and maps the folders with --cwd-map",
        }
        reply = _error(message.get("id"), -32601, text, data)
        return ToAgent(reply, f"{method} answered by the relay: {capability} withheld", report)

    def _unmapped_request(
        self, message: dict[str, Any], where: str, value: str, report: RewriteReport
    ) -> ToAgent:
        method = str(message.get("method"))
        rules = self.policy.cwd.rules if self.policy is not None else ()
        shown = _shown(value)
        report.refused = where
        report.left.append((where, value))
        text = (
            f"Invalid params: {where} {shown} is not under a folder the relay maps to the "
            "editor's machine (--cwd-map), so the editor cannot use it"
        )
        data = {
            "method": method,
            "field": where,
            "boxPath": shown,
            "mappings": [rule.text for rule in rules] or ["none"],
            "hint": "use a path under one of the mapped folders (after '=' in each mapping), "
            "or read, write and run it with the box's own tools; the relay's operator can add "
            "a --cwd-map rule for it",
        }
        reply = _error(message.get("id"), -32602, text, data)
        return ToAgent(
            reply, f"{method} answered by the relay: {where} is under no mapping", report
        )


def id_key(request_id: Any) -> tuple[str, object] | None:
    """A request id as the key it is matched by: a string as it is, a number by its value
    (``1E2`` and ``100`` are one id); None for an id the relay does not track."""
    if isinstance(request_id, str):
        return ("s", request_id)
    if isinstance(request_id, strictjson.Number):
        try:
            return ("n", Decimal(request_id.text))
        except InvalidOperation:
            return None
    return None


def _param(message: dict[str, Any], name: str) -> Any:
    params = message.get("params")
    return params.get(name) if isinstance(params, dict) else None


def _offers(capability: Any) -> bool:
    """Whether a capability value offers anything (absent, false, null and {} do not)."""
    if capability is None or capability is False:
        return False
    if isinstance(capability, dict):
        return any(v is not None and v is not False for k, v in capability.items() if k != "_meta")
    return True


def _shown(text: str) -> str:
    """``text`` as echoed in an error: bounded."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}…({len(text)} chars)"


def _error(request_id: Any, code: int, message: str, data: dict[str, Any]) -> bytes:
    error = {"code": code, "message": message, "data": data}
    return strictjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def _too_many_pending(request_id: Any, method: str, limit: int) -> FrameRefused:
    reason = f"{limit} {method} requests of this connection are still waiting for the agent"
    data = {"detail": reason, "hint": f"wait for the answers to earlier {method} requests"}
    message = f"Invalid request: too many {method} requests waiting for an answer"
    return FrameRefused(_error(request_id, -32600, message, data), reason)


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


_POLICY_ORDER: tuple[Files, ...] = ("box", "shared", "pass")
