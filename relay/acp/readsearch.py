"""The boundary's search over the lines of one read, the start they share searched once.

Pure. A stream's lines are alike up to their text: every ``agent_message_chunk`` of a
session begins with the same ``{"jsonrpc":"2.0","method":"session/update","params":
{"sessionId":"…","update":{"sessionUpdate":"agent_message_chunk","content":{"type":
"text","text":"``, and that start holds most of a line's quotes, where every marker of
the search begins (each one a place where the regular expression engine stops to try
it). :func:`found_in_read` searches the bytes that every line of a read begins with
once, then each line only from where a match could still begin, joined by newlines.

It finds what :func:`found_in` finds in the read's lines joined by newlines (the
reference), for ``seek`` a search of literal ``markers`` and ``escape`` a pattern whose
matches begin with a backslash and hold at most ``KEY_ESCAPE_LONGEST`` bytes, none of
them holding a newline: a match that does not lie inside the shared start, the same in
every line, begins where its first bytes are the shared start's last ones
(:func:`_cut`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from operator import itemgetter

from relay.acp.crossings import KEY_ESCAPE_LONGEST

# Below this many shared bytes the read is searched joined: cutting the lines would cost
# more than the few quotes it spares.
SHARED_MIN = 32
_BACKSLASH = 0x5C  # by its code: ``b"\\" in data`` makes and drops a TypeError (CPython 3.11)


def holds_any(data: bytes, markers: Sequence[bytes]) -> bool:
    """Whether ``data`` holds any of ``markers``: one C-speed pass per marker, no generator
    (``find``, not ``in``: on bytes ``in`` makes and drops a TypeError each time)."""
    return bool(markers) and max(map(data.find, markers)) != -1


def found_in(data: bytes, seek: re.Pattern[bytes], escape: re.Pattern[bytes] | None) -> bool:
    """Whether ``seek`` finds a marker in ``data``, or ``escape`` an escape (looked for only
    where ``data`` holds a backslash, which every escape begins with)."""
    if seek.search(data) is not None:
        return True
    return escape is not None and _BACKSLASH in data and escape.search(data) is not None


def found_in_read(
    lines: Sequence[bytes],
    seek: re.Pattern[bytes],
    markers: tuple[bytes, ...],
    escape: re.Pattern[bytes] | None,
) -> bool:
    """:func:`found_in` of ``lines`` joined by newlines, the start they all share searched
    once (see the module's doc for what ``seek``, its ``markers`` and ``escape`` must be)."""
    if len(lines) < 2:
        return any(found_in(line, seek, escape) for line in lines)
    low, high = min(lines), max(lines)  # every line begins with what these two share
    shared = shared_start(low, high)
    if shared < SHARED_MIN:
        return found_in(b"\n".join(lines), seek, escape)
    if found_in(low[:shared], seek, escape):
        return True
    longest = max(map(len, markers), default=1)
    if escape is not None:
        longest = max(longest, KEY_ESCAPE_LONGEST)
    end = max(0, shared - longest + 1)  # a match from before ``end`` lies in the start
    tails = itemgetter(slice(end + _cut(low[end:shared], markers, escape is not None), None))
    return found_in(b"\n".join(map(tails, lines)), seek, escape)


@lru_cache(maxsize=256)  # keyed by a few bytes of the wire (under the longest marker)
def _cut(end: bytes, markers: tuple[bytes, ...], escapes: bool) -> int:
    """The first byte of ``end`` (the last bytes of a shared start) where a match that goes
    past it may begin: a marker begins with the rest of ``end``, or an escape's backslash
    is there; ``len(end)`` where none may."""
    for at in range(len(end)):
        rest = end[at:]
        if escapes and rest[0] == _BACKSLASH:
            return at
        if any(marker.startswith(rest) for marker in markers):
            return at
    return len(end)


def shared_start(low: bytes, high: bytes) -> int:
    """How many first bytes ``low`` and ``high`` share (a binary search of C-speed
    comparisons: a line's shared start is a few hundred bytes)."""
    below, above = 0, min(len(low), len(high))
    while below < above:
        middle = (below + above + 1) // 2
        if low.startswith(high[:middle]):
            below = middle
        else:
            above = middle - 1
    return below
