"""What ``acp-relay chat`` runs with, resolved from its flags, environment and files."""

from __future__ import annotations

from dataclasses import dataclass, field

from relay.chat.access import Access
from relay.chat.limits import Limits
from relay.chat.rules import Policy
from relay.chat.turns import Thoughts
from relay.client.link.dialing import DialConfig


@dataclass(frozen=True)
class ChatConfig:
    """What the bot needs, resolved (the token read from its file or the environment)."""

    homeserver: str
    user: str
    token: str
    rooms: frozenset[str]
    access: Access
    dial: DialConfig
    cwd: str
    state: str
    thoughts: Thoughts = "folded"
    policy: Policy = field(default_factory=Policy)  # approval rules, timeouts, escalation
    edit_interval: float = 1.0
    watch_ticket_command: tuple[str, ...] | None = None  # given a connection id: a watcher's ticket
    connect_command: tuple[str, ...] | None = None  # prints "URL TICKET" for each new thread
    limits: Limits = field(default_factory=Limits)
    keep_ended_days: float = 30.0  # ended threads and decided requests, then forgotten
    audit_retention_days: float = 365.0  # the audit's records, then forgotten
    max_attachment_bytes: int = 8 << 20  # an image or file that joins a prompt
    pickle_key: str | None = None  # given: encrypted rooms served (chat-e2ee)
    crypto_state: str = ""  # where the room keys are kept
