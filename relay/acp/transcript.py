"""A watched conversation as text for a terminal: what ``acp-relay watch`` prints.

Pure: the frames of the watch profile in (read by :func:`relay.core.watchprofile.read_frame`),
text out. Each line of the conversation becomes what a person wants to see of it: the
user's prompts, the agent's words (its ``agent_message_chunk`` updates joined into
paragraphs, its thoughts marked as such), tool calls with their title, kind and status as
they change, permission requests with their options and the answers they got, plans, and
the relay's own ``_acp-relay/`` notices. Anything else gets one short line naming it.

The conversation is read by the one model every surface shares
(:mod:`relay.acp.conversation`); here is how each of its changes reads on a terminal.
Everything shown of the conversation is escaped (:func:`relay.core.printable.escaped`): an
agent's text cannot move the cursor or retitle the terminal. What one frame produces is
bounded: a line is parsed up to :data:`MAX_PARSED_BYTES`, each text is cut at
:data:`MAX_TEXT_CHARS` (names at :data:`MAX_NAME_CHARS`), each list at :data:`MAX_ITEMS`.
"""

from __future__ import annotations

from typing import Any

from relay.acp.changes import (
    AnswerTaken,
    Change,
    CommandsChanged,
    ControllerDetached,
    ControllerResumed,
    ModeChanged,
    Notified,
    PermissionAnswered,
    PermissionAsked,
    Planned,
    Prompted,
    RelayNotice,
    Replied,
    Requested,
    Side,
    ToolCallChanged,
    TurnEnded,
    Unreadable,
    Updated,
    UsageChanged,
)
from relay.acp.changes import Said as SaidChunk
from relay.acp.conversation import MAX_LINE_BYTES as MAX_PARSED_BYTES
from relay.acp.conversation import Conversation
from relay.acp.showing import (
    AGENT_REQUESTS,
    CLIENT_REQUESTS,
    INDENT,
    MAX_ITEMS,
    MAX_NAME_CHARS,
    RESULTS,
    UPDATES,
    blocks_text,
    cut,
    decoded,
    error_text,
    id_text,
    listed,
    more_of,
    name_text,
    outcome_text,
)
from relay.core.watchprofile import Frame, Opening, Origin, Said, Told

__all__ = ["MAX_PARSED_BYTES", "Transcript"]

PLAN_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
CHUNK_LABELS = {"user": "user", "agent": "agent", "thought": "thought"}
# Who said a line, by the frame's from; who answered a permission request, by the notice's by.
WHO = {
    Origin.CONTROLLER.value: "client",
    Origin.AGENT.value: "agent",
    Origin.WATCHER.value: "a watcher",
}
BY = {Origin.CONTROLLER.answerer: "the controller", Origin.WATCHER.answerer: "a watcher"}
CLOSE_WORDS = {
    1000: "the connection ended",
    1001: "the relay is shutting down",
    4429: "fell behind",
}


