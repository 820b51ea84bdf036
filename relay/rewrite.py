"""The one place where the relay touches message contents: session-opening requests.

Pure. Client-to-agent lines pass through this module; only lines whose raw bytes
could hold a session-opening method (``session/new``, ``session/load``,
``session/resume``, ``session/fork``) are ever parsed. Until a rewrite is configured
(cwd mapping, MCP server injection) every line passes unchanged.
"""

from __future__ import annotations

from relay.framing import FrameRefused

SESSION_OPENING_METHODS = ("session/new", "session/load", "session/resume", "session/fork")
_MARKER = b'"session/'


def might_open_session(line: bytes) -> bool:
    """Cheap test on raw bytes: False means the line certainly opens no session."""
    return _MARKER in line and any(m.encode() in line for m in SESSION_OPENING_METHODS)


class SessionRewriter:
    """Rewrites session-opening requests of one connection; the identity when unconfigured."""

    def client_line(self, line: bytes) -> bytes | FrameRefused:
        """Return the line to send to the agent, or a refusal to answer the client with."""
        return line
