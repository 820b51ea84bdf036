"""Translate a client's filesystem path (macOS, Linux, Windows, WSL by UNC) to the agent's.

Pure. ``--cwd-map CLIENT_PREFIX=AGENT_PATH`` rules are matched on whole path components,
longest prefix first; the rest of the path is carried over below the agent path. ``.``
components are dropped; ``..`` is resolved below the matched prefix and may not climb
out of it. Whether the result exists is asked of a function passed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

Fallback = Literal["workspace", "keep", "reject"]
FALLBACKS: tuple[Fallback, ...] = ("workspace", "keep", "reject")

_DRIVE = re.compile(r"^([A-Za-z]):[\\/]")
_WSL_HOSTS = ("wsl.localhost", "wsl$")


@dataclass(frozen=True)
class ClientPath:
    """A parsed absolute client path: its root (``/``, ``c:``, ``//host/share``) and parts."""

    root: str
    parts: tuple[str, ...]
    folds_case: bool  # Windows roots compare case-insensitively

    def key(self) -> tuple[str, ...]:
        parts = tuple(p.lower() for p in self.parts) if self.folds_case else self.parts
        return (self.root, *parts)


def parse_client_path(text: str) -> ClientPath | None:
    """Parse an absolute POSIX, Windows drive or UNC path; None when it is not absolute."""
    drive = _DRIVE.match(text)
    if drive:
        return ClientPath(drive.group(1).lower() + ":", _parts(text[3:]), True)
    if text[:2] in ("\\\\", "//"):
        return _parse_unc(text[2:])
    if text.startswith("/"):
        return ClientPath("/", _parts(text[1:], "/"), False)
    return None


def _parse_unc(rest: str) -> ClientPath | None:
    pieces = _parts(rest)
    if len(pieces) < 2:
        return None
    host, share = pieces[0].lower(), pieces[1].lower()
    if host in _WSL_HOSTS:
        host = "wsl"
    return ClientPath(f"//{host}/{share}", pieces[2:], host != "wsl")


def _parts(text: str, separators: str = "\\/") -> tuple[str, ...]:
    pattern = "[" + re.escape(separators) + "]"
    return tuple(p for p in re.split(pattern, text) if p not in ("", "."))


@dataclass(frozen=True)
class CwdRule:
    """One ``--cwd-map`` rule."""

    client: ClientPath
    agent_path: str
    text: str  # as the user wrote it, for messages


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
    rule = _longest_match(client, policy.rules)
    if rule is None:
        return _fallback(text, policy)
    rest = _resolve_dots(client.parts[len(rule.client.parts) :])
    if rest is None:
        return PathRefused(f"it climbs out of {rule.agent_path} (mapped by {rule.text})")
    return Translated(_join(rule.agent_path, rest), rule)


def _longest_match(client: ClientPath, rules: Sequence[CwdRule]) -> CwdRule | None:
    key = client.key()
    matches = [r for r in rules if key[: len(r.client.key())] == r.client.key()]
    return max(matches, key=lambda r: len(r.client.parts), default=None)


def _fallback(text: str, policy: CwdPolicy) -> Translated | PathRefused:
    if policy.fallback == "workspace":
        return Translated(policy.workspace, None)
    if policy.fallback == "reject":
        return PathRefused("no --cwd-map rule matches it and --cwd-fallback is reject")
    return Translated(text, None, kept=True)


def _resolve_dots(parts: Sequence[str]) -> list[str] | None:
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
