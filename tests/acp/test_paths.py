"""Tests for relay.acp.paths: editor paths of every OS mapped onto the box's filesystem and back."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.acp.paths import (
    ClientPath,
    CwdPolicy,
    CwdRule,
    Fallback,
    PathRefused,
    Translated,
    describe_rules,
    parse_client_path,
    parse_rule,
    real_path_outside,
    to_box,
    to_editor,
    translate,
)

RULES = (
    "/Users/alice=/workspace",
    "/Users/alice/secret=/vault",
    "C:\\Users\\alice=/win",
    "//wsl$/Ubuntu/home/alice=/wsl",
)


def policy(
    fallback: Fallback = "workspace", rules: tuple[str, ...] = RULES, must_exist: bool = False
) -> CwdPolicy:
    return CwdPolicy(tuple(parse_rule(r) for r in rules), fallback, "/ws", must_exist)


def everything_exists(_path: str) -> bool:
    return True


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("/Users/alice/proj", ClientPath("/", ("Users", "alice", "proj"), False)),
        ("/a//b/./c/", ClientPath("/", ("a", "b", "c"), False)),
        ("C:\\Users\\alice", ClientPath("c:", ("Users", "alice"), True)),
        ("c:/Users/alice", ClientPath("c:", ("Users", "alice"), True)),
        ("\\\\wsl.localhost\\Ubuntu\\home", ClientPath("//wsl/ubuntu", ("home",), False)),
        ("\\\\wsl$\\Ubuntu\\home", ClientPath("//wsl/ubuntu", ("home",), False)),
        ("//server/share/x", ClientPath("//server/share", ("x",), True)),
        ("relative/path", None),
        ("C:relative", None),
        ("\\\\only-host", None),
        ("", None),
    ],
)
def test_parse_client_path(text: str, parsed: ClientPath | None) -> None:
    """POSIX, drive-letter and UNC paths are understood; relative paths are not absolute."""
    assert parse_client_path(text) == parsed


@pytest.mark.parametrize(
    ("client", "agent"),
    [
        ("/Users/alice", "/workspace"),
        ("/Users/alice/proj/src", "/workspace/proj/src"),
        ("/Users/alice/secret/x", "/vault/x"),  # the longest prefix wins
        ("/Users/alice/./proj/../other", "/workspace/other"),
        ("/Users/al", "/ws"),  # whole components only: falls back
        ("/Users/alicex/proj", "/ws"),
        ("C:\\Users\\alice\\proj", "/win/proj"),
        ("c:/users/ALICE/proj", "/win/proj"),  # Windows compares case-insensitively
        ("C:/Users/alice\\mixed/seps", "/win/mixed/seps"),
        ("\\\\wsl.localhost\\Ubuntu\\home\\alice\\proj", "/wsl/proj"),
        ("\\\\wsl$\\Ubuntu\\home\\alice\\proj", "/wsl/proj"),
        ("//wsl.localhost/Ubuntu/home/alice", "/wsl"),
        ("/users/alice/proj", "/ws"),  # POSIX is case-sensitive
    ],
)
def test_translate_with_rules(client: str, agent: str) -> None:
    """Rules map on whole components, longest first; the rest of the path is carried over."""
    result = translate(client, policy(), everything_exists)
    assert isinstance(result, Translated)
    assert result.path == agent


@pytest.mark.parametrize(
    ("client", "why"),
    [
        ("/Users/alice/../bob", "it climbs out of /workspace (mapped by /Users/alice=/workspace)"),
        ("/Users/alice/proj/../../..", "it climbs out of /workspace"),
        ("proj", "'proj' is not an absolute path (ACP requires absolute paths)"),
    ],
)
def test_translate_refusals(client: str, why: str) -> None:
    """A path that climbs out of its mapped target, or is relative, is refused."""
    result = translate(client, policy(), everything_exists)
    assert isinstance(result, PathRefused)
    assert result.why.startswith(why)


@pytest.mark.parametrize(
    ("fallback", "expected"),
    [
        ("workspace", Translated("/ws", None)),
        ("keep", Translated("/elsewhere/proj", None, kept=True)),
        ("reject", PathRefused("no --cwd-map rule matches it and --cwd-fallback is reject")),
    ],
)
def test_fallback_policies(fallback: Fallback, expected: Translated | PathRefused) -> None:
    """Without a matching rule the fallback decides: workspace, keep unchanged, or reject."""
    assert translate("/elsewhere/proj", policy(fallback), everything_exists) == expected


@pytest.mark.parametrize(
    ("client", "exists", "expected"),
    [
        ("/Users/alice/gone", False, PathRefused(
            "/workspace/gone does not exist on the agent's machine", "/workspace/gone")),
        ("/Users/alice/here", True, Translated("/workspace/here", parse_rule(RULES[0]))),
        ("/elsewhere", False, PathRefused(
            "/ws does not exist on the agent's machine", "/ws")),
    ],
)  # fmt: skip
def test_must_exist(client: str, exists: bool, expected: Translated | PathRefused) -> None:
    """With must-exist on, a translated path missing on the agent's side is refused."""
    result = translate(client, policy(must_exist=True), lambda _p: exists)
    assert result == expected


