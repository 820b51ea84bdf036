"""Settings for ``acp-relay serve`` from flags, ``ACP_RELAY_*`` environment and a TOML file.

Pure: the caller passes the parsed flags, the environment mapping, the config
file's text and the working directory; nothing here reads files or the process
state. Precedence is flag > environment > config file > default. The option table
(:data:`OPTIONS`, grouped by concern in :data:`GROUPS`) is the one source of the flags,
the variables, the file's keys, the fields of :class:`Settings`, the groups of ``--help``
and the tables in docs/configuration.md; ``connect``
and ``ticket`` declare their flags with the same :class:`Option`.
"""

from __future__ import annotations

import argparse
import difflib
import shlex
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from relay.acp.mcp import MERGES, Merge
from relay.acp.paths import FALLBACKS, CwdRule, Fallback, parse_rule
from relay.acp.rewrite import FILES_POLICIES, Files
from relay.config import convert, defaults
from relay.config.errors import UsageError

# Option and add_options live in relay.config.options (connect needs them without the rest); the
# names stay importable from here.
from relay.config.options import ENV_PREFIX as ENV_PREFIX
from relay.config.options import Option as Option
from relay.config.options import add_options as add_options
from relay.config.origins import ORIGIN_EXAMPLES, bracketed, check_origin_pattern, parse_listen
from relay.core.profile import MAX_GRACE_SECONDS, MAX_WINDOW

CONFIG_ENV = "ACP_RELAY_CONFIG"
SECRET_ENV = "ACP_RELAY_SECRET"
TICKET_ENV = defaults.TICKET_ENV
# Read by the other commands (connect), not by serve: no warning for them.
OTHER_COMMANDS_ENV = frozenset({TICKET_ENV})
# Not for the agent: systemd's credentials folder holds the relay's secret file.
PRIVATE_ENV = frozenset({"CREDENTIALS_DIRECTORY"})


class ConfigError(UsageError):
    """A setting is invalid; the message names its source, the problem and the fix."""


def parse_secrets(text: str, *, source: str = "secret") -> tuple[str, ...]:
    """Secrets, one per line (blank and ``#`` lines skipped); the first signs, all verify."""
    lines = (line.strip() for line in text.splitlines())
    secrets = tuple(line for line in lines if line and not line.startswith("#"))
    if not secrets:
        raise ConfigError(
            f"{source}: no secret found; put one secret per line "
            "(blank lines and lines starting with # are skipped)"
        )
    return secrets


