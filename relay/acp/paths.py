"""Translate paths between the editor's machine (macOS, Linux, Windows, WSL by UNC) and the box.

Pure. ``--cwd-map CLIENT_PREFIX=AGENT_PATH`` rules are matched on whole path components,
longest prefix first; the rest of the path is carried over below the other side's prefix.
``.`` components are dropped; ``..`` is resolved below the matched prefix and may not climb
out of it. Whether a result exists is asked of a function passed in.

Editor to box (:func:`translate`, :func:`to_box`) gives the box's POSIX path. Box to editor
(:func:`to_editor`) gives the path in the editor's own style: the rule's prefix spelled as
written in the rule, then ``/`` on POSIX and ``\\`` on Windows drive and UNC paths. A path
is *canonical* when it is spelled exactly so (the prefix of the rule that matches it as
written, that separator only, no ``.``, ``..``, empty or trailing components); for
canonical paths, editor -> box -> editor and box -> editor -> box give the path back,
provided no rule's folder lies inside another rule's on the side being matched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

Fallback = Literal["workspace", "keep", "reject"]
FALLBACKS: tuple[Fallback, ...] = ("workspace", "keep", "reject")

_DRIVE = re.compile(r"^([A-Za-z]):[\\/]")
_WSL_HOSTS = ("wsl.localhost", "wsl$")
# Characters a Windows file name cannot hold: a box name with one has no editor path.
_NOT_ON_WINDOWS = re.compile(r'[\\/:*?"<>|\x00-\x1f]')


@dataclass(frozen=True)
class ClientPath:
    """A parsed absolute client path: its root (``/``, ``c:``, ``//host/share``) and parts."""

    root: str
    parts: tuple[str, ...]
    folds_case: bool  # Windows roots compare case-insensitively
    shown_root: str = field(default="", compare=False)  # as written: "/", "C:\\", "\\\\h\\s"

    def key(self) -> tuple[str, ...]:
        parts = tuple(p.lower() for p in self.parts) if self.folds_case else self.parts
        return (self.root, *parts)

    @property
    def on_windows(self) -> bool:
        """A drive or UNC path: backslash-separated, with Windows' rules for names."""
        return self.root != "/"

    def text(self, below: Sequence[str] = ()) -> str:
        """This path, then ``below``, spelled in the editor's style (see the module's doc)."""
        parts = (*self.parts, *below)
        if not self.on_windows:
            return "/" + "/".join(parts)
        if self.root.endswith(":"):
            return (self.shown_root or self.root.upper() + "\\") + "\\".join(parts)
        root = self.shown_root or self.root.replace("/", "\\")
        return root + "".join("\\" + part for part in parts)


def parse_client_path(text: str) -> ClientPath | None:
    """Parse an absolute POSIX, Windows drive or UNC path; None when it is not absolute."""
    drive = _DRIVE.match(text)
    if drive:
        letter = drive.group(1)
        return ClientPath(letter.lower() + ":", _parts(text[3:]), True, letter + ":\\")
    if text[:2] in ("\\\\", "//"):
        return _parse_unc(text[2:])
    if text.startswith("/"):
        return ClientPath("/", _parts(text[1:], "/"), False, "/")
    return None


def _parse_unc(rest: str) -> ClientPath | None:
    pieces = _parts(rest)
    if len(pieces) < 2:
        return None
    host, share = pieces[0].lower(), pieces[1].lower()
    if host in _WSL_HOSTS:
        host = "wsl"
    shown = f"\\\\{pieces[0]}\\{pieces[1]}"
    return ClientPath(f"//{host}/{share}", pieces[2:], host != "wsl", shown)


def _parts(text: str, separators: str = "\\/") -> tuple[str, ...]:
    pattern = "[" + re.escape(separators) + "]"
    return tuple(p for p in re.split(pattern, text) if p not in ("", "."))


@dataclass(frozen=True)
class CwdRule:
    """One ``--cwd-map`` rule."""

    client: ClientPath
    agent_path: str
    text: str  # as the user wrote it, for messages

    @cached_property
    def agent_parts(self) -> tuple[str, ...]:
        return tuple(part for part in self.agent_path.split("/") if part)

    def editor_path(self, below: Sequence[str]) -> str | None:
        """The editor's path of ``agent_path`` + ``below``; None when the editor's system
        cannot name it (a Windows name with ``\\``, ``:`` or another character it forbids)."""
        if self.client.on_windows and any(_NOT_ON_WINDOWS.search(part) for part in below):
            return None
        return self.client.text(below)


def parse_rule(text: str) -> CwdRule:
    """Parse ``CLIENT_PREFIX=AGENT_PATH``; ValueError says what is wrong."""
    client_text, sep, agent_path = text.rpartition("=/")
    if not sep or not client_text:
        why = _relative_agent_side(text)
        raise ValueError(f"bad --cwd-map {text!r}: {why}expected CLIENT_PREFIX=/AGENT/PATH")
    client = parse_client_path(client_text)
    if client is None:
        raise ValueError(f"bad --cwd-map {text!r}: {client_text!r} is not an absolute path")
    if ".." in client.parts:
        raise ValueError(f"bad --cwd-map {text!r}: the client prefix may not contain '..'")
    agent_parts = _parts(agent_path, "/")
    if ".." in agent_parts:
        raise ValueError(f"bad --cwd-map {text!r}: the agent path may not contain '..'")
    return CwdRule(client, "/" + "/".join(agent_parts), text)


def _relative_agent_side(text: str) -> str:
    """``"the agent path 'x' is not absolute; "`` for ``/client=x``, else nothing."""
    client_text, sep, agent_path = text.rpartition("=")
    if sep and agent_path and parse_client_path(client_text) is not None:
        return f"the agent path {agent_path!r} is not absolute; "
    return ""


@dataclass(frozen=True)
class CwdPolicy:
    """How client paths become agent paths."""

    rules: Sequence[CwdRule]
    fallback: Fallback
    workspace: str
    must_exist: bool


@dataclass(frozen=True)
class Translated:
    """The agent-side path, and the rule that produced it (None: a fallback)."""

    path: str
    rule: CwdRule | None
    kept: bool = False  # passed unchanged by --cwd-fallback keep: not checked, not rewritten


@dataclass(frozen=True)
class PathRefused:
    """The path cannot be given to the agent; ``why`` says so in words."""

    why: str
    agent_path: str | None = None


def translate(
    text: str, policy: CwdPolicy, exists: Callable[[str], bool]
) -> Translated | PathRefused:
    """Map one client path to the agent's filesystem, or say why not."""
    client = parse_client_path(text)
    if client is None:
        return PathRefused(f"{text!r} is not an absolute path (ACP requires absolute paths)")
    result = _apply_rules(client, text, policy)
    if isinstance(result, Translated) and result.kept:
        return result
    if isinstance(result, Translated) and policy.must_exist and not exists(result.path):
        return PathRefused(f"{result.path} does not exist on the agent's machine", result.path)
    return result


def _apply_rules(client: ClientPath, text: str, policy: CwdPolicy) -> Translated | PathRefused:
    rule = match_editor(client, policy.rules)
    if rule is None:
        return _fallback(text, policy)
    rest = resolve_dots(client.parts[len(rule.client.parts) :])
    if rest is None:
        return PathRefused(f"it climbs out of {rule.agent_path} (mapped by {rule.text})")
    return Translated(_join(rule.agent_path, rest), rule)


def to_box(text: str, rules: Sequence[CwdRule]) -> Translated | None:
    """The box's path of an editor path under a rule; None under none (no fallback here)."""
    client = parse_client_path(text)
    if client is None:
        return None
    rule = match_editor(client, rules)
    if rule is None:
        return None
    rest = resolve_dots(client.parts[len(rule.client.parts) :])
    return None if rest is None else Translated(_join(rule.agent_path, rest), rule)


def parse_box_path(text: str) -> tuple[str, ...] | None:
    """The components of an absolute path of the box (POSIX); None when it is not one."""
    if not text.startswith("/") or "\x00" in text:
        return None
    return _parts(text[1:], "/")


def to_editor(
    text: str, rules: Sequence[CwdRule], prefer: CwdRule | None = None
) -> Translated | None:
    """The editor's path of a box path under a rule; None under none, or climbing out.

    The longest box prefix wins; rules that map the same box folder (a Mac and a WSL
    rule onto one workspace) are told apart by ``prefer``, the rule this connection's
    editor was last translated by, else the first given.
    """
    parts = parse_box_path(text)
    if parts is None:
        return None
    found = match_box(parts, rules, prefer)
    if found is None:
        return None
    rule, rest = found
    path = rule.editor_path(rest)
    return None if path is None else Translated(path, rule)


def real_path_outside(text: str, rule: CwdRule, resolve: Callable[[str], str]) -> str | None:
    """Where the box path ``text``, which ``rule`` maps, really is when its symbolic links
    lead out of the rule's folder; None when it stays inside.

    ``resolve`` is the box's ``os.path.realpath``: it follows every link, and resolves a
    path that does not exist yet as far as it exists (its parent). The path checked is the
    one the editor is given (``..`` applied by name, below the folder), and the folder is
    resolved too (it may itself be a link).
    """
    parts = parse_box_path(text)
    rest = None if parts is None else resolve_dots(parts[len(rule.agent_parts) :])
    if rest is None:
        return None  # not under the rule: to_editor maps no such path
    real = resolve(_join(rule.agent_path, rest))
    folder = resolve(rule.agent_path).rstrip("/") + "/"
    return None if (real + "/").startswith(folder) else real


def match_box(
    parts: Sequence[str], rules: Sequence[CwdRule], prefer: CwdRule | None = None
) -> tuple[CwdRule, list[str]] | None:
    """The rule whose box folder holds ``parts`` (see :func:`to_editor`) and the rest,
    ``..`` resolved; None when no rule holds it or the rest climbs out."""
    held = [r for r in rules if tuple(parts[: len(r.agent_parts)]) == r.agent_parts]
    if not held:
        return None
    longest = max(len(r.agent_parts) for r in held)
    best = [r for r in held if len(r.agent_parts) == longest]
    rule = prefer if prefer in best else best[0]
    rest = resolve_dots(parts[longest:])
    return None if rest is None else (rule, rest)


def match_editor(client: ClientPath, rules: Sequence[CwdRule]) -> CwdRule | None:
    """The rule with the longest editor prefix holding ``client``, if any."""
    key = client.key()
    matches = [r for r in rules if key[: len(r.client.key())] == r.client.key()]
    return max(matches, key=lambda r: len(r.client.parts), default=None)


def _fallback(text: str, policy: CwdPolicy) -> Translated | PathRefused:
    if policy.fallback == "workspace":
        return Translated(policy.workspace, None)
    if policy.fallback == "reject":
        return PathRefused("no --cwd-map rule matches it and --cwd-fallback is reject")
    return Translated(text, None, kept=True)


def resolve_dots(parts: Sequence[str]) -> list[str] | None:
    """``parts`` with ``..`` applied; None when one climbs above the first."""
    out: list[str] = []
    for part in parts:
        if part != "..":
            out.append(part)
        elif not out:
            return None
        else:
            out.pop()
    return out


def _join(base: str, rest: Sequence[str]) -> str:
    if not rest:
        return base
    return base.rstrip("/") + "/" + "/".join(rest)


def describe_rules(policy: CwdPolicy) -> list[str]:
    """The mappings in force, as the user wrote them, plus the fallback."""
    fallback = f"otherwise: {policy.fallback}"
    if policy.fallback == "workspace":
        fallback += f" ({policy.workspace})"
    return [rule.text for rule in policy.rules] + [fallback]
