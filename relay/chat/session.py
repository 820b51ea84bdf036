"""One thread's ACP client: the session it opens, its prompts and turns, what the agent asks.

Pure. The bot is the client of one agent session per thread: it sends ``initialize``
(no filesystem nor terminal offered: the box's agent keeps its own), then ``session/new``
with the configured ``cwd``; each prompt is a ``session/prompt`` (queued, bounded, while
a turn runs). What the agent writes comes in line by line (:meth:`ChatSession.agent_line`)
and becomes a :class:`Step`: lines to send back, a permission request to show, the
session's failure. Its updates go to the thread's :class:`relay.chat.turns.TurnView`.
Agent requests the chat cannot serve (``fs/*``, ``terminal/*``, anything else) are
answered with ``-32601``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from relay.acp.refusals import id_key
from relay.chat.permissions import Request, read_request, request_of, request_state
from relay.chat.text import safe_line
from relay.chat.turns import Thoughts, TurnView
from relay.core import strictjson

MAX_QUEUED = 16  # prompts waiting for the turn that runs
MAX_LINE_BYTES = 8 << 20  # a longer agent line is not read (it is shown as skipped)
PERMISSION = "session/request_permission"
ANSWERED = "_acp-relay/answered"


@dataclass
class Step:
    """What one event asks of the thread's I/O."""

    send: list[bytes] = field(default_factory=list)  # lines to the agent, in order
    requests: list[Request] = field(default_factory=list)  # permission requests to show
    answered: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)  # (id, params)
    failed: str | None = None  # the session cannot go on: why
    cancelled: list[Request] = field(default_factory=list)  # to answer `cancelled` (a cancel)


