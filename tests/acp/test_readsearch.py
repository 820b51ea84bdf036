"""Tests for relay.acp.readsearch: a read's lines searched, the start they share searched once."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.acp.boundary import Boundary
from relay.acp.crossings import CAPABILITIES, KEY_ESCAPE, KEY_ESCAPE_LONGEST
from relay.acp.lineplan import LinePlan, plan_for, seeker
from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.readsearch import SHARED_MIN, found_in_read, holds_any, shared_start
from relay.acp.rewrite import Files, RewritePolicy
from tests.support.acpmessages import AGENT_MESSAGES, EDITOR_MESSAGES, line

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import sre_parse  # the widest match of KEY_ESCAPE, to check its bound against

Search = tuple[re.Pattern[bytes], tuple[bytes, ...], re.Pattern[bytes] | None]


def joined_search(
    lines: Sequence[bytes], seek: re.Pattern[bytes], escape: re.Pattern[bytes] | None
) -> bool:
    """The reference: the boundary's search before issue 36, the whole read joined by
    newlines, its markers then (where a backslash is) its escapes."""
    data = b"\n".join(lines)
    if seek.search(data) is not None:
        return True
    return escape is not None and b"\\" in data and escape.search(data) is not None


def searches() -> Iterator[tuple[LinePlan, Search]]:
    """Each search the boundary makes of the agent's lines: every policy, a session/list
    pending or not, the agent's capabilities awaited or not."""
    for files in Files:
        plan = plan_for(files)
        escape = None if files is Files.PASS else KEY_ESCAPE
        for pending in (False, True):
            for capabilities in (False, True):
                seek = plan.agent_seek(pending, capabilities)
                yield plan, (seek, plan.agent_markers(pending, capabilities), escape)


SEARCHES = [search for _plan, search in searches()]


def test_each_search_is_its_markers_and_an_escape_that_begins_with_a_backslash() -> None:
    """A plan's seek finds exactly its markers, literally; KEY_ESCAPE's matches begin with a
    backslash and hold at most KEY_ESCAPE_LONGEST bytes, and none holds a newline (what
    the shared-start search stands on)."""
    for _plan, (seek, markers, escape) in searches():
        assert seek is seeker(markers)
        assert escape is None or escape is KEY_ESCAPE
    tree = sre_parse.parse(KEY_ESCAPE.pattern)  # type: ignore[arg-type]
    assert tree.getwidth()[1] == KEY_ESCAPE_LONGEST
    assert KEY_ESCAPE.pattern.startswith(b"\\\\(?:")
    assert not any(b"\n" in marker for marker in MARKERS)
    for escaped in (b"\\/", b"\\u002f"):  # an escape cut by a newline is none
        cuts = [escaped[:i] + b"\n" + escaped[i:] for i in range(1, len(escaped))]
        assert not any(KEY_ESCAPE.search(cut) for cut in cuts)


@pytest.mark.parametrize(
    ("low", "high", "shared"),
    [(b"", b"abc", 0), (b"abc", b"abd", 2), (b"abc", b"abc", 3), (b"ab", b"abc", 2),
     (b"x" * 300 + b"a", b"x" * 300 + b"b", 300), (b"a", b"b", 0)],
)  # fmt: skip
def test_shared_start(low: bytes, high: bytes, shared: int) -> None:
    """How many first bytes two lines share, found by halving."""
    assert shared_start(low, high) == shared


# -- the boundary's corpus -------------------------------------------------------------------

TEXTS = [
    "Hello",
    "a line\nanother\ttab",
    'say "hi" and \\ backslash',
    "caf\u00e9 \u4e2d\u6587 \U0001f600 \u2028",
    'the "locations" of "diff" and "resource_link" in words',
    '"path" and "uri" and "fs/read_text_file" and "terminal/create" quoted',
    "fs/ terminal/ path uri sessions error agentCapabilities",
    "/workspace/p/a.py and file:///workspace/p/a.py as text",
    "x" * 300,
]


def streamed(text: str, session: str = "s1", ascii_only: bool = True) -> bytes:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    message = {"jsonrpc": "2.0", "method": "session/update",
               "params": {"sessionId": session, "update": update}}  # fmt: skip
    return json.dumps(message, ensure_ascii=ascii_only, separators=(",", ":")).encode()


CORPUS = [line(message) for message, _ in (*AGENT_MESSAGES.values(), *EDITOR_MESSAGES.values())]
STREAM = [streamed(text, ascii_only=a) for text in TEXTS for a in (True, False)]


@pytest.mark.parametrize("search", SEARCHES)
def test_the_corpus_is_found_as_joined(search: Search) -> None:
    """Each message of the boundary's corpus, alone, amid a stream, first or last in a read,
    and the stream alone: found exactly where the joined search finds it."""
    seek, markers, escape = search
    reads = [STREAM, STREAM[:1], STREAM * 3]
    for sent in CORPUS + STREAM:
        reads += [[sent], [*STREAM, sent], [sent, *STREAM], [*STREAM[:2], sent, *STREAM[2:]]]
    for read in reads:
        assert found_in_read(read, seek, markers, escape) == joined_search(read, seek, escape)


# -- hypothesis-made reads, hostile escapes included -----------------------------------------