def test_kept_paths_are_not_checked() -> None:
    """A path kept unchanged by the keep fallback is the agent's business, not checked."""
    result = translate("D:\\x", policy("keep", must_exist=True), lambda _p: False)
    assert result == Translated("D:\\x", None, kept=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/Users/alice", "expected CLIENT_PREFIX=/AGENT/PATH"),
        ("=/workspace", "expected CLIENT_PREFIX=/AGENT/PATH"),
        ("Users/alice=/workspace", "'Users/alice' is not an absolute path"),
        ("/Users/../alice=/workspace", "the client prefix may not contain '..'"),
        ("/Users/alice=/work/../etc", "the agent path may not contain '..'"),
        ("/Users/alice=workspace", "expected CLIENT_PREFIX=/AGENT/PATH"),
    ],
)
def test_bad_rules(text: str, message: str) -> None:
    """Malformed --cwd-map rules are refused with what is wrong."""
    with pytest.raises(ValueError, match="bad --cwd-map") as caught:
        parse_rule(text)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "agent"),
    [("/Users/alice=relative", "relative"), ("C:\\Users\\alice=work/x", "work/x")],
)
def test_a_relative_agent_path_is_named(text: str, agent: str) -> None:
    """A rule whose agent side is not absolute says so, naming that side."""
    with pytest.raises(ValueError, match="bad --cwd-map") as caught:
        parse_rule(text)
    assert f"the agent path {agent!r} is not absolute" in str(caught.value)
    assert "expected CLIENT_PREFIX=/AGENT/PATH" in str(caught.value)


def test_rule_with_equals_in_client_path() -> None:
    """The split is at the last '=/' so a client prefix may contain '='."""
    rule = parse_rule("/Users/a=b=/workspace/x/")
    assert (rule.client.parts, rule.agent_path) == (("Users", "a=b"), "/workspace/x")


def test_describe_rules() -> None:
    """The mappings in force are listed as written, then the fallback."""
    assert describe_rules(policy(rules=RULES[:1])) == [
        "/Users/alice=/workspace",
        "otherwise: workspace (/ws)",
    ]


# -- box -> editor ------------------------------------------------------------------------

BOTH_WAYS = (
    "/Users/alice=/workspace",
    "/Users/alice/secret=/vault",
    "C:\\Users\\Alice=/win",
    "d:/Projects=/proj",
    "//wsl$/Ubuntu/home/alice=/wsl",
    "\\\\Server\\Share\\team=/team",
)


def rules_of(*texts: str) -> tuple[CwdRule, ...]:
    return tuple(parse_rule(text) for text in texts)


@pytest.mark.parametrize(
    ("box", "editor"),
    [
        ("/workspace", "/Users/alice"),
        ("/workspace/proj/src/a.py", "/Users/alice/proj/src/a.py"),
        ("/vault/x", "/Users/alice/secret/x"),  # the longest box prefix wins
        ("/workspace//proj/./a", "/Users/alice/proj/a"),
        ("/workspace/proj/../other", "/Users/alice/other"),
        ("/win/src/main.c", "C:\\Users\\Alice\\src\\main.c"),  # the rule's spelling, backslashes
        ("/proj/a/b", "d:\\Projects\\a\\b"),  # written with '/', spelled as Windows does
        ("/wsl/p/q", "\\\\wsl$\\Ubuntu\\home\\alice\\p\\q"),
        ("/team/doc.txt", "\\\\Server\\Share\\team\\doc.txt"),
        ("/workspace/caf\u00e9 \u2603/x y", "/Users/alice/caf\u00e9 \u2603/x y"),
    ],
)
def test_to_editor(box: str, editor: str) -> None:
    """Box paths under a rule come back in the editor's style, longest box prefix first."""
    result = to_editor(box, rules_of(*BOTH_WAYS))
    assert result is not None
    assert result.path == editor


