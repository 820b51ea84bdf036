"""Untrusted text made safe for a Matrix room: plain text, escaped HTML, bounded events.

Pure. Everything the agent, a watched editor or a chat member wrote is untrusted: it
reaches the room as plain text (control and format characters written as escapes, so
that it cannot hide or reverse what it says) or as HTML built here with every piece of
untrusted text escaped, never as HTML the agent wrote. An event is at most
:data:`MAX_EVENT_BYTES` as JSON: contents are measured as the homeserver will see them
(ASCII-escaped JSON, as the client library sends it) and cut with a note.
"""

from __future__ import annotations

import html
import json
from typing import Any

from relay.core.printable import escaped

MAX_EVENT_BYTES = 65536  # the Matrix limit on one event, as JSON
ENVELOPE_BYTES = 2048  # what the homeserver adds around the content (ids, signatures, ...)
CONTENT_BYTES = MAX_EVENT_BYTES - ENVELOPE_BYTES  # the most one event's content may take
CUT_NOTE = "… [cut: {} more characters]"


def safe(text: str) -> str:
    """``text`` with control and format characters escaped (newlines and tabs kept)."""
    return escaped(text.replace("\r\n", "\n"), keep="\n\t")


def safe_line(text: str, limit: int = 200) -> str:
    """One line of ``text`` (a title, a name): escaped, newlines too, cut at ``limit``."""
    return cut(escaped(text), limit)


def cut(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying how many more there were."""
    more = len(text) - limit
    return text if more <= 0 else text[:limit] + CUT_NOTE.format(more)


def to_html(text: str) -> str:
    """Plain ``text`` (already made safe) as HTML: escaped, newlines as ``<br>``."""
    return html.escape(text, quote=False).replace("\n", "<br>")


def json_size(value: Any) -> int:
    """The bytes ``value`` takes as JSON as the client library sends it (ASCII escapes)."""
    return len(json.dumps(value))


def text_size(text: str) -> int:
    """The bytes a string takes inside JSON (its quotes not counted)."""
    return len(json.dumps(text)) - 2


def prefix_within(text: str, budget: int, at_least: int = 0) -> str:
    """The longest prefix of ``text`` that takes at most ``budget`` JSON bytes (never
    shorter than ``at_least`` characters): a binary search, as escapes make a character
    take one to twelve bytes."""
    low, high = at_least, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if text_size(text[:middle]) <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def fit_bytes(text: str, budget: int) -> str:
    """``text`` cut so that it takes at most ``budget`` bytes in JSON, with the note."""
    if text_size(text) <= budget:
        return text
    kept = prefix_within(text, budget - text_size(CUT_NOTE.format(len(text))))
    return kept + CUT_NOTE.format(len(text) - len(kept))


def split_bytes(text: str, budget: int) -> list[str]:
    """``text`` in pieces of at most ``budget`` JSON bytes each, nothing lost, in order
    (cut at a newline when one is in the second half of a piece)."""
    pieces: list[str] = []
    while text_size(text) > budget:
        low = len(prefix_within(text, budget, at_least=1))
        newline = text.rfind("\n", low // 2, low)
        end = newline + 1 if newline > 0 else low
        pieces.append(text[:end])
        text = text[end:]
    pieces.append(text)
    return pieces
