"""Tests for relay.acp.toolcalls: a tool call's paths translated as the full path would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.acp.boundary import Boundary
from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.refusals import ToAgent
from relay.acp.rewrite import Files, RewritePolicy, Rewritten
from relay.acp.toolcalls import MEMO_MAX, ToolCallPaths
from relay.core import strictjson
from tests.bench.streamer import notification
from tests.support.acpmessages import AGENT_MESSAGES, EDITOR_MESSAGES, line

RULES = (parse_rule("/Users/alice=/workspace"), parse_rule("C:\\Users\\bob=/win"))
RECORDED = Path(__file__).parents[1] / "recorded" / "gemini-cli.jsonl"
Outcome = bytes | Rewritten | ToAgent


def policy(files: Files = Files.BOX) -> RewritePolicy:
    return RewritePolicy(CwdPolicy(RULES, "reject", "/srv/work", False), McpPolicy(), files)


class FullBoundary(Boundary):
    """A boundary that never takes the fast path: every line read, walked and written."""

    def __init__(self, rewrite: RewritePolicy) -> None:
        super().__init__(rewrite)
        self._tool_calls = None


def both(files: Files = Files.BOX) -> tuple[Boundary, FullBoundary]:
    return Boundary(policy(files)), FullBoundary(policy(files))


def outcome(boundary: Boundary, sent: bytes) -> tuple[Outcome, bool, dict[str, int]]:
    """What ``boundary`` made of ``sent``: its result, whether it is ``sent``, its summary."""
    result = boundary.agent_line(sent)
    return result, result is sent, boundary.summary()


def assert_same(sent: bytes, files: Files = Files.BOX) -> Outcome | None:
    """The fast path gives None or the full path's outcome (report, counts, values), its
    line spliced or written as the full path writes it (:func:`assert_spliced`); the
    boundary with it gives what the boundary without it gives. The fast path's result."""
    fast, full = both(files)
    taken = fast._tool_calls.line(sent) if fast._tool_calls is not None else None
    fast.counts.clear()
    (got, got_is_sent, got_counts), (want, want_is_sent, want_counts) = (
        outcome(fast, sent),
        outcome(full, sent),
    )
    assert (got_is_sent, got_counts) == (want_is_sent, want_counts)
    assert_spliced(got, want, sent)
    if taken is not None:
        assert_spliced(taken, full.agent_line(sent), sent)
    return taken


def quoted(value: str) -> bytes:
    return b'"%b"' % value.encode()


def assert_spliced(got: Outcome, want: Outcome, sent: bytes) -> None:
    """``got`` is ``want``, but that a translated line may be ``sent`` with the translated
    values written in place (the splice): the same report, the same values read back, and
    every byte but the translated strings' as the agent sent it."""
    if not (isinstance(got, Rewritten) and isinstance(want, Rewritten)) or got == want:
        assert got == want
        return
    assert got.report == want.report
    assert strictjson.dumps(strictjson.loads(got.line, max_bytes=len(got.line))) == want.line
    assert b"\\" not in sent

    def bare(data: bytes) -> bytes:
        for t in got.report.translations:
            data = data.replace(quoted(t.before), b"").replace(strictjson.dumps(t.after), b"")
        return data

    assert bare(got.line) == bare(sent)


def compact(message: dict[str, Any]) -> bytes:
    """``message`` as an agent writes it: compact, non-ASCII as it is (JSON.stringify)."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate: bytes that are not UTF-8


def recorded_tool_calls() -> list[bytes]:
    records = [json.loads(text) for text in RECORDED.read_text().splitlines() if text.strip()]
    return [
        compact(record["message"]).replace(b"/Users/alice/src", b"/workspace/src")
        for record in records
        if record["from"] == "agent" and '"tool_call' in json.dumps(record["message"])
    ]


def spelled(message: dict[str, Any], how: str) -> bytes:
    """``message`` compact as an agent writes it, escaped to ASCII, or spaced; a lone
    surrogate written as its bytes (not UTF-8) where it is not escaped."""
    if how == "compact":
        return compact(message)
    return json.dumps(message, ensure_ascii=how == "ascii").encode("utf-8", "surrogatepass")


def update_message(update: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A ``session/update`` notification of ``update`` (``extra``: an ``id``, say)."""
    params = {"sessionId": "s1", "update": update}
    return {"jsonrpc": "2.0", "method": "session/update", "params": params, **extra}


def update_line(update: dict[str, Any], **extra: Any) -> bytes:
    return compact(update_message(update, **extra))


LOCATED = {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
           "locations": [{"path": "/workspace/p/a.py", "line": 3}, {"path": "/elsewhere/b"}],
           "content": [{"type": "diff", "path": "/workspace/p/a.py", "oldText": None,
                        "newText": "é\n\"x\"\t"}]}  # fmt: skip


