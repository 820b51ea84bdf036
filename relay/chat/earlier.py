"""The agent's earlier sessions: listed for the bot's folder, and how one is brought back.

Pure. ``@bot sessions`` asks the agent, on a connection of its own, for its sessions in
the bot's ``--cwd`` (``session/list``, when its ``sessionCapabilities`` offer ``list``):
:class:`SessionLister` is that short exchange, line by line. ``@bot resume SESSION_ID``
and ``!reopen`` bring a session back in a thread: :func:`bringing_back` chooses
``session/resume`` when offered, else ``session/load``, and says so when the agent offers
neither. What cannot be done because the agent does not offer it is said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from relay.acp.refusals import id_key
from relay.acp.values import list_of, text_of
from relay.chat.text import safe_line, to_html
from relay.core import strictjson

MAX_LISTED = 20  # sessions a list shows (the agent's first page)
MAX_LINE_BYTES = 1 << 20  # an answer to session/list read up to this


@dataclass(frozen=True)
class Listed:
    """One earlier session, as the agent lists it."""

    session_id: str
    title: str
    updated_at: str


@dataclass(frozen=True)
class Offered:
    """What the agent offers for coming back to a session (its ``initialize`` answer)."""

    load: bool = False
    resume: bool = False
    listing: bool = False


def offered_of(result: Any) -> Offered:
    """The agent's ``loadSession`` and ``sessionCapabilities`` ``resume``/``list``."""
    agent = result.get("agentCapabilities") if isinstance(result, dict) else None
    agent = agent if isinstance(agent, dict) else {}
    sessions = agent.get("sessionCapabilities")
    sessions = sessions if isinstance(sessions, dict) else {}
    return Offered(
        load=agent.get("loadSession") is True,
        resume=isinstance(sessions.get("resume"), dict),
        listing=isinstance(sessions.get("list"), dict),
    )


def bringing_back(offered: Offered) -> str | None:
    """The method that brings a session back: resume, else load; None when neither."""
    if offered.resume:
        return "session/resume"
    if offered.load:
        return "session/load"
    return None


CANNOT_BRING_BACK = (
    "this agent cannot bring back a session: it offers neither session/resume nor session/load"
)


def valid_session_id(text: str) -> bool:
    """A session id as a person may type it: printable, no spaces, bounded."""
    return 0 < len(text) <= 200 and text.isprintable() and not any(c.isspace() for c in text)


class SessionLister:
    """``session/list`` for ``cwd`` on a connection of its own: initialize, then the list."""

    def __init__(self, cwd: str, version: str) -> None:
        self.cwd = cwd
        self.version = version

    def start(self) -> bytes:
        params = {
            "protocolVersion": 1,
            "clientCapabilities": {},
            "clientInfo": {"name": "acp-relay-chat", "version": self.version},
        }
        return _request(1, "initialize", params)

    def line(self, line: bytes) -> bytes | list[Listed] | str | None:
        """One agent line: the next line to send, the sessions, why there are none, or
        nothing (a line of no interest)."""
        try:
            message = strictjson.loads(line, max_bytes=MAX_LINE_BYTES)
        except strictjson.JsonRefused:
            return None
        if not isinstance(message, dict) or "method" in message:
            return None
        error, result = message.get("error"), message.get("result")
        answered = id_key(message.get("id"))
        if answered == id_key(1):
            if error is not None or not offered_of(result).listing:
                return "this agent does not list its sessions (no session/list)"
            return _request(2, "session/list", {"cwd": self.cwd})
        if answered == id_key(2):
            if error is not None:
                what = error.get("message") if isinstance(error, dict) else None
                return f"the agent refused session/list: {safe_line(text_of(what) or 'error')}"
            return listed_of(result)
        return None


def listed_of(result: Any) -> list[Listed]:
    """The sessions of a ``session/list`` answer, read leniently, the first page only."""
    sessions = result.get("sessions") if isinstance(result, dict) else None
    return [
        Listed(text_of(s.get("sessionId")), text_of(s.get("title")), text_of(s.get("updatedAt")))
        for s in list_of(sessions)[:MAX_LISTED]
        if isinstance(s, dict) and valid_session_id(text_of(s.get("sessionId")))
    ]


def sessions_text(cwd: str, listed: Sequence[Listed], bot: str) -> tuple[str, str]:
    """The list as the room reads it (plain text, HTML), with how to resume one."""
    if not listed:
        words = f"The agent has no earlier session in {safe_line(cwd)}."
        return words, to_html(words)
    head = f"🗂 The agent's sessions in {safe_line(cwd)}:"
    lines = [
        f"• {safe_line(s.session_id)}"
        + (f" — {safe_line(s.title, 120)}" if s.title else "")
        + (f" ({safe_line(s.updated_at, 40)})" if s.updated_at else "")
        for s in listed
    ]
    foot = f"Bring one back in a new thread: {safe_line(bot)} resume SESSION_ID"
    body = "\n".join([head, *lines, foot])
    return body, "<br>".join(to_html(line) for line in [head, *lines, foot])


def _request(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    return strictjson.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    )
