"""``file://`` URIs (RFC 8089, as editors send them) between the editor's machine and the box.

Pure. An editor names files it attaches to a prompt by URI: ``file:///Users/a/x.py``,
``file:///C:/Users/a/x.py`` (or ``file:///c%3A/...``), ``file://wsl.localhost/Ubuntu/home/a/x``
(a UNC path: host, then share). The path is percent-decoded (UTF-8), mapped by the
``--cwd-map`` rules like a path (:mod:`relay.acp.paths`), and encoded again. The part
below the matched folder keeps its spelling as it came (its percent-encoding included)
unless ``.`` or ``..`` had to be resolved; the query and fragment are kept as they are.

Anything the relay cannot read unambiguously gives None, and the caller leaves the URI as
it is: another scheme, invalid percent-encoding or UTF-8, an encoded ``/``, ``\\`` or NUL
in a segment, a host with a port or user, a path under no rule or climbing out of it. A
URI is translated whole or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote_to_bytes

from relay.acp.paths import (
    ClientPath,
    CwdRule,
    Translated,
    match_box,
    match_editor,
    parse_client_path,
    resolve_dots,
)

_SCHEME = "file:"
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST = re.compile(r"^[A-Za-z0-9._$-]*$")  # a name: no port, user or IP literal
_DRIVE = re.compile(r"^[A-Za-z][:|]$")  # "C:", or "C|" as older editors wrote it
_KEPT = "!$&'()*+,;=:@-._~"  # RFC 3986 pchar characters left unencoded


@dataclass(frozen=True)
class FileUri:
    """A ``file:`` URI taken apart: host ("" for this machine), path segments as spelled
    and decoded, and the query and fragment as spelled."""

    host: str
    segments: tuple[str, ...]
    names: tuple[str, ...]
    suffix: str

    @property
    def trailing_slash(self) -> bool:
        return len(self.names) > 1 and self.names[-1] == ""

    def body(self, skip: int = 0) -> tuple[str, ...]:
        """The decoded names after ``skip`` root segments, without a trailing slash's ''."""
        names = self.names[skip:]
        return names[:-1] if self.trailing_slash and names else names

    def clean(self) -> bool:
        """Whether the path needs no ``.``/``..`` resolving (then it is kept as spelled)."""
        return all(name not in ("", ".", "..") for name in self.body())


def parse_file_uri(uri: str) -> FileUri | None:
    """Take a ``file:`` URI apart; None when it is not one the relay reads unambiguously."""
    if uri[:5].lower() != _SCHEME:
        return None
    rest = uri[5:]
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    rest, suffix = rest[:cut], rest[cut:]
    host = ""
    if rest.startswith("//"):
        slash = rest.find("/", 2)
        named = _decoded(rest[2:slash]) if slash >= 0 else None
        if named is None or not _HOST.match(named):
            return None
        host, rest = ("" if named.lower() == "localhost" else named), rest[slash:]
    if not rest.startswith("/"):
        return None
    segments = tuple(rest[1:].split("/"))
    names = tuple(_decoded(segment) for segment in segments)
    if any(name is None for name in names):
        return None
    return FileUri(host, segments, tuple(n for n in names if n is not None), suffix)


def _decoded(segment: str) -> str | None:
    """The name a segment spells; None for bad percent-encoding, or a separator or NUL."""
    if "%" in segment:
        if _BAD_PERCENT.search(segment):
            return None
        try:
            segment = unquote_to_bytes(segment).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if "/" in segment or "\\" in segment or "\x00" in segment:
        return None
    return segment


def _encoded(names: Sequence[str]) -> list[str]:
    return [quote(name, safe=_KEPT) for name in names]


def _editor_path(uri: FileUri) -> tuple[ClientPath, int] | None:
    """The editor path a URI names, and how many of its segments make the path's root."""
    if uri.host:
        if not uri.names or uri.names[0] in ("", ".", ".."):
            return None
        client = parse_client_path("//" + uri.host + "/" + "/".join(uri.names))
        return None if client is None else (client, 1)
    if uri.names and _DRIVE.match(uri.names[0]):
        client = parse_client_path(uri.names[0][0] + ":/" + "/".join(uri.names[1:]))
        return None if client is None else (client, 1)
    client = parse_client_path("/" + "/".join(uri.names))
    return None if client is None else (client, 0)


def _below(uri: FileUri, skip: int, rest: Sequence[str]) -> list[str]:
    """The segments below the matched folder: as spelled when clean, else encoded anew."""
    if uri.clean():
        return list(uri.segments[skip:])
    return _encoded(rest) + ([""] if uri.trailing_slash else [])


def uri_to_box(uri: str, rules: Sequence[CwdRule]) -> Translated | None:
    """The box's ``file:///`` URI for an editor's file URI under a rule, else None."""
    parsed = parse_file_uri(uri)
    located = None if parsed is None else _editor_path(parsed)
    if parsed is None or located is None:
        return None
    client, root = located
    rule = match_editor(client, rules)
    if rule is None:
        return None
    rest = resolve_dots(client.parts[len(rule.client.parts) :])
    if rest is None:
        return None
    below = _below(parsed, root + len(rule.client.parts), rest)
    path = "/".join(_encoded(rule.agent_parts) + below)
    return Translated("file:///" + path + parsed.suffix, rule)


def uri_to_editor(
    uri: str, rules: Sequence[CwdRule], prefer: CwdRule | None = None
) -> Translated | None:
    """The editor's file URI for a box ``file:`` URI under a rule, else None."""
    parsed = parse_file_uri(uri)
    if parsed is None or parsed.host:
        return None
    parts = [name for name in parsed.body() if name not in ("", ".")]
    found = match_box(parts, rules, prefer)
    if found is None:
        return None
    rule, rest = found
    if rule.editor_path(rest) is None:
        return None
    below = _below(parsed, len(rule.agent_parts), rest)
    head, folder = _editor_folder(rule.client)
    return Translated(head + "/".join(folder + below) + parsed.suffix, rule)


def _editor_folder(client: ClientPath) -> tuple[str, list[str]]:
    """``file://`` and host, then the segments of the rule's folder as the editor spells it."""
    folders = _encoded(client.parts)
    if not client.on_windows:
        return "file:///", folders
    shown = client.text()
    if client.root.endswith(":"):
        return "file:///", [shown[:2], *folders]
    host, share = shown.lstrip("\\").split("\\")[:2]
    return f"file://{host}/", [*_encoded([share]), *folders]