# -- the common shapes are taken -----------------------------------------------------------


def test_recorded_gemini_cli_tool_calls_are_taken() -> None:
    """Each tool call of the recorded gemini-cli session (its box paths under a rule) is taken
    by the fast path and comes out as the full path writes it."""
    lines = recorded_tool_calls()
    assert lines
    for sent in lines:
        taken = assert_same(sent)
        assert isinstance(taken, Rewritten)


def test_the_benchmarks_tool_call_update_is_taken() -> None:
    """The benchmark's streamed tool_call_update is taken, its location translated."""
    sent = notification(7, 320, "/workspace/bench").rstrip(b"\n")
    taken = assert_same(sent)
    assert isinstance(taken, Rewritten)
    assert b'"path":"/Users/alice/bench/project/src/module_007.py"' in taken.line


def test_locations_and_diffs_are_reported_in_the_rows_order() -> None:
    """Locations first, then diffs; an unmapped path is left and reported, a number kept as
    spelled, the whole line written as the full path writes it."""
    sent = update_line(LOCATED).replace(b'"line":3', b'"line":3E0')
    taken = assert_same(sent)
    assert isinstance(taken, Rewritten)
    assert [t.field for t in taken.report.translations] == [
        "params.update.locations[0].path",
        "params.update.content[0].path",
    ]
    assert taken.report.left == [("params.update.locations[1].path", "/elsewhere/b")]
    assert b'"line":3E0' in taken.line


def spaced(update: dict[str, Any]) -> bytes:
    """A ``session/update`` of ``update`` spelled with spaces, as Python's json writes it."""
    return spelled(update_message(update), "spaced")


UNESCAPED = LOCATED | {"content": [{"type": "diff", "path": "/workspace/p/a.py", "newText": "é"}]}


def test_a_translated_path_is_spliced_into_the_agents_own_bytes() -> None:
    """A tool call spelled with spaces: its paths are written in place and every other byte
    passes as the agent sent it, where the full path writes the whole line again; the
    values read back are the full path's."""
    sent = spaced(UNESCAPED)
    taken = assert_same(sent)
    assert isinstance(taken, Rewritten)
    assert taken.line == sent.replace(b'"/workspace/p/a.py"', b'"/Users/alice/p/a.py"')
    assert b'"line": 3' in taken.line
    assert b'"/elsewhere/b"' in taken.line
    assert len(taken.report.translations) == 2


SPLICE_REFUSED = {
    "an escape elsewhere": (b'"toolCallId": "t1"', b'"toolCallId": "t\\u0031"'),
    "the path in the title too": (b'"toolCallId": "t1"', b'"title": "/workspace/p/a.py"'),
    "the path as a key": (b'"toolCallId": "t1"', b'"/workspace/p/a.py": 1'),
    "a backslash in a path": (b'"/elsewhere/b"', b'"/elsewhere/b\\\\c"'),
}


@pytest.mark.parametrize("case", list(SPLICE_REFUSED))
def test_a_line_the_splice_cannot_be_sure_of_is_written_whole(case: str) -> None:
    """An escape anywhere, or the path's string elsewhere in the line (a title, a key): the
    line is written whole, byte for byte as the full path writes it, where without that one
    change it is spliced."""
    plain, changed = SPLICE_REFUSED[case]
    sent = spaced(UNESCAPED)
    assert plain in sent
    sent = sent.replace(plain, changed, 1)
    fast, full = both()
    taken = fast._tool_calls.line(sent) if fast._tool_calls is not None else None
    assert isinstance(taken, Rewritten)
    assert taken == full.agent_line(sent)
    assert taken.line == strictjson.dumps(strictjson.loads(taken.line))


def test_a_translation_that_is_another_places_original_is_written_whole() -> None:
    """An editor folder inside the box's (``/w/e=/w``): ``/w/a`` becomes ``/w/e/a`` and
    ``/w/e/a`` becomes ``/w/e/e/a`` in one line, which is written whole (one replacement
    could be taken for the next), with both translated once."""
    rewrite = RewritePolicy(CwdPolicy((parse_rule("/w/e=/w"),), "reject", "/s", False), McpPolicy())
    update = {"sessionUpdate": "tool_call", "locations": [{"path": "/w/a"}, {"path": "/w/e/a"}]}
    sent = spaced(update)
    fast, full = Boundary(rewrite), FullBoundary(rewrite)
    taken = fast.agent_line(sent)
    assert isinstance(taken, Rewritten)
    assert taken == full.agent_line(sent)
    paths = json.loads(taken.line)["params"]["update"]["locations"]
    assert paths == [{"path": "/w/e/a"}, {"path": "/w/e/e/a"}]


