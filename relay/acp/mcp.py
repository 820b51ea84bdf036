"""The agent's own MCP servers: the ``--mcp-servers`` file, merging them into a request,
and hiding their values from everyone but the agent.

Pure. The file is a JSON array of ACP v1 McpServer objects; ``${VAR}`` in any string
is expanded from the environment passed in, so tokens stay out of the file. Merging
follows ``--mcp-merge`` and ``--drop-client-stdio-mcp``, and withholds transports the
agent did not declare in ``agentCapabilities.mcpCapabilities``. A request the relay
merged its servers into is shown to watchers and traces by :func:`hide_injected`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from relay.core import strictjson
from relay.core.redaction import REDACTED

Merge = Literal["append", "replace"]
MERGES: tuple[Merge, ...] = ("append", "replace")
McpServer = dict[str, Any]
# A server is a few levels deep (the array, the server, its env or headers, an entry, a
# _meta); every session request carries them, and the relay writes those within
# strictjson.MAX_DEPTH.
MAX_DEPTH = 32

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FIELDS = {
    "stdio": ({"name", "command"}, {"args", "env", "type", "_meta"}),
    "http": ({"name", "url", "type"}, {"headers", "_meta"}),
    "sse": ({"name", "url", "type"}, {"headers", "_meta"}),
}


class McpConfigError(ValueError):
    """The ``--mcp-servers`` file is wrong; the message says where and how."""


def kind_of(server: Mapping[str, Any]) -> str:
    """``stdio`` (v1 has no ``type`` for it), ``http``, ``sse``, or the unknown type."""
    kind = server.get("type", "stdio")
    return kind if isinstance(kind, str) else repr(kind)


def load_servers(text: str, env: Mapping[str, str], *, source: str) -> tuple[McpServer, ...]:
    """Parse, expand ``${VAR}`` and validate the file's servers."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise McpConfigError(f"{source}: not valid JSON: {exc}") from exc
    except RecursionError:
        data = None  # nested past what the parser can follow
    if data is None or strictjson.deeper_than(data, MAX_DEPTH):
        raise McpConfigError(
            f"{source}: nested too deeply (arrays or objects more than {MAX_DEPTH} levels "
            "inside one another); a server is an object of strings and arrays"
        )
    if not isinstance(data, list):
        raise McpConfigError(f"{source}: expected a JSON array of MCP server objects")
    servers = tuple(
        _check(_expand(s, env, f"{source}[{i}]"), f"{source}[{i}]") for i, s in enumerate(data)
    )
    names = [s["name"] for s in servers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise McpConfigError(f"{source}: server names must be unique, repeated: {duplicates}")
    return servers


def expanded_values(text: str, env: Mapping[str, str]) -> set[str]:
    """Every value ``${VAR}`` stands for in the file: to be kept out of logs and traces."""
    return {env[name] for name in _VAR.findall(text) if env.get(name)}


def _expand(value: Any, env: Mapping[str, str], where: str) -> Any:
    if isinstance(value, str):
        return _VAR.sub(lambda m: _lookup(m.group(1), env, where), value)
    if isinstance(value, list):
        return [_expand(v, env, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _expand(v, env, f"{where}.{k}") for k, v in value.items()}
    return value


def _lookup(name: str, env: Mapping[str, str], where: str) -> str:
    if name not in env:
        raise McpConfigError(
            f"{where}: ${{{name}}} is not set in the relay's environment; "
            f"set {name} before starting the relay"
        )
    return env[name]


def _check(server: Any, where: str) -> McpServer:
    if not isinstance(server, dict):
        raise McpConfigError(f"{where}: expected an object, got {type(server).__name__}")
    kind = kind_of(server)
    if kind not in _FIELDS:
        raise McpConfigError(f"{where}: unknown type {kind!r}; use http, sse, or none for stdio")
    required, optional = _FIELDS[kind]
    missing = sorted(required - server.keys())
    unknown = sorted(server.keys() - required - optional)
    if missing or unknown:
        raise McpConfigError(f"{where}: {_field_problems(kind, missing, unknown)}")
    _check_strings(server, where, kind)
    return _normalized(server, kind)


def _field_problems(kind: str, missing: list[str], unknown: list[str]) -> str:
    problems = []
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if unknown:
        problems.append(f"unknown field {', '.join(unknown)}")
    return f"{kind} server: " + "; ".join(problems)


def _check_strings(server: McpServer, where: str, kind: str) -> None:
    main = ("name", "command") if kind == "stdio" else ("name", "url")
    for key in main:
        if not isinstance(server[key], str) or not server[key]:
            raise McpConfigError(f"{where}.{key}: expected a non-empty string")
    if kind != "stdio" and not re.match(r"^https?://", server["url"]):
        raise McpConfigError(f"{where}.url: expected an http:// or https:// URL")
    args = server.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpConfigError(f"{where}.args: expected an array of strings")
    pairs_key = "env" if kind == "stdio" else "headers"
    if not _is_name_values(server.get(pairs_key, [])):
        raise McpConfigError(
            f'{where}.{pairs_key}: expected an array of {{"name": ..., "value": ...}} strings'
        )


def _is_name_values(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, dict)
        and set(v) <= {"name", "value", "_meta"}
        and isinstance(v.get("name"), str)
        and isinstance(v.get("value"), str)
        for v in value
    )


def _normalized(server: McpServer, kind: str) -> McpServer:
    """The ACP v1 wire shape: stdio has no ``type``; list fields always present."""
    out = {k: v for k, v in server.items() if not (kind == "stdio" and k == "type")}
    if kind == "stdio":
        out.setdefault("args", [])
        out.setdefault("env", [])
    else:
        out.setdefault("headers", [])
    return out


@dataclass(frozen=True)
class McpPolicy:
    """The relay's servers and how they are merged."""

    servers: Sequence[McpServer] = ()
    merge: Merge = "append"
    drop_client_stdio: bool = False


@dataclass(frozen=True)
class Capabilities:
    """Transports the agent accepts beyond stdio (from its ``initialize`` reply)."""

    http: bool = False
    sse: bool = False

    @classmethod
    def from_initialize(cls, result: Mapping[str, Any]) -> Capabilities:
        agent = result.get("agentCapabilities")
        mcp = agent.get("mcpCapabilities") if isinstance(agent, dict) else None
        if not isinstance(mcp, dict):
            return cls()
        return cls(http=mcp.get("http") is True, sse=mcp.get("sse") is True)

    def allows(self, kind: str) -> bool:
        return kind == "stdio" or (kind == "http" and self.http) or (kind == "sse" and self.sse)


@dataclass
class MergeReport:
    """What a merge did, by server name only (never header or env values)."""

    injected: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # client stdio servers dropped
    overridden: list[str] = field(default_factory=list)  # client servers replaced on a clash
    withheld: list[str] = field(default_factory=list)  # relay servers the agent cannot take


def merge(
    client: Sequence[Any], policy: McpPolicy, caps: Capabilities
) -> tuple[list[Any], MergeReport]:
    """The request's new ``mcpServers`` and a report of what changed."""
    report = MergeReport()
    ours = [s for s in policy.servers if caps.allows(kind_of(s))]
    report.withheld = [s["name"] for s in policy.servers if not caps.allows(kind_of(s))]
    report.injected = [s["name"] for s in ours]
    if policy.merge == "replace":
        report.overridden = [_name(s) for s in client]
        return [dict(s) for s in ours], report
    kept = _client_kept(client, policy, {s["name"] for s in ours}, report)
    return kept + [dict(s) for s in ours], report


def _client_kept(
    client: Sequence[Any], policy: McpPolicy, our_names: set[str], report: MergeReport
) -> list[Any]:
    kept = []
    for server in client:
        if policy.drop_client_stdio and isinstance(server, dict) and kind_of(server) == "stdio":
            report.dropped.append(_name(server))
        elif _name(server) in our_names:
            report.overridden.append(_name(server))
        else:
            kept.append(server)
    return kept


def _name(server: Any) -> str:
    name = server.get("name") if isinstance(server, dict) else None
    return name if isinstance(name, str) else "(unnamed)"


# -- the relay's servers, hidden --------------------------------------------------------


def hide_injected(
    line: bytes, injected: Sequence[str], redact_text: Callable[[str], str]
) -> tuple[bytes, list[str]] | None:
    """A session request the relay merged its servers into, as watchers and traces see it.

    The servers named in ``injected`` (the merge's ``injected``) came from the relay's
    ``--mcp-servers`` file, where ``${VAR}`` may have put tokens into any string, and the
    file itself may hold literal ones. In each of them every header and env value becomes
    ``[redacted]``, a URL's userinfo too, and every other string (URL, command, args,
    header and env names, ``_meta``) goes through ``redact_text``, which removes every
    expanded value (each registered as a secret when the file was read). The line is
    written again as the rewrite wrote it (:func:`relay.core.strictjson.dumps`), so
    nothing else changes. Returns the line and the names of the servers whose values
    were hidden; None when the line cannot be read (the caller then shows nothing of it).
    """
    if not injected:
        return line, []
    try:
        message = strictjson.loads(line, max_bytes=len(line))
    except strictjson.JsonRefused:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    entries = params.get("mcpServers") if isinstance(params, dict) else None
    if not isinstance(entries, list):
        return line, []
    names = set(injected)
    hidden = []
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name in names:
            shown = _hidden_server(entry, redact_text)
            if shown != entry:
                entries[i] = shown
                hidden.append(name)
    if not hidden:
        return line, []
    return strictjson.dumps(message), hidden


def _hidden_server(server: dict[str, Any], redact_text: Callable[[str], str]) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for key, value in server.items():
        if key in ("headers", "env") and isinstance(value, list):
            shown[key] = [_hidden_pair(pair, redact_text) for pair in value]
        elif key == "url" and isinstance(value, str):
            shown[key] = redact_text(_without_userinfo(value))
        else:
            shown[key] = _hidden_strings(value, redact_text)
    return shown


def _hidden_pair(pair: Any, redact_text: Callable[[str], str]) -> Any:
    """A header or env entry: its value hidden whatever it is, the rest redacted."""
    if not isinstance(pair, dict):
        return _hidden_strings(pair, redact_text)
    return {
        key: REDACTED if key == "value" else _hidden_strings(value, redact_text)
        for key, value in pair.items()
    }


def _hidden_strings(value: Any, redact_text: Callable[[str], str]) -> Any:
    """``value`` with ``redact_text`` applied to every string in it (its keys are the
    file's own: ``${VAR}`` expands values only)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [_hidden_strings(member, redact_text) for member in value]
    if isinstance(value, dict):
        return {key: _hidden_strings(member, redact_text) for key, member in value.items()}
    return value


def _without_userinfo(url: str) -> str:
    """``https://user:token@host/...`` as ``https://[redacted]@host/...``."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if not sep or "@" not in authority:
        return url
    return f"{scheme}://{REDACTED}@{authority.rpartition('@')[2]}{slash}{path}"