@pytest.mark.parametrize(
    "box",
    [
        "/etc/passwd",  # under no rule
        "/workspacex/a",  # whole components only
        "/Workspace/a",  # the box is case-sensitive
        "/workspace/../etc",  # climbs out
        "/workspace/a/../../etc",
        "workspace/a",  # not absolute
        "",
        "C:\\win\\a",  # not a box path
        "/workspace/a\x00b",
        "/win/a:b",  # Windows cannot name these
        "/win/a\\b",
        "/win/what?",
        "/wsl/a|b",
    ],
)
def test_to_editor_leaves_what_it_cannot_map(box: str) -> None:
    """A box path under no rule, climbing out, or unnameable on the editor's system: None."""
    assert to_editor(box, rules_of(*BOTH_WAYS)) is None


def test_rules_onto_one_box_folder_follow_the_editors_own() -> None:
    """A Mac and a WSL rule onto one workspace: the rule the editor used picks the spelling."""
    mac, wsl = rules_of("/Users/alice=/workspace", "//wsl.localhost/Ubuntu/home/alice=/workspace")
    assert to_editor("/workspace/a", (mac, wsl)) == Translated("/Users/alice/a", mac)
    found = to_editor("/workspace/a", (mac, wsl), prefer=wsl)
    assert found == Translated("\\\\wsl.localhost\\Ubuntu\\home\\alice\\a", wsl)


@pytest.mark.parametrize(
    ("editor", "box"),
    [
        ("/Users/alice/p", "/workspace/p"),
        ("c:\\users\\alice\\p", "/win/p"),
        ("\\\\wsl.localhost\\Ubuntu\\home\\alice", "/wsl"),
        ("/Users/alice/../bob", None),
        ("/elsewhere", None),  # no fallback here: that is the session-opening rewrite's
        ("relative", None),
    ],
)
def test_to_box_without_fallback(editor: str, box: str | None) -> None:
    """to_box maps by rules only; under none (or climbing out) it is None."""
    result = to_box(editor, rules_of(*BOTH_WAYS))
    assert (result.path if result else None) == box


def test_very_long_paths_are_mapped_without_trouble() -> None:
    """Tens of thousands of components map both ways, and a deep climb out is still caught."""
    rest = "/".join(f"d{i}" for i in range(20_000))
    rules = rules_of(*BOTH_WAYS)
    there = to_box(f"/Users/alice/{rest}", rules)
    assert there is not None
    assert there.path == f"/workspace/{rest}"
    back = to_editor(there.path, rules)
    assert back is not None
    assert back.path == f"/Users/alice/{rest}"
    assert to_editor("/workspace/" + "../" * 30_000 + "etc", rules) is None


# Names the editor's system can hold; '=' left out so that generated rules split where meant.
NAMES = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='\\/:*?"<>|='),
    min_size=1,
    max_size=6,
).filter(lambda name: name not in (".", "..") and name.strip() == name)
ROOTS = st.sampled_from(["/", "C:\\", "d:\\", "\\\\wsl$\\Ubuntu\\", "\\\\Srv\\share\\"])


@st.composite
def rule_sets(draw: st.DrawFn) -> tuple[CwdRule, ...]:
    """Rules whose editor folders, and whose box folders, lie outside one another."""
    count = draw(st.integers(1, 4))
    rules = []
    for i in range(count):
        root = draw(ROOTS)
        parts = [f"r{i}", *draw(st.lists(NAMES, max_size=2))]
        separator = "/" if root == "/" else "\\"
        box = "/" + "/".join([f"b{i}", *draw(st.lists(NAMES, max_size=2))])
        rules.append(parse_rule(root + separator.join(parts) + "=" + box))
    return tuple(rules)


