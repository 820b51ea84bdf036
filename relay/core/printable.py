"""Text made safe to show on a terminal: control characters written as escapes.

Pure. What reaches a terminal from elsewhere (an agent's stderr in a log line, an
agent's words in ``acp-relay watch``) must not move the cursor, retitle the terminal,
reverse the text's direction or hide what it says: every control or format character
(Unicode categories Cc, Cf, Zl, Zp) is written as an escape such as ``\\x1b``.
"""

from __future__ import annotations

import unicodedata

_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp"})


def escaped(text: str, *, keep: str = "") -> str:
    """``text`` with every control character written as an escape (``\\x1b``, ``\\u202e``),
    but those of ``keep`` (say ``"\\n"``)."""
    if text.isprintable():
        return text
    return "".join(_escape(c, keep) for c in text)


def _escape(char: str, keep: str) -> str:
    if char in keep or unicodedata.category(char) not in _UNPRINTABLE:
        return char
    point = ord(char)
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}"
