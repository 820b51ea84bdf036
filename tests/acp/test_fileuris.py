"""Tests for relay.acp.fileuris: file:// URIs translated whole both ways, or left untouched."""

from __future__ import annotations

from urllib.parse import quote, unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.acp.fileuris import FileUri, parse_file_uri, uri_to_box, uri_to_editor
from relay.acp.paths import CwdRule, parse_rule

RULES = tuple(
    parse_rule(text)
    for text in (
        "/Users/alice=/workspace",
        "C:\\Users\\Alice=/win",
        "//wsl$/Ubuntu/home/alice=/wsl",
        "//Server/Share/team=/team",
    )
)


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("file:///a/b%20c", FileUri("", ("a", "b%20c"), ("a", "b c"), "")),
        ("file://localhost/a", FileUri("", ("a",), ("a",), "")),
        ("file:/a", FileUri("", ("a",), ("a",), "")),
        ("FILE:///a?x#y", FileUri("", ("a",), ("a",), "?x#y")),
        ("file://wsl%24/U/h", FileUri("wsl$", ("U", "h"), ("U", "h"), "")),
        ("file:///a/", FileUri("", ("a", ""), ("a", ""), "")),
    ],
)
def test_parse_file_uri(uri: str, parsed: FileUri) -> None:
    """RFC 8089 forms editors send: with or without authority, localhost, query, fragment."""
    assert parse_file_uri(uri) == parsed


@pytest.mark.parametrize(
    ("editor", "box"),
    [
        ("file:///Users/alice/p/a.py", "file:///workspace/p/a.py"),
        ("file:///Users/alice", "file:///workspace"),
        ("file:///Users/alice/dir/", "file:///workspace/dir/"),
        ("file:///Users/alice/x%20y.py#L3", "file:///workspace/x%20y.py#L3"),  # kept as spelled
        ("file:///Users/alice/caf%C3%A9", "file:///workspace/caf%C3%A9"),
        ("file:///Users/alice/a/./b/../c", "file:///workspace/a/c"),
        ("file://localhost/Users/alice/z", "file:///workspace/z"),
        ("file:/Users/alice/m", "file:///workspace/m"),
        ("file:///C:/Users/Alice/src/main.c", "file:///win/src/main.c"),
        ("file:///c%3A/users/alice/src", "file:///win/src"),  # VS Code's spelling
        ("file:///C|/Users/Alice/old", "file:///win/old"),
        ("file://wsl.localhost/Ubuntu/home/alice/p/q", "file:///wsl/p/q"),
        ("file://wsl%24/Ubuntu/home/alice/p", "file:///wsl/p"),
        ("file://server/share/team/doc.txt", "file:///team/doc.txt"),
    ],
)
def test_uri_to_box(editor: str, box: str) -> None:
    """Editor URIs under a rule become the box's file:/// URIs; what is below keeps its spelling."""
    result = uri_to_box(editor, RULES)
    assert result is not None
    assert result.path == box


@pytest.mark.parametrize(
    "uri",
    [
        "file:///Users/bob/x",  # under no rule
        "file:///Users/alice/../bob",  # climbs out
        "file:///Users/alice/%zz",  # invalid percent-encoding
        "file:///Users/alice/%4",
        "file:///Users/alice/%FF",  # not UTF-8
        "file:///Users/alice/a%2Fb",  # an encoded separator
        "file:///Users/alice/a%5Cb",
        "file:///Users/alice/a%00b",
        "file://host:8080/Users/alice",  # a port
        "file://user@host/Users/alice",
        "file://wsl.localhost",  # no path
        "file:Users/alice",
        "file://server//team",  # no share
        "https://example.com/Users/alice",
        "/Users/alice/p",  # a path, not a URI
        "",
    ],
)
def test_uri_to_box_leaves_what_it_cannot_map(uri: str) -> None:
    """Unreadable, odd or unmapped URIs are not translated (the caller leaves them untouched)."""
    assert uri_to_box(uri, RULES) is None