class Transcript:
    """The text of one watched conversation, frame by frame: the conversation model
    (:class:`relay.acp.conversation.Conversation`) reads each line, this renders what
    changed (and keeps the open paragraph)."""

    def __init__(self) -> None:
        self.conversation = Conversation()
        self._paragraph: tuple[str, Any] | None = None  # (label, what the chunks belong to)
        self._at_line_start = True
        self._history_left = 0

    def show(self, frame: Frame) -> str:
        """The text for ``frame`` (ending without a newline while a paragraph is open)."""
        if isinstance(frame, Opening):
            return self._opening(frame)
        if isinstance(frame, Said):
            text = self._said(frame)
            if self._history_left:
                self._history_left -= 1
                if not self._history_left:
                    text += self._line("-- live --")
            return text
        if isinstance(frame, Told):
            return self._told(self.conversation.notice(frame.message))
        return self._line(f"-- a frame that is not the watch profile's: {cut(frame.why)} --")

    def closed(self, code: int, reason: str) -> str:
        """The last line: how the relay closed the socket (in words of its own when the
        relay gave none)."""
        reason = reason or CLOSE_WORDS.get(code, "")
        why = f"{cut(reason)} ({code})" if reason else f"({code})"
        hint = "; attach again with a new ticket" if code == 4429 else ""
        return self._line(f"-- closed: {why}{hint} --")

    def lost(self, why: str) -> str:
        """The last line when the socket was lost (no close from the relay)."""
        return self._line(f"-- lost: {cut(why)} --")

    def stopped(self) -> str:
        """The last line when the watch was stopped here (Ctrl-C)."""
        return self._line("-- stopped --")

    # -- the first frame -------------------------------------------------------------------

    def _opening(self, frame: Opening) -> str:
        self._history_left = frame.messages
        dropped = f"; {frame.dropped} older ones no longer kept" if frame.dropped else ""
        head = f"-- watching connection {cut(frame.connection, MAX_NAME_CHARS)}: "
        if frame.messages:
            return self._line(f"{head}the conversation so far ({frame.messages} lines{dropped}) --")
        return self._line(f"{head}nothing said yet{dropped}; live --")

    # -- lines of the conversation ---------------------------------------------------------

    def _said(self, said: Said) -> str:
        who = WHO.get(said.origin) or cut(said.origin, MAX_NAME_CHARS)
        # The client's side of the conversation asks too: the controller, and the watchers.
        side: Side = "agent" if said.origin == Origin.AGENT.value else "client"
        change = self.conversation.line(side, said.line)
        match change:
            case Unreadable(why="large"):
                return self._line(f"{who}: (a line of {len(said.line)} bytes, too large to show)")
            case Unreadable(why="json", detail=detail):
                why = cut(detail, MAX_NAME_CHARS)
                return self._line(f"{who}: (not JSON: {why}) {cut(decoded(said.line), 200)}")
            case Unreadable():
                return self._line(f"{who}: (not a JSON-RPC message) {cut(decoded(said.line), 200)}")
            case Prompted(blocks=blocks):
                return self._block("user", blocks_text(blocks))
            case Requested(side="client", method=method, params=params):
                shown = CLIENT_REQUESTS.get(method)
                return self._line(f"client: {shown(params) if shown else name_text(method)}")
            case Requested(method=method, params=params):
                shown = AGENT_REQUESTS.get(method)
                return self._line(f"{who} asks {shown(params) if shown else name_text(method)}")
            case PermissionAsked():
                return self._permission_asked(change)
            case Notified(side="client", method="session/cancel"):
                return self._line("client: cancel the turn")
            case Notified(method=method):
                return self._line(f"{who}: {name_text(method)} (notification)")
            case PermissionAnswered() | TurnEnded() | Replied():
                return self._answer(who, change)
        return self._update(change)

    def _answer(self, who: str, change: PermissionAnswered | TurnEnded | Replied) -> str:
        method = _answered_method(change)
        what = name_text(method) if method else f"request {id_text(change.request_id)}"
        if change.failed:
            return self._line(f"{who}: error answering {what}: {error_text(change.error)}")
        if isinstance(change, PermissionAnswered):
            chosen = outcome_text(change.result, change.options)
            return self._line(f"{who} answered permission {id_text(change.request_id)}: {chosen}")
        if isinstance(change, TurnEnded):
            return self._line(
                f"{who}: end of turn ({cut(change.stop_reason or '', MAX_NAME_CHARS)})"
            )
        shown = RESULTS.get(method) if method else None
        return self._line(f"{who}: {shown(change.result) if shown else 'answered ' + what}")

    # -- session/update --------------------------------------------------------------------

    def _update(self, change: Change) -> str:
        match change:
            case SaidChunk(speaker=speaker, content=content, belongs_to=belongs_to):
                return self._chunk(CHUNK_LABELS[speaker], belongs_to, blocks_text([content]))
            case ToolCallChanged():
                return self._tool_call(change)
            case Planned():
                return self._plan(change)
            case ModeChanged(mode_id=mode):
                return self._line(f"agent: mode is now {cut(mode, MAX_NAME_CHARS)}")
            case UsageChanged(used=used, size=size):
                used, size = cut(used, MAX_NAME_CHARS), cut(size, MAX_NAME_CHARS)
                return self._line(f"agent: context used: {used} of {size} tokens")
            case CommandsChanged(names=names):
                return self._line("agent: commands: " + listed(["/" + name for name in names]))
            case Updated(kind=kind, update=update):
                shown = UPDATES.get(kind) if isinstance(kind, str) else None
                if shown is not None:
                    return self._line(f"agent: {shown(update)}")
                return self._line(f"agent: session update {name_text(kind)}")
        return self._line(f"-- {name_text(type(change).__name__)} --")  # not a line's change

    def _tool_call(self, change: ToolCallChanged) -> str:
        if not change.changed and not change.started:
            return ""  # only its content or locations changed
        call = change.call
        title = call.title if call.title is not None else f"tool call {call.tool_id}"
        kind = f" [{cut(call.kind, MAX_NAME_CHARS)}]" if call.kind else ""
        status = call.status if call.status is not None else "pending"
        return self._line(f"tool: {cut(title, MAX_NAME_CHARS)}{kind} {cut(status, MAX_NAME_CHARS)}")

    def _permission_asked(self, asked: PermissionAsked) -> str:
        kind = f" [{cut(asked.kind, MAX_NAME_CHARS)}]" if asked.kind else ""
        title = cut(asked.title, MAX_NAME_CHARS) if asked.title else "a tool call"
        lines = [f"agent asks permission: {title}{kind}"]
        for option in asked.options[:MAX_ITEMS]:
            details = ", ".join(
                cut(text, MAX_NAME_CHARS) for text in (option.kind, option.option_id)
            )
            lines.append(f"{INDENT}- {cut(option.name, MAX_NAME_CHARS)} ({details})")
        lines.extend(more_of(asked.total))
        return self._line("\n".join(lines))

    def _plan(self, plan: Planned) -> str:
        if plan.form == "items":
            lines = ["plan:"]
            for entry in plan.entries[:MAX_ITEMS]:
                mark = PLAN_MARKS.get(entry.status, "[?]")
                lines.append(f"{INDENT}{mark} {cut(entry.content, MAX_NAME_CHARS)}")
            lines.extend(more_of(plan.total))
            return self._line("\n".join(lines) if plan.total else "plan: (empty)")
        if plan.form == "markdown":
            return self._block("plan", cut(plan.text, keep="\n\t"))
        if plan.form == "file":
            return self._line(f"plan: in {cut(plan.text, MAX_NAME_CHARS)}")
        return self._line(f"plan: {name_text(plan.form)}")

    # -- the relay's own -------------------------------------------------------------------

    def _told(self, change: Change) -> str:
        match change:
            case Unreadable(detail=detail):
                return self._line(f"relay: (not JSON: {cut(detail, MAX_NAME_CHARS)})")
            case AnswerTaken():
                return self._line(f"relay: {self._taken(change)}")
            case ControllerDetached(reason=reason, grace=grace):
                waits = (
                    f"; the connection waits {id_text(grace)} s for it" if grace is not None else ""
                )
                return self._line(
                    f"relay: the controller detached ({cut(reason, MAX_NAME_CHARS)}){waits}"
                )
            case ControllerResumed():
                return self._line("relay: the controller resumed")
            case RelayNotice(failed=True, error=error):
                return self._line(f"relay: refused what this watcher sent: {error_text(error)}")
            case RelayNotice(method=method):
                return self._line(f"relay: {name_text(method)}")
        return self._line(f"relay: {name_text(type(change).__name__)}")

    def _taken(self, taken: AnswerTaken) -> str:
        by = cut(BY.get(taken.by, taken.by), MAX_NAME_CHARS)
        who = f"{by} ({cut(taken.subject, MAX_NAME_CHARS)})" if taken.subject else by
        if taken.failed:
            chosen = f"error: {error_text(taken.error)}"
        else:
            chosen = outcome_text(taken.result, taken.options)
        return f"permission {id_text(taken.request_id)} answered first by {who}: {chosen}"

    # -- text ------------------------------------------------------------------------------

    def _line(self, text: str) -> str:
        """A whole line (or lines, the later ones indented by their maker)."""
        return self._end_paragraph() + text + "\n"

    def _block(self, label: str, text: str) -> str:
        """A paragraph of its own: ``label: text``, its later lines indented."""
        body = text.strip("\n").replace("\n", "\n" + INDENT)
        return self._line(f"{label}: {body}")

    def _chunk(self, label: str, belongs_to: Any, text: str) -> str:
        """A piece of a paragraph: joined to the open one when it is the same speaker's."""
        opening = ""
        if self._paragraph != (label, belongs_to):
            opening = self._end_paragraph() + f"{label}: "
            self._paragraph = (label, belongs_to)
            self._at_line_start = False
        return opening + self._flow(text)

    def _flow(self, text: str) -> str:
        """``text`` within the open paragraph, each new line indented once it has text."""
        out = []
        for n, piece in enumerate(text.split("\n")):
            if n:
                out.append("\n")
                self._at_line_start = True
            if piece:
                out.append(INDENT + piece if self._at_line_start else piece)
                self._at_line_start = False
        return "".join(out)

    def _end_paragraph(self) -> str:
        if self._paragraph is None:
            return ""
        self._paragraph = None
        ended = "" if self._at_line_start else "\n"
        self._at_line_start = True
        return ended


def _answered_method(change: PermissionAnswered | TurnEnded | Replied) -> str | None:
    if isinstance(change, PermissionAnswered):
        return "session/request_permission"
    if isinstance(change, TurnEnded):
        return "session/prompt"
    return change.method