MARKERS = sorted(
    {m for plan in map(plan_for, Files) for m in plan.agent_must + plan.agent_may + plan.answers}
    | {CAPABILITIES}
)
HOSTILE = [
    b'"', b"\\", b"/", b"u00", b'\\"', b"\\\\", b"\\n", b"\\/", b"\\u0022", b"\\u002f",
    b"\\u002F", b"\\u0024", b"\\u005f", b"\\u0061", b"\\u0070", b"\\ud800", b"\\udc00",
    b"\\ud83d\\ude00", b'"\\u0070ath"', b'"p\\u0061th"', b'"loc\\u0061tions"',
    b'"fs\\/read_text_file"', b'"\\u0066s/x"', b'"path":"/a","path":"/b"',
    b'{"a":{"b":{"path":"/workspace/a"}}}', b'"text":"', b'"type":"text"', b":", b",",
    b"{", b"}", b"[", b"]", b"caf\xc3\xa9", b"\xff", b"x" * 400,
]  # fmt: skip
# Every marker, and each cut in two, so that a read's shared start may end inside one.
PIECES = [m[:i] for m in MARKERS for i in range(1, len(m) + 1)] + [
    m[i:] for m in MARKERS for i in range(1, len(m))
]
FRAGMENTS = st.sampled_from([*PIECES, *HOSTILE]) | st.binary(max_size=12)
RUNS = st.lists(FRAGMENTS, max_size=8).map(b"".join)
STARTS = RUNS | st.sampled_from([s[:i] for s in STREAM[:2] for i in (0, 40, 90, 100, 130)])


PAD = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"' + b"s" * SHARED_MIN


@st.composite
def reads(draw: Any) -> list[bytes]:
    """A read's lines: a start every line shares (long or short, often cut inside a marker
    or an escape that some line's own bytes complete) and each line's own bytes, or lines
    sharing nothing."""
    marker = draw(st.sampled_from([*MARKERS, *HOSTILE]))
    cut = draw(st.integers(0, len(marker)))
    start = draw(STARTS | st.just(b"")) + draw(st.sampled_from([b"", PAD])) + marker[:cut]
    tails = draw(st.lists(RUNS, min_size=1, max_size=6))
    if draw(st.booleans()):
        tails[0] = marker[cut:] + tails[0]
    shared: bool = draw(st.booleans())
    return [start + tail for tail in tails] if shared else tails


@pytest.mark.parametrize("search", SEARCHES)
def test_a_marker_cut_by_the_shared_start_is_found(search: Search) -> None:
    """Every marker and escape, cut at each of its bytes by the end of the start its read's
    lines share, is found as the joined search finds it."""
    seek, markers, escape = search
    for marker in [*MARKERS, *HOSTILE]:
        for cut in range(len(marker) + 1):
            start = PAD + marker[:cut]
            for read in ([start + marker[cut:], start + b"\x00"], [start + b"\x00", start]):
                found = found_in_read(read, seek, markers, escape)
                assert found == joined_search(read, seek, escape), (marker, cut)


@settings(max_examples=400)
@given(reads(), st.sampled_from(SEARCHES))
def test_any_read_is_found_as_joined(read: list[bytes], search: Search) -> None:
    """Whatever a read holds (markers cut across the shared start, escapes of quotes,
    slashes and key letters, surrogates, duplicate keys, nesting, long strings, bytes that
    are not UTF-8): the shared-start search finds what the joined search finds."""
    seek, markers, escape = search
    assert found_in_read(read, seek, markers, escape) == joined_search(read, seek, escape)


RULES = (parse_rule("/Users/alice=/workspace"),)


@settings(max_examples=150)
@given(reads(), st.sampled_from([Files.BOX, Files.SHARED]), st.booleans())
def test_a_read_passes_whole_only_when_each_line_would(
    read: list[bytes], files: Files, pending: bool
) -> None:
    """Boundary.agent_lines passes a read unchanged (None) exactly when agent_line would pass
    each of its lines unchanged: the search skips no line the boundary acts on."""
    cwd = CwdPolicy(RULES, "reject", "/srv/work", False)
    policy = RewritePolicy(cwd, McpPolicy(), files)
    whole, alone = Boundary(policy), Boundary(policy)
    if pending:
        for boundary in (whole, alone):
            boundary.client_line(b'{"jsonrpc":"2.0","id":1,"method":"session/list","params":{}}')
    results = whole.agent_lines(read)
    passed = all(alone.agent_line(sent) is sent for sent in read)
    assert (results is None) == passed


@pytest.mark.parametrize(
    ("data", "markers", "held"),
    [
        (b'{"path":"/a"}', (b'"fs/', b'"path"'), True),
        (b'{"uri":"/a"}', (b'"fs/', b'"path"'), False),
        (b'"fs/', (b'"fs/',), True),
        (b"anything", (), False),
        (b"", (b"x",), False),
    ],
)
def test_holds_any_is_any_marker_found(data: bytes, markers: tuple[bytes, ...], held: bool) -> None:
    """holds_any says whether any marker occurs in the bytes (none given: never)."""
    assert holds_any(data, markers) is held
    assert held == any(marker in data for marker in markers)