class ChatSession:
    """The ACP client of one thread: its requests, its queue of prompts, its turns."""

    def __init__(self, cwd: str, *, version: str, thoughts: Thoughts = "folded") -> None:
        self.cwd = cwd
        self.version = version
        self.view = TurnView(thoughts)
        self.session_id: str | None = None
        self.next_id = 1
        self.waiting: dict[Any, str] = {}  # our requests' keys -> method
        self.queue: deque[str] = deque()
        self.queued_by: deque[str | None] = deque()  # who wrote each queued prompt
        self.turn_by: str | None = None  # who prompted the turn that runs (self-approval)
        self.turn_running = False
        self.asked: list[Request] = []  # the permission requests of the turn that runs

    # -- the thread asks ----------------------------------------------------------------

    def start(self) -> Step:
        """The first line: ``initialize``."""
        params = {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False},
                                   "terminal": False},
            "clientInfo": {"name": "acp-relay-chat", "version": self.version},
        }  # fmt: skip
        return Step(send=[self._request("initialize", params)])

    def prompt(self, text: str, by: str | None = None) -> Step:
        """``by``'s prompt: sent now, or queued while a turn runs (the thread is told)."""
        if self.session_id is not None and not self.turn_running:
            return Step(send=[self._prompt(text, by)])
        if len(self.queue) >= MAX_QUEUED:
            self.view.note(f"⚠️ {MAX_QUEUED} prompts already wait: this one was not queued.")
            return Step()
        self.queue.append(text)
        self.queued_by.append(by)
        if self.turn_running:
            self.view.note(f"⏳ Queued: it goes to the agent after this turn ({len(self.queue)} "
                           "waiting).")  # fmt: skip
        return Step()

    def cancel(self) -> Step:
        """``session/cancel`` for the turn that runs (queued prompts are dropped too), and
        every permission request of the turn to be answered ``cancelled``, as ACP asks of a
        client that cancels (those already decided stay as they are)."""
        dropped = len(self.queue)
        self.queue.clear()
        self.queued_by.clear()
        if not self.turn_running or self.session_id is None:
            self.view.note("No turn runs: nothing to cancel.")
            return Step()
        more = f" ({dropped} queued prompts dropped)" if dropped else ""
        self.view.note(f"⏹ Cancelling the turn{more}.")
        params = {"sessionId": self.session_id}
        cancel = _line({"jsonrpc": "2.0", "method": "session/cancel", "params": params})
        asked, self.asked = self.asked, []
        return Step(send=[cancel], cancelled=asked)

    def snapshot(self) -> dict[str, Any]:
        """Everything this session's client holds, as JSON values (for the state file)."""
        return {
            "session": self.session_id, "next": self.next_id, "queue": list(self.queue),
            "running": self.turn_running, "view": self.view.snapshot(),
            "by": self.turn_by, "queued_by": list(self.queued_by),
            "waiting": [[k, str(v), method] for (k, v), method in self.waiting.items()],
            "asked": [request_state(request) for request in self.asked],
        }  # fmt: skip

    def restore(self, kept: dict[str, Any]) -> None:
        """Back to what :meth:`snapshot` kept."""
        self.session_id, self.next_id = kept["session"], kept["next"]
        self.queue = deque(kept["queue"])
        self.turn_running = kept["running"]
        self.turn_by = kept.get("by")
        by = list(kept.get("queued_by", []))
        self.queued_by = deque(by + [None] * (len(self.queue) - len(by)))
        self.waiting = {
            (kind, Decimal(value) if kind == "n" else value): method
            for kind, value, method in kept["waiting"]
        }
        self.view.restore(kept["view"])
        self.asked = [request_of(state) for state in kept.get("asked", [])]

    # -- the agent says -------------------------------------------------------------------

    def agent_line(self, line: bytes) -> Step:
        """One line the agent wrote."""
        try:
            message = strictjson.loads(line, max_bytes=MAX_LINE_BYTES)
        except strictjson.JsonRefused as exc:
            self.view.note(f"⚠️ The agent wrote a line that is not readable JSON ({exc}).")
            return Step()
        if not isinstance(message, dict):
            return Step()
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                return self._agent_request(message, method)
            return self._notification(message, method)
        return self._response(message)

    def _agent_request(self, message: dict[str, Any], method: str) -> Step:
        if method == PERMISSION:
            request = read_request(message)
            if request is not None:
                self.asked.append(request)
                return Step(requests=[request])
            return Step(send=[_error(message["id"], -32602, "a permission request without "
                                     "options cannot be answered from the chat")])  # fmt: skip
        return Step(send=[_error(message["id"], -32601, f"the chat does not serve {method}")])

    def _notification(self, message: dict[str, Any], method: str) -> Step:
        params = message.get("params")
        if method == "session/update" and isinstance(params, dict):
            self.view.update(params.get("update"))
        elif method == ANSWERED and isinstance(params, dict):
            return Step(answered=[(params.get("id"), params)])
        return Step()

    def _response(self, message: dict[str, Any]) -> Step:
        method = self.waiting.pop(id_key(message.get("id")), None)
        if method is None:
            return Step()
        error = message.get("error")
        result = message.get("result")
        if method == "initialize":
            if error is not None:
                return Step(failed=f"the agent refused initialize: {_error_text(error)}")
            params = {"cwd": self.cwd, "mcpServers": []}
            return Step(send=[self._request("session/new", params)])
        if method == "session/new":
            session = result.get("sessionId") if isinstance(result, dict) else None
            if error is not None or not isinstance(session, str):
                why = _error_text(error) if error is not None else "no sessionId"
                return Step(failed=f"the agent could not open a session: {why}")
            self.session_id = session
            return self._next_prompt()
        if method == "session/prompt":
            self.turn_running = False
            self.asked.clear()
            if error is not None:
                self.view.note(f"⚠️ The turn failed: {_error_text(error)}")
            else:
                reason = result.get("stopReason") if isinstance(result, dict) else None
                self.view.end_turn(reason if isinstance(reason, str) else "unknown")
            return self._next_prompt()
        return Step()

    # -- lines ----------------------------------------------------------------------------------

    def _next_prompt(self) -> Step:
        if self.queue and not self.turn_running and self.session_id is not None:
            by = self.queued_by.popleft() if self.queued_by else None
            return Step(send=[self._prompt(self.queue.popleft(), by)])
        return Step()

    def _prompt(self, text: str, by: str | None) -> bytes:
        self.turn_running = True
        self.turn_by = by
        self.view.start_turn()
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}
        return self._request("session/prompt", params)

    def _request(self, method: str, params: dict[str, Any]) -> bytes:
        request_id = self.next_id
        self.next_id += 1
        self.waiting[id_key(request_id)] = method
        return _line({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def _line(message: dict[str, Any]) -> bytes:
    return strictjson.dumps(message)


def _error(request_id: Any, code: int, message: str) -> bytes:
    return _line({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return "an error"
    message = error.get("message")
    code = error.get("code")
    code_text = code.text if isinstance(code, strictjson.Number) else str(code)
    return f"{safe_line(message if isinstance(message, str) else 'error')} ({code_text})"