@given(rule_sets(), st.data())
def test_editor_to_box_to_editor_gives_the_path_back(
    rules: tuple[CwdRule, ...], data: st.DataObject
) -> None:
    """A canonical editor path under a rule (its prefix as in the rule, the editor's own
    separator, no '.', '..' or empty components) comes back the same from the box."""
    rule = data.draw(st.sampled_from(rules))
    editor = rule.client.text(data.draw(st.lists(NAMES, max_size=4)))
    there = to_box(editor, rules)
    assert there is not None
    back = to_editor(there.path, rules, prefer=there.rule)
    assert back is not None
    assert back.path == editor


@given(rule_sets(), st.data())
def test_box_to_editor_to_box_gives_the_path_back(
    rules: tuple[CwdRule, ...], data: st.DataObject
) -> None:
    """A canonical box path under a rule comes back the same from the editor."""
    rule = data.draw(st.sampled_from(rules))
    box = "/".join([rule.agent_path, *data.draw(st.lists(NAMES, max_size=4))])
    there = to_editor(box, rules)
    assert there is not None
    back = to_box(there.path, rules)
    assert back is not None
    assert back.path == box


@given(st.text(max_size=40), st.sampled_from([(), BOTH_WAYS]))
def test_any_text_maps_or_not_never_raises(text: str, rules: tuple[str, ...]) -> None:
    """Whatever the text, both directions give a path or None, and never climb out."""
    parsed = rules_of(*rules)
    back = to_editor(text, parsed)
    there = to_box(text, parsed)
    if back is not None:
        assert back.rule is not None
        assert back.path.startswith(back.rule.client.text())
    if there is not None:
        assert there.rule is not None
        assert (there.path + "/").startswith(there.rule.agent_path.rstrip("/") + "/")


LINKS = {
    "/workspace/app/notes.md": "/root/.ssh/id_rsa",  # a link out of the folder
    "/workspace/app/inner.md": "/workspace/notes.md",  # a link inside it
    "/workspace/keys/new": "/root/.ssh/new",  # under a linked folder, not there yet
    "/workspace/twin/a": "/workspace2/a",  # a sibling folder whose name starts alike
}


def fake_realpath(links: dict[str, str]) -> Callable[[str], str]:
    """os.path.realpath on a box whose only links are ``links`` (path -> where it leads)."""
    return lambda path: links.get(path, path)


@pytest.mark.parametrize(
    ("box", "real"),
    [
        ("/workspace/app/notes.md", "/root/.ssh/id_rsa"),
        ("/workspace/keys/new", "/root/.ssh/new"),
        ("/workspace/twin/a", "/workspace2/a"),
        ("/workspace/x/../app/notes.md", "/root/.ssh/id_rsa"),  # checked as the editor gets it
        ("/workspace/app/inner.md", None),
        ("/workspace/app/plain.md", None),
        ("/workspace", None),
        ("/workspace/", None),
    ],
)
def test_a_path_whose_links_lead_out_of_its_folder(box: str, real: str | None) -> None:
    """A box path under a rule is outside it when its real path (links followed) is: the
    real path, else None."""
    rule = parse_rule("/Users/alice=/workspace")
    assert real_path_outside(box, rule, fake_realpath(LINKS)) == real


@pytest.mark.parametrize(
    ("links", "real"),
    [
        ({"/workspace": "/mnt/ws", "/workspace/a": "/mnt/ws/a"}, None),
        ({"/workspace": "/mnt/ws", "/workspace/a": "/mnt/other/a"}, "/mnt/other/a"),
        ({"/workspace/a": "/workspace"}, None),
    ],
)
def test_the_rules_folder_is_resolved_too(links: dict[str, str], real: str | None) -> None:
    """The mapped folder may itself be a link: the path is checked against where it leads."""
    rule = parse_rule("/Users/alice=/workspace")
    assert real_path_outside("/workspace/a", rule, fake_realpath(links)) == real


def test_a_rule_onto_the_root_holds_every_real_path() -> None:
    """Under a rule mapping the box's / nothing can lead out."""
    rule = parse_rule("/Users/alice=/")
    assert real_path_outside("/a", rule, fake_realpath({"/a": "/etc/shadow"})) is None
