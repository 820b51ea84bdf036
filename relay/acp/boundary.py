"""The filesystem boundary of one connection: every place a path crosses, carried out.

Pure. :class:`Boundary` carries out the table of :mod:`relay.acp.crossings` (each place
of ACP v1 where a path or a ``file:`` URI crosses) for one connection, on each line both
ways:

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
JSON escape that could spell one); streamed message text is never parsed. A line only
translated (no row of it must be read) is read within ``READ_MAX_VALUES`` values and
translated within ``TRANSLATE_MAX_PLACES`` places; past either it passes as it came. A
line the relay must read is read whole: the editor's is refused past ``READ_MAX_VALUES``
values (none of its requests holds as many), an agent's is read whatever it holds, by
the caller away from its event loop when it may hold more (:meth:`Boundary.costly_reads`,
:func:`read_lines`). A translated line is re-serialized by :mod:`relay.core.strictjson`:
ids and numbers as spelled, every other field and its order kept. A message is
translated whole or not at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from relay.acp.crossings import (
    CANCEL,
    CAPABILITIES,
    JOIN_MAX_BYTES,
    KEY_ESCAPE,
    MAX_PENDING_LISTS,
    READ_MAX_BYTES,
    READ_MAX_VALUES,
    TO_AGENT,
    TO_EDITOR,
    Message,
    may_hold_too_many_values,
)
from relay.acp.lineplan import NONE, Interest, plan_for
from relay.acp.readsearch import found_in, found_in_read, holds_any
from relay.acp.refusals import (
    ToAgent,
    batch_request,
    id_key,
    too_many_pending,
    too_many_values,
    unreadable_request,
)
from relay.acp.rewrite import (
    METHOD_ESCAPE,
    SESSION_OPENING_METHODS,
    Files,
    RewritePolicy,
    Rewritten,
    SessionRewriter,
    unreadable,
)
from relay.acp.toolcalls import ToolCallPaths
from relay.acp.translating import MessageTranslator
from relay.core import strictjson
from relay.core.framing import FrameRefused

_NOT_READ = object()

# ``marker in line`` on bytes first tries the marker as an integer, making and dropping a
# TypeError each time (CPython 3.11): the byte tests use find(), and a code for one byte.
_BACKSLASH = 0x5C

COUNTS = (
    "translated_to_agent",
    "translated_to_editor",
    "left_unmapped",
    "withheld",
    "answered_to_agent",
    "refused_to_editor",
    "not_read",
    "over_cap",
)


class Boundary:
    """Translates the paths of one connection's messages, both ways (see the module's doc).

    ``policy`` None: nothing is touched. ``exists`` tells whether a box folder exists
    (for ``--cwd-must-exist``); ``resolve`` is the box's ``os.path.realpath``, by which
    the path of an agent's request under ``shared`` is refused when its symbolic links
    lead out of its rule's folder (the default knows no links). :attr:`counts` keeps what
    happened, for one summary log line per connection (:meth:`summary`, counts only);
    :attr:`parses` how many lines were parsed.
    """

    def __init__(
        self,
        policy: RewritePolicy | None,
        exists: Callable[[str], bool] = lambda _path: True,
        *,
        resolve: Callable[[str], str] = lambda path: path,
        max_pending_lists: int = MAX_PENDING_LISTS,
    ) -> None:
        self.policy = policy
        self.sessions = SessionRewriter(policy, exists)
        self.max_pending_lists = max_pending_lists
        self.pending: dict[tuple[str, object], str] = {}  # editor request ids -> method
        self.counts: Counter[str] = Counter()
        self.parses = 0
        files = Files.PASS if policy is None else policy.files
        self.files = files
        self._plan = plan_for(files)  # shared by every connection under the same policy
        self._client_seek = self._plan.client_seek.search
        self._translator = MessageTranslator(
            policy, files, self.sessions, exists, resolve, self.counts
        )
        self._crossing = files is not Files.PASS  # more than the session-opening rewrite
        self._tool_calls: ToolCallPaths | None = None
        if policy is not None and self._crossing:
            self._tool_calls = ToolCallPaths(policy.cwd.rules, self.sessions, self.counts)
        self._client_escape = KEY_ESCAPE if self._crossing else METHOD_ESCAPE
        self._agent_escape = KEY_ESCAPE if self._crossing else None
        self._read_ahead: dict[bytes, Any] | None = None  # during agent_lines(lines, read)

    # -- what the pumps call -------------------------------------------------------------

    @property
    def watches_agent(self) -> bool:
        """Whether agent lines must be shown to :meth:`agent_line` at all (False: never
        again, under ``--files pass`` once the agent's ``initialize`` reply was seen)."""
        if self.policy is None:
            return False
        return self._crossing or self.sessions.watches_agent

    def client_line(self, line: bytes) -> bytes | FrameRefused | Rewritten:
        """The line for the agent (``is line`` when unchanged), a refusal to answer the
        editor with, or the translated line and its report."""
        if self.policy is None:
            return line
        if self._client_seek(line) is None and not self._client_may_hold(line):
            return line  # nearly every line: one search
        interest = self._client_interest(line)
        if not (interest.must or interest.may):
            return line
        if may_hold_too_many_values(line):
            if not interest.must:
                self.counts["over_cap"] += 1
                return line
            if len(line) <= READ_MAX_BYTES:  # a longer one is refused for its size, unread
                self.counts["refused_to_editor"] += 1
                return too_many_values(READ_MAX_VALUES)
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

    def costly_reads(self, lines: Sequence[bytes]) -> list[bytes]:
        """The lines of one read that :meth:`agent_lines` would read in full although they
        may hold more than ``READ_MAX_VALUES`` values: requests the relay must read
        (``fs/*``, ``terminal/*``), bounded by their size alone. Their parse is the one
        whose cost a line's values, not a cap, decide: the caller makes it elsewhere
        (:func:`read_lines`) and hands it to :meth:`agent_lines`. Nearly always empty,
        after one look at the lines' lengths."""
        if not lines or max(map(len, lines)) <= READ_MAX_VALUES or not self.watches_agent:
            return []
        return [line for line in lines if may_hold_too_many_values(line) and self._must(line)]

    def agent_lines(
        self, lines: Sequence[bytes], read: dict[bytes, Any] | None = None
    ) -> list[bytes | Rewritten | ToAgent] | None:
        """:meth:`agent_line` of each line of one read from the agent, or None when every
        line passes unchanged (nearly always: decided by one look at all of them).

        ``read``: what :func:`read_lines` made of the read's :meth:`costly_reads`, used
        instead of reading them again."""
        if not lines or not self.watches_agent:
            return None
        if read:
            self._read_ahead = read
            try:
                return self._agent_lines(lines)
            finally:
                self._read_ahead = None
        return self._agent_lines(lines)

    def _agent_lines(self, lines: Sequence[bytes]) -> list[bytes | Rewritten | ToAgent] | None:
        if len(lines) == 1 or sum(map(len, lines)) > JOIN_MAX_BYTES:
            if not any(map(self._agent_may_hold, lines)):
                return None
        elif not self._read_may_hold(lines):
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
        if not interest.must and may_hold_too_many_values(line):
            self.counts["over_cap"] += 1
            return line  # only translated: passes as it came; a line to be read is read
        if not interest.must and self._tool_calls is not None:
            taken = self._tool_calls.line(line)  # a tool call's paths, without the walk
            if taken is not None:
                self.parses += 1
                return taken
        message = self._read(line, len(line) if interest.must else READ_MAX_BYTES)
        if isinstance(message, strictjson.JsonRefused):
            if interest.must:
                self.counts["answered_to_agent"] += 1
                return unreadable_request(message)
            self.counts["not_read"] += 1
            return line
        if isinstance(message, list) and interest.must:
            self.counts["answered_to_agent"] += 1
            return batch_request()  # ACP has no batches: what it holds is not passed on
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
        """False: ``data``, in which the plan's search found nothing, certainly holds nothing
        the boundary acts on (nearly every line)."""
        if self.pending and data.find(CANCEL) != -1:
            return True
        return _BACKSLASH in data and self._client_escape.search(data) is not None

    def _agent_may_hold(self, data: bytes) -> bool:
        """False: ``data`` certainly holds nothing the boundary acts on (nearly every line)."""
        seek = self._plan.agent_seek(bool(self.pending), self.sessions.watches_agent)
        return found_in(data, seek, self._agent_escape)

    def _read_may_hold(self, lines: Sequence[bytes]) -> bool:
        """:meth:`_agent_may_hold` of a read's lines joined by newlines (no marker spans one),
        the start the lines share (a stream's structure up to its text) searched once."""
        pending, capabilities = bool(self.pending), self.sessions.watches_agent
        seek = self._plan.agent_seek(pending, capabilities)
        markers = self._plan.agent_markers(pending, capabilities)
        return found_in_read(lines, seek, markers, self._agent_escape)

    def _client_interest(self, line: bytes) -> Interest:
        escaped = line.find(_BACKSLASH) != -1
        must = holds_any(line, self._plan.client_must)
        must = must or (escaped and METHOD_ESCAPE.search(line) is not None)
        may = holds_any(line, self._plan.client_may)
        may = may or (bool(self.pending) and line.find(CANCEL) != -1)
        may = may or (escaped and self._crossing and KEY_ESCAPE.search(line) is not None)
        return Interest(must, may) if must or may else NONE

    def _agent_interest(self, line: bytes) -> Interest:
        escaped = line.find(_BACKSLASH) != -1
        must = holds_any(line, self._plan.agent_must)
        if self._crossing:
            must = must or (escaped and METHOD_ESCAPE.search(line) is not None)
        may = holds_any(line, self._plan.agent_may)
        may = may or (bool(self.pending) and holds_any(line, self._plan.answers))
        may = may or (self.sessions.watches_agent and line.find(CAPABILITIES) != -1)
        may = may or (escaped and self._crossing and KEY_ESCAPE.search(line) is not None)
        return Interest(must, may) if must or may else NONE

    def _must(self, line: bytes) -> bool:
        """Whether the relay must read the agent's ``line`` (an fs/ or terminal/ message)."""
        return self._agent_may_hold(line) and self._agent_interest(line).must

    def _read(self, line: bytes, max_bytes: int) -> Any:
        self.parses += 1
        if self._read_ahead is not None and len(line) <= max_bytes:
            # popped: a translation changes the message it was given
            ahead = self._read_ahead.pop(line, _NOT_READ)
            if ahead is not _NOT_READ:
                return ahead
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
        if request and method in self._plan.answered:
            refused = self._remember(message["id"], method)
            if refused is not None:
                return refused
        kind: Message = "request" if request else "notification"
        crossed = self._translator.cross(line, message, TO_AGENT, kind, method)
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
            return too_many_pending(request_id, method, self.max_pending_lists)
        self.pending[key] = method
        return None

    def _forget(self, request_id: Any) -> str | None:
        key = id_key(request_id)
        return None if key is None else self.pending.pop(key, None)

    # -- agent -> editor -------------------------------------------------------------------

    def _from_agent(
        self, line: bytes, message: dict[str, Any], kind: Message, method: str
    ) -> bytes | Rewritten | ToAgent:
        result = self._translator.cross(line, message, TO_EDITOR, kind, method)
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


def _param(message: dict[str, Any], name: str) -> Any:
    params = message.get("params")
    return params.get(name) if isinstance(params, dict) else None


def read_lines(lines: Sequence[bytes]) -> dict[bytes, Any]:
    """Each line's value, or the JsonRefused it met: the reads :meth:`Boundary.agent_lines`
    would make of a read's :meth:`Boundary.costly_reads`, made beforehand (by the caller
    off the event loop; pure, holding no connection's state)."""
    read: dict[bytes, Any] = {}
    for line in lines:
        try:
            read[line] = strictjson.loads(line, max_bytes=len(line))
        except strictjson.JsonRefused as exc:
            read[line] = exc
    return read
