"""The vocabulary of a conversation as a person follows it: each value what one line
changed (:class:`Change`), as :class:`relay.acp.conversation.Conversation` reads them.

Pure: values only. Every surface that shows a session to a person renders these: a turn
(:class:`Prompted` to :class:`TurnEnded`), the words within it (:class:`Said`), tool calls
(:class:`ToolCall`, :class:`ToolCallChanged`), the plan, the mode, the usage, the agent's
commands, permission requests and their answers (:class:`PermissionAsked`,
:class:`PermissionAnswered`, :class:`AnswerTaken`), the relay's notices on the controller,
and anything else as what it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Side = Literal["client", "agent"]
Speaker = Literal["user", "agent", "thought"]


@dataclass(frozen=True)
class ToolCall:
    """What is known of one tool call (None: the agent has not said)."""

    tool_id: str
    title: str | None = None
    kind: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class Option:
    """One option of a permission request, as the agent named it ("" where it did not)."""

    option_id: str
    name: str
    kind: str


@dataclass(frozen=True)
class PlanEntry:
    content: str
    status: str


# -- what changed ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Unreadable:
    """A line that is too large, not JSON, or not a JSON-RPC message (``why``: which)."""

    why: Literal["large", "json", "rpc"]
    size: int
    detail: str = ""


@dataclass(frozen=True)
class Prompted:
    """The client asked for a turn: its prompt's content blocks (as written)."""

    request_id: Any
    blocks: list[Any]


@dataclass(frozen=True)
class Said:
    """A chunk of words: the agent's, its thoughts, or the person's (a replay).
    ``belongs_to`` tells chunks of one message from the next (session, message id)."""

    speaker: Speaker
    content: Any
    belongs_to: tuple[str, str]


@dataclass(frozen=True)
class ToolCallChanged:
    """A tool call's ``tool_call`` (``started``) or update; ``changed`` when its title,
    kind or status is new (else only its content or locations changed)."""

    call: ToolCall
    started: bool
    changed: bool


@dataclass(frozen=True)
class Planned:
    """The plan as it now reads: ``form`` "items" (``entries``, of ``total``), "markdown"
    or "file" (``text``: the markdown or the file's uri), or a form not known here."""

    form: Any
    entries: tuple[PlanEntry, ...] = ()
    total: int = 0
    text: str = ""


@dataclass(frozen=True)
class ModeChanged:
    mode_id: str


@dataclass(frozen=True)
class UsageChanged:
    used: str
    size: str


@dataclass(frozen=True)
class CommandsChanged:
    names: tuple[str, ...]


@dataclass(frozen=True)
class Updated:
    """Another session update (``kind`` as sent)."""

    kind: Any
    update: dict[str, Any]


@dataclass(frozen=True)
class PermissionAsked:
    """The agent asks permission for a tool call (its title and kind as the request or
    the call's own updates said); ``message`` is the request as sent."""

    request_id: Any
    title: str
    kind: str
    options: tuple[Option, ...]
    total: int
    message: dict[str, Any] = field(compare=False)


@dataclass(frozen=True)
class PermissionAnswered:
    """A side answered a permission request: ``result``, or ``error`` when ``failed``."""

    request_id: Any
    options: dict[str, str]
    result: dict[str, Any]
    failed: bool = False
    error: Any = None


@dataclass(frozen=True)
class AnswerTaken:
    """The relay says which answer a permission request took (``by``: the controller's
    or a watcher's, ``subject``: the answerer's ticket)."""

    request_id: Any
    by: str
    subject: str
    options: dict[str, str]
    result: dict[str, Any]
    failed: bool = False
    error: Any = None


@dataclass(frozen=True)
class TurnEnded:
    """The prompt's answer: the stop reason, or ``error`` when ``failed``."""

    request_id: Any
    stop_reason: str | None
    failed: bool = False
    error: Any = None


@dataclass(frozen=True)
class Requested:
    """Another request (``side``: who asks)."""

    side: Side
    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Replied:
    """The answer to another request (``method``: the request's, when remembered)."""

    request_id: Any
    method: str | None
    result: dict[str, Any]
    failed: bool = False
    error: Any = None


@dataclass(frozen=True)
class Notified:
    """Another notification."""

    side: Side
    method: str


@dataclass(frozen=True)
class ControllerDetached:
    reason: str
    grace: Any


@dataclass(frozen=True)
class ControllerResumed:
    pass


@dataclass(frozen=True)
class RelayNotice:
    """Another notice of the relay's (``error``: it refused what a watcher sent)."""

    method: Any
    failed: bool = False
    error: Any = None


Change = (
    Unreadable
    | Prompted
    | Said
    | ToolCallChanged
    | Planned
    | ModeChanged
    | UsageChanged
    | CommandsChanged
    | Updated
    | PermissionAsked
    | PermissionAnswered
    | AnswerTaken
    | TurnEnded
    | Requested
    | Replied
    | Notified
    | ControllerDetached
    | ControllerResumed
    | RelayNotice
)
