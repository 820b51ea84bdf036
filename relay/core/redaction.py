"""What never reaches a log line or a trace: query-string values, bearer tokens, secrets.

Pure text functions over one process-wide set of registered secrets (tickets and ticket
secrets, registered as they are read). :mod:`relay.observe.logs` runs every log event through
:func:`redact_value`; traces and error messages use the same functions.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4  # shorter strings would blank out ordinary words

_QUERY = re.compile(r"(?i)((?:\?|&)[^\s=&#\"']*=)[^\s&#\"']*")
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+")
_secrets: set[str] = set()


def register_secret(value: str) -> None:
    """Never let ``value`` (a ticket or a secret) appear in a log line."""
    if len(value) >= MIN_SECRET_CHARS:
        _secrets.add(value)


def redact_text(text: str) -> str:
    """Remove query-string values, bearer tokens and registered secrets from ``text``."""
    text = _QUERY.sub(r"\1" + REDACTED, text)
    text = _BEARER.sub(r"\1" + REDACTED, text)
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_value(value: Any) -> Any:
    """``value`` with :func:`redact_text` applied to every string in it, however nested."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value