@pytest.mark.parametrize(
    ("box", "editor"),
    [
        ("file:///workspace/p/a.py", "file:///Users/alice/p/a.py"),
        ("file:///workspace", "file:///Users/alice"),
        ("file:///workspace/x%20y#L3", "file:///Users/alice/x%20y#L3"),
        ("file:///./workspace/a", "file:///Users/alice/a"),
        ("file:///win/src/main.c", "file:///C:/Users/Alice/src/main.c"),
        ("file:///wsl/p", "file://wsl$/Ubuntu/home/alice/p"),
        ("file:///team/a%20b", "file://Server/Share/team/a%20b"),
    ],
)
def test_uri_to_editor(box: str, editor: str) -> None:
    """Box URIs come back as the editor's, its folder spelled as in the rule."""
    result = uri_to_editor(box, RULES)
    assert result is not None
    assert result.path == editor


@pytest.mark.parametrize(
    "uri",
    [
        "file:///etc/hosts",
        "file:///workspace/../etc",
        "file:///win/a%3Ab",  # ':' cannot be in a Windows name
        "file:///win/a%5Cb",
        "file://otherhost/workspace/a",  # not the box's own file
        "file:///workspace/%zz",
    ],
)
def test_uri_to_editor_leaves_what_it_cannot_map(uri: str) -> None:
    """Box URIs under no rule, climbing out, unnameable on the editor, or unreadable: None."""
    assert uri_to_editor(uri, RULES) is None


KEPT = "!$&'()*+,;=:@-._~"
NAMES = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='\\/:*?"<>|'),
    min_size=1,
    max_size=6,
).filter(lambda name: name not in (".", ".."))


def spellings(name: str) -> st.SearchStrategy[str]:
    """Ways an editor may percent-encode one name."""
    return st.sampled_from([quote(name, safe=KEPT), quote(name, safe=""), quote(name, safe="@:")])


def rule_folder_uri(rule: CwdRule) -> str:
    """The URI of a rule's editor folder, spelled as the relay spells it."""
    folders = [quote(part, safe=KEPT) for part in rule.client.parts]
    shown = rule.client.text()
    if not rule.client.on_windows:
        return "file:///" + "/".join(folders)
    if rule.client.root.endswith(":"):
        return "file:///" + "/".join([shown[:2], *folders])
    host, share = shown.lstrip("\\").split("\\")[:2]
    return f"file://{host}/" + "/".join([quote(share, safe=KEPT), *folders])


@given(st.sampled_from(RULES), st.lists(NAMES.flatmap(spellings), max_size=4), st.booleans())
def test_editor_uri_to_box_to_editor_gives_it_back(
    rule: CwdRule, below: list[str], fragment: bool
) -> None:
    """An editor URI with the rule's folder in the relay's spelling (any spelling below it)
    comes back byte for byte from the box."""
    uri = "/".join([rule_folder_uri(rule), *below]) + ("#L1" if fragment else "")
    there = uri_to_box(uri, RULES)
    assert there is not None
    assert unquote(there.path).startswith("file://" + rule.agent_path)
    back = uri_to_editor(there.path, RULES, prefer=there.rule)
    assert back is not None
    assert back.path == uri


@given(st.sampled_from(RULES), st.lists(NAMES.flatmap(spellings), max_size=4))
def test_box_uri_to_editor_to_box_gives_it_back(rule: CwdRule, below: list[str]) -> None:
    """A box file:/// URI under a rule comes back byte for byte from the editor."""
    uri = "file://" + "/".join([rule.agent_path, *below])
    there = uri_to_editor(uri, RULES)
    assert there is not None
    back = uri_to_box(there.path, RULES)
    assert back is not None
    assert back.path == uri


@given(st.text(max_size=60), st.sampled_from(["file:///Users/alice/", "file:///workspace/", ""]))
def test_any_text_is_translated_whole_or_not_at_all(text: str, head: str) -> None:
    """Whatever follows a mapped folder, a URI is translated to one under the other side's
    folder, or not at all; nothing raises."""
    there = uri_to_box(head + text, RULES)
    back = uri_to_editor(head + text, RULES)
    assert there is None or there.path.startswith("file:///")
    assert back is None or back.path.startswith("file://")
    if there is not None:
        assert uri_to_editor(there.path, RULES, prefer=there.rule) is not None