def test_a_tool_call_with_nothing_to_translate_is_its_own_line() -> None:
    """A tool call whose paths are all unmapped is passed as the very line, counted as left."""
    update = {"sessionUpdate": "tool_call", "toolCallId": "t", "locations": [{"path": "/x"}]}
    sent = update_line(update)
    fast = Boundary(policy())
    assert fast._tool_calls is not None
    assert fast._tool_calls.line(sent) is sent
    assert fast.counts["left_unmapped"] == 1
    assert assert_same(sent) is sent


def test_shared_translates_too_and_pass_has_no_fast_path() -> None:
    """Under shared the fast path is taken as under box; under pass there is none."""
    sent = update_line(LOCATED)
    assert isinstance(assert_same(sent, Files.SHARED), Rewritten)
    assert Boundary(policy(Files.PASS))._tool_calls is None
    assert Boundary(None)._tool_calls is None


def test_the_preferred_rule_changes_what_is_remembered() -> None:
    """A box folder two rules map: the path follows the rule the session was opened by,
    also for a path already translated under the other rule."""
    rules = (parse_rule("/Users/alice=/w"), parse_rule("//wsl.localhost/Ubuntu/home/a=/w"))
    boundary = Boundary(RewritePolicy(CwdPolicy(rules, "reject", "/s", False), McpPolicy()))
    sent = update_line({"sessionUpdate": "tool_call", "locations": [{"path": "/w/a.py"}]})
    first = boundary.agent_line(sent)
    assert isinstance(first, Rewritten)
    assert b'"/Users/alice/a.py"' in first.line
    wsl = "\\\\wsl.localhost\\Ubuntu\\home\\a\\p"
    boundary.client_line(compact({"id": 1, "method": "session/new",
                                  "params": {"cwd": wsl, "mcpServers": []}}))  # fmt: skip
    again = boundary.agent_line(sent)
    assert isinstance(again, Rewritten)
    assert json.loads(again.line)["params"]["update"]["locations"][0]["path"] == (
        "\\\\wsl.localhost\\Ubuntu\\home\\a\\a.py"
    )


def test_the_memo_is_bounded() -> None:
    """Past MEMO_MAX paths the memo starts again: it never holds more."""
    fast = Boundary(policy())._tool_calls
    assert isinstance(fast, ToolCallPaths)
    for i in range(MEMO_MAX + 10):
        fast.line(update_line({"sessionUpdate": "tool_call", "locations": [{"path": f"/w{i}"}]}))
        assert len(fast._memo) <= MEMO_MAX


# -- what is not understood falls back ------------------------------------------------------

HOSTILE = [
    (b'"path":"/workspace/p/a.py","line":3', b'"\\u0070ath":"/workspace/p/a.py","line":3'),
    (b'"line":3', b'"line":3,"line":4'),
    (b'"toolCallId":"t1"', b'"toolCallId":"t1","toolCallId":"t1"'),
    (b'"sessionId":"s1"', b'"sessionId":"s1","x":{"a":1,"a":1}'),
    (b'"line":3', b'"line":NaN'),
    (b'"line":3', b'"line":"\\ud800"'),
    (b'"line":3', b'"line":"\\ud83d\\ude00"'),
    (b'"line":3', b'"line":"\xff"'),
    (b'"line":3', b'"line" : 3'),
    (b'"line":3', b'"line":"\\/\\u00e9"'),
    (b'"line":3', b'"line":' + b"[" * 300 + b"]" * 300),
    (b'"tool_call_update"', b'"tool\\u005fcall_update"'),
    (b'"jsonrpc":"2.0"', b'"jsonrpc":"2.0","id":1'),
    (b'"type":"diff"', b'"type":"d\\u0069ff"'),
]


@pytest.mark.parametrize(("plain", "hostile"), HOSTILE)
def test_hostile_spellings_give_the_full_paths_outcome(plain: bytes, hostile: bytes) -> None:
    """Escaped keys, duplicate keys, NaN, surrogates, bytes that are not UTF-8, whitespace,
    deep nesting, an id: the boundary's outcome is the full path's, whichever reads it."""
    sent = update_line(LOCATED)
    assert plain in sent
    assert_same(sent.replace(plain, hostile, 1))
    assert_same(b" " + sent)
    assert_same(sent + b" ")


def test_uri_blocks_and_long_lists_are_left_to_the_full_path() -> None:
    """A resource link in a content block, or lists long enough for the place limit, are not
    taken; the boundary's outcome is the full path's."""
    linked = dict(LOCATED, content=AGENT_MESSAGES["tool_call"][0]["params"]["update"]["content"])
    assert assert_same(update_line(linked)) is None
    many = dict(LOCATED, locations=[{"path": "/workspace/a"}] * 1001)
    assert assert_same(update_line(many)) is None
    blocks = dict(LOCATED, content=[{"type": "diff", "path": "/workspace/a"}] * 600)
    assert assert_same(update_line(blocks)) is None


