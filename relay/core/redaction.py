"""What never reaches a log line or a trace: query-string values, bearer tokens, secrets.

Pure: text in, text out. A :class:`Redactor` holds the secrets of one process (the relay's
or one ``connect``'s): its own secrets (ticket secrets, the console's token, the values of
the MCP servers file) for as long as it lives, and the tickets it read most recently, up
to :data:`MAX_TICKETS`. A ticket is good for its short TTL and is spent at its first use,
so a long-lived ``connect``, which reads a fresh one for each resume, keeps a bounded set
that every log line is scanned for. :mod:`relay.observe.logs` runs every log event through
the process's redactor; traces and error messages use the same one.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4  # shorter strings would blank out ordinary words
MAX_TICKETS = 8  # tickets kept, most recent first; older ones have expired

_QUERY = re.compile(r"(?i)((?:\?|&)[^\s=&#\"']*=)[^\s&#\"']*")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")


class Redactor:
    """One process's secrets, and the text functions that remove them (and the patterns)."""

    def __init__(self, max_tickets: int = MAX_TICKETS) -> None:
        self._secrets: set[str] = set()
        self._tickets: deque[str] = deque(maxlen=max_tickets)

    def add_secret(self, value: str) -> None:
        """Never let ``value`` (a secret of the process's own) appear in a log line."""
        if len(value) >= MIN_SECRET_CHARS:
            self._secrets.add(value)

    def add_ticket(self, value: str) -> None:
        """Keep ``value`` (a ticket) out of the log lines, among the most recent tickets."""
        if len(value) < MIN_SECRET_CHARS or value in self._secrets:
            return
        if value in self._tickets:
            self._tickets.remove(value)
        self._tickets.append(value)

    def __len__(self) -> int:
        """How many values every line is scanned for."""
        return len(self._secrets) + len(self._tickets)

    def redact_text(self, text: str) -> str:
        """Remove query-string values, bearer tokens and the held secrets from ``text``."""
        text = _QUERY.sub(r"\1" + REDACTED, text)
        text = _BEARER.sub(r"\1" + REDACTED, text)
        for secrets in (self._secrets, self._tickets):
            for secret in secrets:
                if secret in text:
                    text = text.replace(secret, REDACTED)
        return text

    def redact_value(self, value: Any) -> Any:
        """``value`` with :meth:`redact_text` applied to every string in it, however nested."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {k: self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value
