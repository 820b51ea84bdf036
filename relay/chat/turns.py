"""What a thread shows of a turn: the agent's words, thoughts, tool calls, plans, the end.

Pure. The agent's ``session/update`` notifications come in one by one, read by the
conversation model every surface shares (:mod:`relay.acp.conversation`); the thread is a
set of messages (slots), each showing its latest state, edited in place as it changes:

- the turn's words: one message, its ``agent_message_chunk`` texts joined, continued in a
  next message when one would pass an event's size (nothing is cut);
- its thoughts (``agent_thought_chunk``): one message folded under "Thinking", or none
  (``--thoughts hidden``), or shown as they are (``shown``);
- each tool call: one line with its title, kind and status;
- the plan: a checklist (or the agent's markdown), one message per turn;
- the end of the turn: its stop reason.

:meth:`TurnView.take` hands out the slots changed since the last call, in the order the
slots were first made: the caller sends a new message for a new slot and an edit for one
it has shown. Everything the agent wrote is made safe (:mod:`relay.chat.text`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

from relay.acp.changes import (
    Change,
    Planned,
    Said,
    ToolCall,
    ToolCallChanged,
)
from relay.acp.conversation import Conversation
from relay.acp.values import text_of
from relay.chat.text import (
    CONTENT_BYTES,
    fit_bytes,
    prefix_within,
    safe,
    safe_line,
    text_size,
    to_html,
)

Thoughts = Literal["folded", "hidden", "shown"]
WORDS_PAGE_BYTES = (CONTENT_BYTES - 1024) // 2  # an edit carries the text twice
THOUGHTS_BYTES = 12000
SAID_BYTES = 4000  # of a person's message an agent replays
PLAN_MARKS = {"pending": "☐", "in_progress": "◐", "completed": "☑"}
STATUS_MARKS = {"pending": "⏳", "in_progress": "🔄", "completed": "✅", "failed": "❌"}
PLAN_BYTES = 12000  # of a plan in markdown


@dataclass(frozen=True)
class Shown:
    """One message of the thread as it should read now."""

    slot: str
    body: str
    html: str | None = None
    msgtype: str = "m.notice"


class TurnView:
    """One thread's turns as messages: the latest state of each slot, and what changed."""

    def __init__(self, thoughts: Thoughts = "folded") -> None:
        self.thoughts = thoughts
        self.turn = 0
        self.pages: list[str] = []  # this turn's words, page by page
        self._page_bytes = 0
        self.thought = ""
        self.said = ""  # what the person said, as an agent replays an earlier session
        self.conversation = Conversation()  # what the thread shows, read from the lines
        self.plan: list[tuple[str, str]] = []
        self._order: OrderedDict[str, None] = OrderedDict()  # slots, in the order made
        self._changed: set[str] = set()
        self._frozen: dict[str, Shown] = {}  # slots that will not change again
        # Slots handed out by take() whose round has not shown them yet: a snapshot taken
        # meanwhile (another round's, an agent line's) keeps them as changed, so that a bot
        # killed before they are shown shows them after its restart.
        self._in_flight: dict[str, Shown] = {}
        self._notes = 0
        self._lines: dict[str, Shown] = {}  # the session's own lines, edited in place

    # -- what comes in ------------------------------------------------------------------

    def start_turn(self) -> None:
        """A prompt went to the agent: a new turn's messages begin (the last turn's changes
        not yet handed out are kept as they read now)."""
        for slot in self._changed:
            if slot not in self._lines:  # the session's lines live on across turns
                self._frozen[slot] = self._render(slot)
        self.turn += 1
        self.pages, self._page_bytes, self.thought, self.plan = [], 0, "", []
        self.said = ""

    def update(self, update: Any) -> None:
        """One ``session/update``'s ``update`` object, read by the conversation model."""
        self.show(self.conversation.session_update(update))

    def show(self, change: Change) -> None:
        """What the conversation model says changed, as this thread shows it (the rest of
        its vocabulary is the caller's to show: a prompt, a turn's end, a request)."""
        match change:
            case Said(speaker="user", content=content):  # a replay: each of the person's a turn
                if self.pages or self.thought or self.turn == 0:
                    self.start_turn()
                self.said = fit_bytes(self.said + _chunk_text(content), SAID_BYTES)
                self._touch(f"{self.turn}.said")
            case Said(speaker="agent", content=content):
                self._words(_chunk_text(content))
            case Said(speaker="thought", content=content) if self.thoughts != "hidden":
                self.thought += _chunk_text(content)
                self._touch(f"{self.turn}.thoughts")
            case ToolCallChanged(call=call) if call.tool_id:
                self._touch(f"tool.{call.tool_id}")
            case Planned():
                self._plan(change)

    def end_turn(self, stop_reason: str, usage: str = "") -> None:
        """The turn ended (the prompt's answer): a line with its stop reason, and what the
        session has used when the agent said (``usage``, already safe)."""
        used = f" · {usage}" if usage else ""
        self.note(f"⏹ End of turn: {safe_line(stop_reason, 80)}{used}", slot=f"{self.turn}.end")

    def session_line(self, name: str, text: str) -> None:
        """A line of the session's own (its settings, its commands: ``text`` already safe),
        one message edited in place whenever it changes, across turns."""
        slot = f"session.{name}"
        if slot in self._lines and self._lines[slot].body == text:
            return
        self._lines[slot] = Shown(slot, text, to_html(text))
        self._touch(slot)

    def note(self, text: str, *, slot: str | None = None) -> str:
        """A line of the bot's own (``text`` already safe) in a new message; its slot."""
        if slot is None:
            self._notes += 1
            slot = f"note.{self._notes}"
        self._frozen[slot] = Shown(slot, text, to_html(text))
        self._touch(slot)
        return slot

    # -- what goes out --------------------------------------------------------------------

    def take(self) -> list[Shown]:
        """The slots changed since the last call, in the order they were first made."""
        changed = [slot for slot in self._order if slot in self._changed]
        self._changed.clear()
        shown = [self._render(slot) for slot in changed]
        self._in_flight.update((each.slot, each) for each in shown)
        for slot in [slot for slot in self._order if not self._live(slot)]:
            del self._order[slot]  # it will not change again: remember it no more
            self._frozen.pop(slot, None)
        return shown

    def shown(self, slots: list[str]) -> None:
        """The round that took ``slots`` has shown them (or given up on them)."""
        for slot in slots:
            self._in_flight.pop(slot, None)

    @property
    def tools(self) -> OrderedDict[str, ToolCall]:
        """The tool calls the conversation knows, by id."""
        return self.conversation.tools

    @property
    def pending(self) -> bool:
        """Whether something changed that :meth:`take` has not handed out."""
        return bool(self._changed)

    def is_live(self, slot: str) -> bool:
        """Whether ``slot`` may still change (else it can be forgotten once shown)."""
        return slot in self._order

    def _live(self, slot: str) -> bool:
        """Whether ``slot`` may change again: a tool call still known, this turn's words,
        thoughts and plan."""
        if slot.startswith("tool."):
            return slot[5:] in self.tools
        if slot.startswith("session."):
            return True
        return slot not in self._frozen and slot.startswith(f"{self.turn}.")

    # -- kept across a restart ----------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything this view holds, as JSON values (for the state file)."""
        return {
            "turn": self.turn,
            "pages": self.pages,
            "page_bytes": self._page_bytes,
            "thought": self.thought,
            "plan": self.plan,
            "notes": self._notes,
            "said": self.said,
            "tools": [[k, t.title, t.kind, t.status] for k, t in self.tools.items()],
            "order": list(self._order),
            "changed": sorted(self._changed),
            "frozen": [[s.slot, s.body, s.html, s.msgtype] for s in self._frozen.values()],
            "flight": [[s.slot, s.body, s.html, s.msgtype] for s in self._in_flight.values()],
            "lines": [[s.slot, s.body] for s in self._lines.values()],
        }

    def restore(self, kept: dict[str, Any]) -> None:
        """Back to what :meth:`snapshot` kept."""
        self.turn, self.pages = kept["turn"], list(kept["pages"])
        self._page_bytes, self.thought = kept["page_bytes"], kept["thought"]
        self.said = kept.get("said", "")
        self.plan = [(content, status) for content, status in kept["plan"]]
        self._notes = kept["notes"]
        self.conversation.tools = OrderedDict(
            (k, ToolCall(k, t, kind, s)) for k, t, kind, s in kept["tools"]
        )
        self._order = OrderedDict.fromkeys(kept["order"])
        self._changed = set(kept["changed"])
        self._frozen = {
            slot: Shown(slot, body, html, kind) for slot, body, html, kind in kept["frozen"]
        }
        self._lines = {
            slot: Shown(slot, body, to_html(body)) for slot, body in kept.get("lines", [])
        }
        for slot, body, html, kind in kept.get("flight", []):  # taken, maybe not shown
            if slot not in self._order:  # not live: its last words are these
                self._frozen[slot] = Shown(slot, body, html, kind)
                self._order[slot] = None
            self._changed.add(slot)

    # -- the slots --------------------------------------------------------------------------

    def _touch(self, slot: str) -> None:
        self._order.setdefault(slot, None)
        self._changed.add(slot)

    def _words(self, text: str) -> None:
        """Append to the turn's words: onto the last page, then on new ones."""
        text = safe(text)
        while text:
            if not self.pages or self._page_bytes >= WORDS_PAGE_BYTES:
                self.pages.append("")
                self._page_bytes = 0
            room = WORDS_PAGE_BYTES - self._page_bytes
            size = text_size(text)
            take = text if size <= room else prefix_within(text, room)
            if not take:  # a character that does not fit the page: start the next one
                self._page_bytes = WORDS_PAGE_BYTES
                continue
            self.pages[-1] += take
            self._page_bytes += text_size(take) if take is not text else size
            self._touch(f"{self.turn}.words.{len(self.pages)}")
            text = text[len(take) :]

    def _plan(self, plan: Planned) -> None:
        if plan.form == "items":
            self.plan = [(entry.content, entry.status) for entry in plan.entries]
        elif plan.form in ("markdown", "file"):
            self.plan = [(plan.text, plan.form)]
        else:
            return
        self._touch(f"{self.turn}.plan")

    def _render(self, slot: str) -> Shown:
        if slot in self._lines:
            return self._lines[slot]
        if slot in self._frozen:
            return self._frozen[slot]
        part = slot.split(".", 2)
        if slot.startswith("tool."):
            return _tool_call(slot, self.tools.get(slot[5:]))
        if len(part) == 3 and part[1] == "words":
            page = self.pages[int(part[2]) - 1]
            return Shown(slot, page or "…", None, "m.text")
        if len(part) == 2 and part[1] == "thoughts":
            return self._thoughts(slot)
        if len(part) == 2 and part[1] == "said":
            body = f"🗨 {safe(self.said)}"
            return Shown(slot, body, to_html(body))
        if len(part) == 2 and part[1] == "plan":
            body = "\n".join(["📋 Plan", *map(_plan_entry, self.plan)])
            return Shown(slot, body, to_html(body))
        return Shown(slot, "…")

    def _thoughts(self, slot: str) -> Shown:
        text = fit_bytes(safe(self.thought), THOUGHTS_BYTES)
        if self.thoughts == "shown":
            return Shown(slot, f"💭 {text}", to_html(f"💭 {text}"))
        html = f"<details><summary>💭 Thinking</summary>{to_html(text)}</details>"
        return Shown(slot, f"💭 Thinking: {text}", html)


def _tool_call(slot: str, call: ToolCall | None) -> Shown:
    if call is None:
        return Shown(slot, "🔧 (a tool call)")
    title = safe_line(call.title if call.title is not None else "a tool call", 200)
    kind = safe_line(call.kind if call.kind is not None else "other", 40)
    status = safe_line(call.status if call.status is not None else "pending", 40)
    body = f"🔧 {title} · {kind} · {STATUS_MARKS.get(status, '•')} {status}"
    return Shown(slot, body, to_html(body))


def _plan_entry(entry: tuple[str, str]) -> str:
    content, status = entry
    if status == "markdown":
        return fit_bytes(safe(content), PLAN_BYTES)
    if status == "file":
        return f"in {safe_line(content, 300)}"
    return f"{PLAN_MARKS.get(status, '•')} {safe_line(content, 300)}"


def _chunk_text(content: Any) -> str:
    if isinstance(content, dict):
        if content.get("type") == "text":
            return text_of(content.get("text"))
        return f"[{safe_line(text_of(content.get('type')) or '?', 40)}]"
    return ""