def test_the_boundarys_corpus_gives_the_full_paths_outcome() -> None:
    """Every message of the boundary's corpus, under each policy: the same outcome."""
    for files in (Files.BOX, Files.SHARED, Files.PASS):
        for message, _ in (*AGENT_MESSAGES.values(), *EDITOR_MESSAGES.values()):
            assert_same(line(message), files)


# -- hypothesis: hostile lines ------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["\u2028", "\x7f", '"', "\\", "\ud800", "é", "\U0001f600", "x" * 300]
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | TEXT
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
PATHS = st.sampled_from(["/workspace/p/a.py", "/workspace", "/workspace/../x", "/win/a:b",
                         "/elsewhere/c", "relative", "/workspace/p/é \"q\".py"]) | TEXT  # fmt: skip
LOCATION = st.fixed_dictionaries(
    {}, optional={"path": PATHS | JSON_VALUES, "line": JSON_VALUES, "_meta": JSON_VALUES}
)
BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["diff", "content", "terminal", "other"]) | JSON_VALUES},
    optional={"path": PATHS | JSON_VALUES, "oldText": JSON_VALUES, "newText": TEXT,
              "content": st.sampled_from([{"type": "text", "text": "t"}]) | JSON_VALUES},
)  # fmt: skip
UPDATE = st.fixed_dictionaries(
    {"sessionUpdate": st.sampled_from(["tool_call", "tool_call_update", "plan"]) | JSON_VALUES},
    optional={"toolCallId": TEXT, "title": TEXT, "locations": st.lists(LOCATION, max_size=4)
              | JSON_VALUES, "content": st.lists(BLOCK, max_size=4) | JSON_VALUES,
              "rawInput": JSON_VALUES, "status": TEXT, "extra": JSON_VALUES},
)  # fmt: skip
SPELLINGS = st.sampled_from(["compact", "ascii", "spaced"])


EDITS = [
    (b'"path"', b'"\\u0070ath"'),
    (b'"path":', b'"path":"/workspace/d","path":'),
    (b',"', b', "'),
    (b'"locations"', b'"loc\\u0061tions"'),
    (b"/", b"\\/"),
    (b'"line":', b'"line":1,"line":'),
    (b"]", b" ]"),
    (b'"type":"diff"', b'"type":"diff "'),
]


@settings(max_examples=400, deadline=None)
@given(UPDATE, SPELLINGS, st.lists(st.sampled_from(EDITS), max_size=2), st.booleans())
def test_any_tool_call_line_gives_the_full_paths_outcome(
    update: dict[str, Any], how: str, edits: list[tuple[bytes, bytes]], with_id: bool
) -> None:
    """Hypothesis-made tool calls (hostile escapes and duplicate keys spliced in, odd
    whitespace, unknown fields, nested values, non-string paths, surrogates, long strings):
    the fast path gives None or exactly the full path's outcome."""
    sent = spelled(update_message(update, **({"id": 1} if with_id else {})), how)
    for old, new in edits:
        sent = sent.replace(old, new, 1)
    assert_same(sent)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.integers(min_value=0, max_value=400))
def test_any_bytes_in_a_tool_call_give_the_full_paths_outcome(noise: bytes, at: int) -> None:
    """Arbitrary bytes put into a taken tool call line: None or the full path's outcome."""
    sent = update_line(LOCATED)
    at = min(at, len(sent))
    assert_same(sent[:at] + noise + sent[at:])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(range(8)), min_size=1, max_size=12), UPDATE)
def test_a_whole_read_gets_the_full_paths_outcome(picks: list[int], update: dict[str, Any]) -> None:
    """Boundary.agent_lines of a read mixing tool calls, the corpus and text: the same
    results, counts and parses with the fast path as without it."""
    pool = [
        update_line(LOCATED),
        update_line(update),
        *recorded_tool_calls()[:2],
        line(AGENT_MESSAGES["tool_call"][0]),
        line(AGENT_MESSAGES["fs/read_text_file"][0]),
        notification(1, 200).rstrip(b"\n"),
        notification(2, 320, "/workspace").rstrip(b"\n"),
    ]
    lines = [pool[i % len(pool)] for i in picks]
    fast, full = both()
    got, want = fast.agent_lines(lines), full.agent_lines(lines)
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert len(got) == len(want) == len(lines)
        for each, wanted, sent in zip(got, want, lines, strict=True):
            assert_spliced(each, wanted, sent)
    assert fast.summary() == full.summary()