def agent_environment(base: Mapping[str, str], extra: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``base`` without any ``ACP_RELAY_*`` variable (any case) nor systemd's
    ``CREDENTIALS_DIRECTORY``, then ``extra`` on top."""
    env = {
        k: v
        for k, v in base.items()
        if not k.upper().startswith(ENV_PREFIX) and k not in PRIVATE_ENV
    }
    env.update(extra)
    return env


# --- options


GROUPS: tuple[tuple[str, tuple[Option, ...]], ...] = (
    ("listening", (
        Option("listen", "address to listen on; IPv6 as [::1]:8765", defaults.LISTEN,
               "HOST:PORT", convert.from_text(parse_listen)),
        Option("path", "URL path of the WebSocket endpoint", defaults.PATH, "PATH",
               convert.url_path),
    )),
    ("tickets and admission", (
        Option("secret-file", f"file of ticket secrets, one per line: the first signs, all "
               f"verify; or put the secret itself in env {SECRET_ENV}", None, "FILE",
               convert.non_empty, is_path=True),
        Option("audience", "audience (aud) tickets must carry", None, "AUD", convert.non_empty,
               default_text="none, aud not checked"),
        Option("ticket-ttl", "seconds a ticket stays valid", defaults.TICKET_TTL, "SECONDS",
               convert.positive_seconds),
        Option("allow-origin", f"browser Origin allowed to connect: {ORIGIN_EXAMPLES}", (),
               "ORIGIN", convert.from_text(check_origin_pattern), repeatable=True,
               attribute="allow_origins",
               default_text="none, so only pages from localhost, 127.0.0.0/8 or [::1]"),
        Option("state-dir", "directory where spent ticket ids are kept across restarts "
               "(created if missing, mode 0700; refused if another user owns it or its group or "
               "others may write it; one relay at a time); without it a ticket used before a "
               "restart works once more within its lifetime", None, "DIR", convert.non_empty,
               default_text="none, spent tickets kept in memory only", is_path=True),
    )),
    ("the agent", (
        Option("agent", "agent command, split like a shell but never run by one", None,
               "COMMAND", convert.command, attribute="agent_argv"),
        Option("workspace", "directory the agent runs in", None, "DIR", convert.non_empty,
               default_text="current directory; under --dev a fresh one, removed at exit",
               is_path=True),
        Option("agent-env", "extra variable for the agent's environment", (), "NAME=VALUE",
               convert.env_entry, repeatable=True, default_text="none"),
        Option("agent-user", "run agents as this user (a name or uid; the relay must run as "
               "root), so that they can read neither the relay's secret nor its memory",
               None, "USER", convert.non_empty, default_text="none, the relay's own user"),
        Option("agent-group", "the agents' group under --agent-user", None, "GROUP",
               convert.non_empty, default_text="the --agent-user's primary group"),
        Option("kill-grace",
               "seconds an agent gets after stdin EOF before SIGTERM, then before SIGKILL",
               defaults.KILL_GRACE, "SECONDS", convert.seconds),
    )),
    ("paths and MCP", (
        Option("cwd-map", "map a client path prefix to the agent's: /Users/alice=/workspace, "
               "C:\\Users\\alice=/workspace, //wsl$/Ubuntu/home/alice=/workspace; longest wins",
               (), "CLIENT=AGENT", convert.from_text(parse_rule), repeatable=True,
               default_text="none"),
        Option("cwd-fallback", "when no --cwd-map rule matches: workspace (use --workspace), "
               "keep (pass unchanged) or reject", "workspace", "POLICY",
               convert.one_of(*FALLBACKS)),
        Option("cwd-must-exist", "refuse a translated cwd that does not exist on this machine",
               True, None, convert.boolean, is_flag=True, negatable=True, default_text="on"),
        Option("files", "who serves files and terminals to the agent: box (the editor's fs "
               "and terminal capabilities are withheld, the agent uses the box's own), shared "
               "(the editor's, reached through --cwd-map: the agent's paths are translated to "
               "the editor's) or pass (capabilities and the agent's paths pass unchanged)",
               "box", "POLICY", convert.one_of(*FILES_POLICIES)),
        Option("mcp-servers", "JSON file of MCP servers to add to every session; ${VAR} is "
               "expanded from the environment at start-up", None, "FILE", convert.non_empty,
               is_path=True),
        Option("mcp-merge", "append (the relay's server wins a name clash) or replace the "
               "client's mcpServers", "append", "MODE", convert.one_of(*MERGES)),
        Option("drop-client-stdio-mcp", "drop the client's stdio MCP servers (they name "
               "programs on the user's machine)", False, None, convert.boolean, is_flag=True,
               default_text="off"),
    )),
    ("resuming", (
        Option("resume-grace", "seconds a connection whose client opted in to resuming "
               "(acp-relay.resume.v1) waits for a resume after losing its socket, at most a week; "
               "0 turns resuming off", defaults.RESUME_GRACE, "SECONDS",
               convert.at_most(convert.seconds, float(MAX_GRACE_SECONDS),
                               f"{MAX_GRACE_SECONDS} s (a week)")),
        Option("resume-buffer", "agent output a resumable connection keeps until the client "
               "acknowledges it, in bytes or with KiB/MiB/GiB, at most 1TiB; when full the "
               "agent waits", defaults.RESUME_BUFFER, "SIZE",
               convert.at_most(convert.size, MAX_WINDOW, f"{MAX_WINDOW} bytes (1TiB)"),
               default_text="16MiB"),
    )),
    ("sharing", (
        Option("max-watchers", "watchers (acp-relay.watch.v1) one connection may have at once, "
               "besides its controlling socket; 0 turns sharing off",
               defaults.MAX_WATCHERS, "N", convert.count),
        Option("watch-history", "the conversation each connection keeps for its watchers, in "
               "bytes or with KiB/MiB/GiB (oldest whole messages dropped first); in memory "
               "only", defaults.WATCH_HISTORY, "SIZE", convert.size, default_text="1MiB"),
    )),
    ("warm agents", (
        Option("warm-agents", "agents kept started ahead of demand, each waiting with stdin "
               "open (same command, workspace and environment): a new socket takes one instead "
               "of waiting for a start; not connections (/busy stays false, --max-connections "
               "does not count them)", None, "N", convert.count, default_text="0; 1 under --dev"),
        Option("warm-max-age", "seconds a warm agent waits for a connection before it is "
               "replaced by a fresh one (for agents that read configuration or credentials at "
               "start-up); 0: never", defaults.WARM_MAX_AGE, "SECONDS", convert.seconds),
    )),
    ("limits", (
        Option("max-connections", "max sockets at once", defaults.MAX_CONNECTIONS, "N",
               convert.positive_int),
        Option("max-message-bytes", "largest WebSocket message, in bytes or with KiB/MiB/GiB",
               defaults.MAX_MESSAGE_BYTES, "SIZE", convert.size, default_text="64MiB"),
        Option("open-timeout", "seconds a client has to finish the WebSocket handshake",
               defaults.OPEN_TIMEOUT, "SECONDS", convert.positive_seconds),
        Option("ping-interval", "seconds between keepalive pings", defaults.PING_INTERVAL,
               "SECONDS", convert.positive_seconds),
        Option("ping-timeout", "seconds to wait for a pong before closing",
               defaults.PING_TIMEOUT, "SECONDS", convert.positive_seconds),
    )),
    ("observability", (
        Option("log-format", "log format: json, console or auto", None, "FORMAT",
               convert.log_format, default_text="auto: console on a terminal, else json"),
        Option("log-level", "log level: debug, info, warning or error", defaults.LOG_LEVEL,
               "LEVEL", convert.log_level),
        Option("trace-dir", "write one NDJSON trace file per connection (every message, "
               "both ways) into DIR, created if missing; for debugging", None, "DIR",
               convert.non_empty, default_text="none, no traces", is_path=True),
        Option("trace-max-bytes", "largest trace file, in bytes or with KiB/MiB/GiB; a full "
               "trace ends with a 'truncated' record", defaults.TRACE_MAX_BYTES, "SIZE",
               convert.size_at_least(defaults.MIN_TRACE_MAX_BYTES, "1KiB"), default_text="16MiB"),
        Option("metrics-listen", "also serve GET /metrics (Prometheus text format) on this "
               "address, e.g. for a scraper on another network than the proxy's; /metrics stays "
               "on the main address too", None, "HOST:PORT", convert.from_text(parse_listen),
               default_text="none, /metrics on the main address only"),
    )),
    ("dev", (
        Option("dev",
               "development mode, not for production: throwaway secret, demo agent unless "
               "--agent, ready ticket URLs on stdout, the dev console at /", False, None,
               convert.boolean, is_flag=True, default_text="off"),
        Option("dev-allow-remote",
               "let --dev listen on an address other than loopback (its console and tickets "
               "are then reachable from the network)", False, None, convert.boolean,
               is_flag=True, default_text="off"),
    )),
)  # fmt: skip
OPTIONS: tuple[Option, ...] = tuple(option for _, options in GROUPS for option in options)

_BY_DEST = {option.dest: option for option in OPTIONS}
_KNOWN_ENV = frozenset({CONFIG_ENV, SECRET_ENV, *(option.env for option in OPTIONS)})


def option_named(name: str) -> Option:
    """The ``serve`` option named ``name`` (e.g. to declare it for another command too)."""
    return _BY_DEST[name.replace("-", "_")]


@dataclass(frozen=True)
class Settings:
    """Resolved ``serve`` settings: one field per option (``listen`` as host and port),
    plus the secret from the environment and the config file that was read."""

    host: str
    port: int
    path: str
    agent_argv: tuple[str, ...] | None
    workspace: str
    agent_env: tuple[tuple[str, str], ...]
    secret_file: str | None
    secret_env: str | None
    allow_origins: tuple[str, ...]
    max_connections: int
    max_message_bytes: int
    ping_interval: float
    ping_timeout: float
    kill_grace: float
    ticket_ttl: float
    audience: str | None
    open_timeout: float
    log_format: str | None
    log_level: str
    dev: bool
    config_file: str | None
    cwd_map: tuple[CwdRule, ...] = ()
    cwd_fallback: Fallback = "workspace"
    cwd_must_exist: bool = True
    files: Files = "box"
    mcp_servers: str | None = None
    mcp_merge: Merge = "append"
    drop_client_stdio_mcp: bool = False
    trace_dir: str | None = None
    trace_max_bytes: int = defaults.TRACE_MAX_BYTES
    resume_grace: float = defaults.RESUME_GRACE
    resume_buffer: int = defaults.RESUME_BUFFER
    max_watchers: int = defaults.MAX_WATCHERS
    watch_history: int = defaults.WATCH_HISTORY
    state_dir: str | None = None
    metrics_listen: tuple[str, int] | None = None
    dev_allow_remote: bool = False
    agent_user: str | None = None
    agent_group: str | None = None
    warm_agents: int | None = None  # None: 0, or 1 under --dev
    warm_max_age: float = defaults.WARM_MAX_AGE
    # (name, source) of each setting not left to its default: "flag --listen",
    # "env ACP_RELAY_SECRET", "config file key kill-grace in relay.toml"
    given: tuple[tuple[str, str], ...] = ()
    workspace_given: bool = True  # False: --workspace unset, the current directory taken


# --- argparse


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per option, in one argument group per concern; flags
    not given stay out of the Namespace."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"TOML file of these options, keys named like the flags (env {CONFIG_ENV})",
    )
    for title, options in GROUPS:
        add_options(parser.add_argument_group(title), options)


# --- resolution


def config_file_path(flags: Mapping[str, object], env: Mapping[str, str]) -> str | None:
    """The config file named by ``--config``, else by ``ACP_RELAY_CONFIG``, else None."""
    flag = flags.get("config")
    if isinstance(flag, str) and flag:
        return flag
    return env.get(CONFIG_ENV) or None


def unknown_env_names(env: Mapping[str, str]) -> tuple[str, ...]:
    """``ACP_RELAY_*`` variables (any case) that match no option nor a variable another
    command reads (likely typos; worth a warning)."""
    known = _KNOWN_ENV | OTHER_COMMANDS_ENV
    return tuple(sorted(k for k in env if k.upper().startswith(ENV_PREFIX) and k not in known))


def known_env_names() -> frozenset[str]:
    """Every ``ACP_RELAY_*`` variable ``serve`` reads."""
    return _KNOWN_ENV


@dataclass(frozen=True)
class _Raw:
    value: object
    source: str
    shell_split: bool = False


def resolve(
    flags: Mapping[str, object],
    env: Mapping[str, str],
    file_text: str | None,
    *,
    cwd: str,
    file_name: str | None = None,
) -> Settings:
    """Settings from ``vars(namespace)``, the environment and the config file's text.

    Empty environment variables count as unset. Relative paths are taken
    against ``cwd``. Raises ConfigError naming the source of a bad value.
    """
    name = file_name if file_name is not None else config_file_path(flags, env)
    table = {} if file_text is None else _read_file(file_text, name)
    values = {each.field: resolve_option(each, flags, env, table) for each in OPTIONS}
    for each in OPTIONS:
        if each.is_path and values[each.field] is not None:
            values[each.field] = _absolute(values[each.field], cwd)
    host, port = values.pop("listen")
    workspace_given = values["workspace"] is not None
    values["workspace"] = values["workspace"] or _absolute(cwd, cwd)
    return Settings(
        host=host,
        port=port,
        workspace_given=workspace_given,
        secret_env=env.get(SECRET_ENV) or None,
        config_file=name if file_text is not None else None,
        given=_sources(flags, env, table, file_text is not None),
        **values,
    )


def _sources(
    flags: Mapping[str, object], env: Mapping[str, str], table: Mapping[str, _Raw], read: bool
) -> tuple[tuple[str, str], ...]:
    """Where each setting that is not its default came from, the config file and secret too."""
    found: list[tuple[str, str]] = []
    if read:
        found.append(("config", "flag --config" if flags.get("config") else f"env {CONFIG_ENV}"))
    if env.get(SECRET_ENV):
        found.append(("secret", f"env {SECRET_ENV}"))
    for each in OPTIONS:
        raw = _lookup(each, flags, env, table)
        if raw is not None:
            found.append((each.name, raw.source))
    return tuple(found)


def settings_given(settings: Settings) -> dict[str, dict[str, Any]]:
    """Each setting not left to its default: its value in effect and where it came from
    (``value`` and ``from``), for the start-up log. A secret is named by its source only, and
    ``--agent-env`` by its names only: their values are keys."""
    given: dict[str, dict[str, Any]] = {}
    for name, source in settings.given:
        entry: dict[str, Any] = {} if name == "secret" else {"value": _shown(settings, name)}
        given[name] = {**entry, "from": source}
    return given


def _shown(settings: Settings, name: str) -> Any:
    if name == "config":
        return settings.config_file
    if name == "listen":
        return f"{bracketed(settings.host)}:{settings.port}"
    if name == "agent":
        return shlex.join(settings.agent_argv or ())
    if name == "agent-env":
        return [variable for variable, _ in settings.agent_env]
    if name == "cwd-map":
        return [rule.text for rule in settings.cwd_map]
    value = getattr(settings, option_named(name).field)
    return list(value) if isinstance(value, tuple) else value


def resolve_some(
    options: Iterable[Option],
    flags: Mapping[str, object],
    env: Mapping[str, str],
    file_text: str | None,
    *,
    cwd: str,
    file_name: str | None = None,
) -> dict[str, Any]:
    """Some of serve's options, by ``dest``, layered as :func:`resolve` layers them all
    (for ``acp-relay ticket``, which reads the relay's secret, audience and ticket TTL)."""
    table = {} if file_text is None else _read_file(file_text, file_name)
    values = {each.dest: resolve_option(each, flags, env, table) for each in options}
    for each in options:
        if each.is_path and values[each.dest] is not None:
            values[each.dest] = _absolute(values[each.dest], cwd)
    return values


def resolve_option(
    option: Option,
    flags: Mapping[str, object],
    env: Mapping[str, str],
    table: Mapping[str, _Raw] | None = None,
) -> Any:
    """One option's value from its flag, else its variable, else the file, else its default."""
    raw = _lookup(option, flags, env, table or {})
    if raw is None:
        return option.default_value()
    try:
        value = convert.shell_words(convert.text(raw.value)) if raw.shell_split else raw.value
        return option.parse(value)
    except ValueError as exc:
        raise ConfigError(f"{raw.source}: {exc}") from None


def _lookup(
    option: Option, flags: Mapping[str, object], env: Mapping[str, str], table: Mapping[str, _Raw]
) -> _Raw | None:
    flag = flags.get(option.dest)
    if flag is not None:
        return _Raw(flag, f"flag {option.flag}")
    text = env.get(option.env)
    if text:
        return _Raw(text, f"env {option.env}", shell_split=option.repeatable)
    return table.get(option.dest)


def _read_file(text: str, name: str | None) -> dict[str, _Raw]:
    where = f"config file {name}" if name else "config file"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}; fix the syntax there") from None
    table: dict[str, _Raw] = {}
    for key, value in data.items():
        found = _option_for_key(key, where)
        if found.dest in table:
            raise ConfigError(f"{where}: {found.name} is given twice ({key!r}); keep one")
        source = f"config file key {key}" + (f" in {name}" if name else "")
        table[found.dest] = _Raw(value, source)
    return table


def _option_for_key(key: str, where: str) -> Option:
    found = _BY_DEST.get(key.replace("-", "_"))
    if found is not None:
        return found
    if key.replace("-", "_") == "secret":
        raise ConfigError(
            f"{where}: key {key!r} is not allowed: the secret goes in env {SECRET_ENV} "
            "or in the file named by secret-file"
        )
    names = [o.name for o in OPTIONS]
    close = difflib.get_close_matches(key.replace("_", "-"), names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(names)}")


def _absolute(path: str, cwd: str) -> str:
    return str(PurePath(cwd) / path)


# --- documentation


def options_table(options: Iterable[Option] = OPTIONS) -> str:
    """The markdown table of ``options`` in docs/configuration.md: flag, variable, default."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for each in options:
        flag = f"--[no-]{each.name}" if each.negatable else each.flag
        usage = f"`{flag}`" if each.metavar is None else f"`{flag} {each.metavar}`"
        env = f"`{each.env}`" if each.layered else "—"
        meaning = each.help + (" (repeatable)" if each.repeatable else "")
        cells = (usage, env, _markdown(each.shown_default()), _markdown(meaning))
        rows.append(f"| {' | '.join(cells)} |")
    return "\n".join(rows) + "\n"


def grouped_options_table(groups: Iterable[tuple[str, Iterable[Option]]] = GROUPS) -> str:
    """docs/configuration.md's tables of serve's options: one per group, as ``--help`` groups
    them, each under its title."""
    return "\n".join(f"**{title}**\n\n{options_table(options)}" for title, options in groups)


def _markdown(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*")
