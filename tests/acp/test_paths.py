"""Tests for relay.acp.paths: client paths of every OS mapped onto the agent's filesystem."""

from __future__ import annotations

import pytest

from relay.acp.paths import (
    ClientPath,
    CwdPolicy,
    Fallback,
    PathRefused,
    Translated,
    describe_rules,
    parse_client_path,
    parse_rule,
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
