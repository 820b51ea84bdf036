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
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from relay.acp.refusals import id_key
from relay.chat.attachments import (
    Attachment,
    PromptCapabilities,
    attachment_of,
    attachment_state,
    capabilities_of,
    refusal,
)
from relay.chat.controls import (
    Asked,
    Change,
    Controls,
    Refused,
    applied,
    asked_of,
    asked_state,
    change,
    commands_text,
    controls_of_session,
    controls_of_state,
    controls_state,
    settings_line,
    updated,
    usage_text,
)
from relay.chat.earlier import CANNOT_BRING_BACK, Offered, bringing_back, offered_of
from relay.chat.permissions import Request, read_request, request_of, request_state
from relay.chat.rpc import error_line, error_text, line_of
from relay.chat.text import safe_line
from relay.chat.turns import Thoughts, TurnView
from relay.core import strictjson

MAX_QUEUED = 16  # prompts waiting for the turn that runs
MAX_LINE_BYTES = 8 << 20  # a longer agent line is not read (it is shown as skipped)
PERMISSION = "session/request_permission"
REPLAY_BYTES = 256 * 1024  # of an earlier session's history shown when it is loaded
WAIT_FOR_THE_TURN = (
    "⏳ A prompt with files is sent between turns: send it again once this turn ends (the "
    "files stay attached)."
)
CHANGES = ("session/set_mode", "session/set_model", "session/set_config_option")
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
        self.queue: deque[str | dict[str, Any]] = deque()  # prompts, and changes ({"set": …})
        self.queued_by: deque[str | None] = deque()  # who wrote each queued prompt
        self.turn_by: str | None = None  # who prompted the turn that runs (self-approval)
        self.turn_running = False
        self.asked: list[Request] = []  # the permission requests of the turn that runs
        self.controls = Controls()  # the mode, options, commands and usage the agent offers
        self.changing: tuple[str, Asked] | None = None  # a change sent, awaited: words, what
        self.capabilities = PromptCapabilities()  # what a prompt may hold beyond text
        self.offered = Offered()  # what the agent offers for earlier sessions
        self.resuming: str | None = None  # an earlier session to bring back, not yet back
        self.replayed = 0  # bytes of history the agent replayed, shown (bounded)
        self.skipped = 0  # updates of that history past the bound, not shown
        self.attached: list[Attachment] = []  # files waiting for the next prompt

    # -- the thread asks ----------------------------------------------------------------

    def start(self) -> Step:
        """The first line: ``initialize``."""
        params = {
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": {"readTextFile": False, "writeTextFile": False},
                "terminal": False,
            },
            "clientInfo": {"name": "acp-relay-chat", "version": self.version},
        }
        return Step(send=[self._request("initialize", params)])

    def attach(self, attachment: Attachment, limit: int) -> None:
        """A file or image sent in the thread: it joins the next prompt, or is refused."""
        why = refusal(attachment, self.capabilities, limit, len(self.attached))
        if why is not None:
            self.view.note(f"⚠️ Not attached: {why}.")
            return
        self.attached.append(attachment)
        self.view.note(f"📎 {attachment.name} joins the next prompt.")

    def take_attached(self) -> list[Attachment]:
        """The files waiting for the next prompt, which no longer wait."""
        attached, self.attached = self.attached, []
        return attached

    @property
    def idle(self) -> bool:
        """Whether a prompt would be sent now (a session open, nothing running)."""
        return not self._busy()

    def prompt(
        self, text: str, by: str | None = None, blocks: Sequence[dict[str, Any]] = ()
    ) -> Step:
        """``by``'s prompt: sent now, or queued while a turn runs (the thread is told);
        ``blocks`` (attachments, fetched: only ever given while idle) follow its text."""
        if blocks and self._busy():  # files were fetched for an idle session: not queued
            self.view.note(WAIT_FOR_THE_TURN)
            return Step()
        if not self._busy():
            return Step(send=[self._prompt(text, by, blocks)])
        if len(self.queue) >= MAX_QUEUED:
            self.view.note(f"⚠️ {MAX_QUEUED} prompts already wait: this one was not queued.")
            return Step()
        self.queue.append(text)
        self.queued_by.append(by)
        if self.turn_running:
            self.view.note(
                f"⏳ Queued: it goes to the agent after this turn ({len(self.queue)} waiting)."
            )
        return Step()

    def change(self, asked: Asked, by: str) -> Step:
        """``by`` asks to change a control (``!mode``, ``!model``, ``!set``): checked against
        what the agent offers, then sent between turns (queued during one, in order with
        the prompts)."""
        checked = change(self.controls, self.session_id or "", asked)
        if isinstance(checked, Refused) and self.session_id is not None:
            self.view.note(f"⚠️ {checked.why}")  # (before the session opens: checked then)
            return Step()
        if self._busy() or isinstance(checked, Refused):
            if len(self.queue) >= MAX_QUEUED:
                self.view.note(f"⚠️ {MAX_QUEUED} prompts already wait: this change was not queued.")
                return Step()
            self.queue.append(asked_state(asked))
            self.queued_by.append(by)
            if self.turn_running:
                self.view.note(
                    f"⏳ Queued: {asked.control} → {safe_line(asked.value)}, after this turn."
                )
            return Step()
        return Step(send=[self._change(checked, asked, by)])

    def usage(self) -> None:
        """``!usage``: what the session has used, as the agent last said."""
        usage = self.controls.usage
        self.view.note(
            usage_text(usage) if usage else "The agent has not said what this session uses."
        )

    def _busy(self) -> bool:
        return self.session_id is None or self.turn_running or self.changing is not None

    def _change(self, checked: Change, asked: Asked, by: str) -> bytes:
        self.changing = (f"{checked.words} (by {safe_line(by, 255)})", asked)
        return self._request(checked.method, checked.params)

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
        cancel = line_of({"jsonrpc": "2.0", "method": "session/cancel", "params": params})
        asked, self.asked = self.asked, []
        return Step(send=[cancel], cancelled=asked)

    def snapshot(self) -> dict[str, Any]:
        """Everything this session's client holds, as JSON values (for the state file)."""
        return {
            "session": self.session_id,
            "next": self.next_id,
            "queue": list(self.queue),
            "running": self.turn_running,
            "view": self.view.snapshot(),
            "by": self.turn_by,
            "queued_by": list(self.queued_by),
            "controls": controls_state(self.controls),
            "capabilities": [self.capabilities.image, self.capabilities.embedded_context],
            "resuming": self.resuming,
            "attached": [attachment_state(a) for a in self.attached],
            "changing": None
            if self.changing is None
            else [self.changing[0], *asked_state(self.changing[1])["set"]],
            "waiting": [[k, str(v), method] for (k, v), method in self.waiting.items()],
            "asked": [request_state(request) for request in self.asked],
        }

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
        self.controls = controls_of_state(kept.get("controls"))
        self.capabilities = PromptCapabilities(*kept.get("capabilities", [False, False]))
        self.resuming = kept.get("resuming")
        self.attached = [attachment_of(a) for a in kept.get("attached", [])]
        changing = kept.get("changing")
        self.changing = None
        if isinstance(changing, list):
            self.changing = (changing[0], asked_of({"set": changing[1:]}))

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
            return Step(
                send=[
                    error_line(
                        message["id"],
                        -32602,
                        "a permission request without options cannot be answered from the chat",
                    )
                ]
            )
        return Step(send=[error_line(message["id"], -32601, f"the chat does not serve {method}")])

    def _notification(self, message: dict[str, Any], method: str) -> Step:
        params = message.get("params")
        if method == "session/update" and isinstance(params, dict):
            self._update(params.get("update"))
        elif method == ANSWERED and isinstance(params, dict):
            return Step(answered=[(params.get("id"), params)])
        return Step()

    def _update(self, update: Any) -> None:
        """A ``session/update``: the controls' own, or what the turn shows (a replayed
        history within :data:`REPLAY_BYTES`)."""
        controls = updated(self.controls, update) if isinstance(update, dict) else None
        if controls is not None:
            self._controls(controls)
            return
        if self.resuming is not None and not self._replay_within(update):
            return
        self.view.update(update)

    def _replay_within(self, update: Any) -> bool:
        """Whether a replayed update is still within the history's bound (else counted)."""
        if self.replayed > REPLAY_BYTES:
            self.skipped += 1
            return False
        content = update.get("content") if isinstance(update, dict) else None
        text = content.get("text") if isinstance(content, dict) else None
        self.replayed += len(text) if isinstance(text, str) else 64
        return True

    def _controls(self, controls: Controls) -> None:
        """The controls as the agent now says: their lines edited where they changed."""
        self.controls = controls
        if controls.offered():
            self.view.session_line("settings", settings_line(controls))
        if controls.commands:
            self.view.session_line("commands", commands_text(controls.commands))

    def _response(self, message: dict[str, Any]) -> Step:
        method = self.waiting.pop(id_key(message.get("id")), None)
        if method is None:
            return Step()
        error = message.get("error")
        result = message.get("result")
        if method == "initialize":
            if error is not None:
                return Step(failed=f"the agent refused initialize: {error_text(error)}")
            self.capabilities = capabilities_of(result)
            self.offered = offered_of(result)
            params = {"cwd": self.cwd, "mcpServers": []}
            if self.resuming is None:
                return Step(send=[self._request("session/new", params)])
            method = bringing_back(self.offered)
            if method is None:
                return Step(failed=CANNOT_BRING_BACK)
            params["sessionId"] = self.resuming
            return Step(send=[self._request(method, params)])
        if method in ("session/load", "session/resume"):
            return self._brought_back(method, error, result)
        if method == "session/new":
            session = result.get("sessionId") if isinstance(result, dict) else None
            if error is not None or not isinstance(session, str):
                why = error_text(error) if error is not None else "no sessionId"
                return Step(failed=f"the agent could not open a session: {why}")
            self.session_id = session
            assert isinstance(result, dict)  # it has a sessionId
            self._controls(controls_of_session(result, self.controls))
            return self._next_prompt()
        if method == "session/prompt":
            self.turn_running = False
            self.asked.clear()
            if error is not None:
                self.view.note(f"⚠️ The turn failed: {error_text(error)}")
            else:
                reason = result.get("stopReason") if isinstance(result, dict) else None
                used = usage_text(self.controls.usage) if self.controls.usage else ""
                self.view.end_turn(reason if isinstance(reason, str) else "unknown", used)
            return self._next_prompt()
        if method in CHANGES:
            return self._changed(method, error, result)
        return Step()

    def _brought_back(self, method: str, error: Any, result: Any) -> Step:
        """An earlier session is back (``session/load`` replayed it, within bounds), or
        the agent could not bring it back (the thread ends, saying why)."""
        session, self.resuming = self.resuming or "", None
        if error is not None:
            return Step(
                failed=f"the agent could not bring back session {safe_line(session)}: "
                f"{error_text(error)}"
            )
        self.session_id = session
        if isinstance(result, dict):
            self._controls(controls_of_session(result, self.controls))
        if method == "session/resume":
            self.view.note(
                f"↩ Session {safe_line(session)} is back (resumed: the agent does "
                "not replay it here)."
            )
        else:
            skipped = f" (the rest of its history, {self.skipped} updates, not shown)"
            self.view.note(
                f"↩ Session {safe_line(session)} is back, its history above"
                f"{skipped if self.skipped else ''}."
            )
        self.replayed = self.skipped = 0
        return self._next_prompt()

    def _changed(self, method: str, error: Any, result: Any) -> Step:
        """The agent's answer to a change: the thread records the decision (who, what), or
        says why the agent refused it; then the next queued prompt or change."""
        if self.changing is None:
            return self._next_prompt()
        (words, asked), self.changing = self.changing, None
        if error is not None:
            self.view.note(f"⚠️ The agent refused {words}: {error_text(error)}")
            return self._next_prompt()
        self.view.note(f"⚙️ {words}")
        answered = isinstance(result, dict) and isinstance(result.get("configOptions"), list)
        if answered and method == "session/set_config_option":
            self._controls(controls_of_session(result, self.controls))
        else:  # the agent's update may follow: until then, what it accepted
            self._controls(applied(self.controls, asked))
        return self._next_prompt()

    # -- lines ----------------------------------------------------------------------------------

    def _next_prompt(self) -> Step:
        """The next queued prompt, or change, once nothing runs."""
        while self.queue and not self._busy():
            item, by = self.queue.popleft(), self.queued_by.popleft() if self.queued_by else None
            if isinstance(item, str):
                return Step(send=[self._prompt(item, by)])
            checked = change(self.controls, self.session_id or "", asked_of(item))
            if isinstance(checked, Change):
                return Step(send=[self._change(checked, asked_of(item), by or "")])
            self.view.note(f"⚠️ {checked.why}")
        return Step()

    def _prompt(self, text: str, by: str | None, blocks: Sequence[dict[str, Any]] = ()) -> bytes:
        self.turn_running = True
        self.turn_by = by
        self.view.start_turn()
        said = [{"type": "text", "text": text}] if text or not blocks else []
        params = {"sessionId": self.session_id, "prompt": [*said, *blocks]}
        return self._request("session/prompt", params)

    def _request(self, method: str, params: dict[str, Any]) -> bytes:
        request_id = self.next_id
        self.next_id += 1
        self.waiting[id_key(request_id)] = method
        return line_of({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
