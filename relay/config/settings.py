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

from relay.acp.mcp import Merge
from relay.acp.paths import CwdRule, Fallback
from relay.acp.rewrite import Files
from relay.config import convert, defaults
from relay.config.defaults import CONFIG_ENV as CONFIG_ENV
from relay.config.defaults import SECRET_ENV as SECRET_ENV
from relay.config.errors import UsageError

# Option and add_options live in relay.config.options (connect needs them without the rest); the
# names stay importable from here.
from relay.config.options import ENV_PREFIX as ENV_PREFIX
from relay.config.options import Option as Option
from relay.config.options import add_options as add_options
from relay.config.serveoptions import GROUPS, OPTIONS, option_named
from relay.core.origins import bracketed
from relay.core.strictjson import deeper_than

TICKET_ENV = defaults.TICKET_ENV
# Read by the other commands (connect), not by serve: no warning for them.
OTHER_COMMANDS_ENV = frozenset({TICKET_ENV})
# Not for the agent: systemd's credentials folder holds the relay's secret file.
PRIVATE_ENV = frozenset({"CREDENTIALS_DIRECTORY"})
# No option's value nests: the file itself is one level, an array of strings a second.
MAX_CONFIG_DEPTH = 8
# Far more than a file of addresses, paths and origins holds; a dotted key of this many
# parts is parsed in a time that grows with the square of their number.
MAX_CONFIG_DOTS = 4096


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


_BY_DEST = {option.dest: option for option in OPTIONS}
_KNOWN_ENV = frozenset({CONFIG_ENV, SECRET_ENV, *(option.env for option in OPTIONS)})


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
    files: Files = Files.BOX
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


def config_file_source(flags: Mapping[str, object]) -> str:
    """How the config file was named, for messages about it: ``--config`` or the variable."""
    flag = flags.get("config")
    return "--config" if isinstance(flag, str) and flag else CONFIG_ENV


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
    data = config_toml(text, where)
    table: dict[str, _Raw] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            raise ConfigError(_no_tables(key, where))
        found = _option_for_key(key, where)
        if found.dest in table:
            raise ConfigError(f"{where}: {found.name} is given twice ({key!r}); keep one")
        source = f"config file key {key}" + (f" in {name}" if name else "")
        table[found.dest] = _Raw(value, source)
    return table


def config_toml(text: str, where: str) -> dict[str, Any]:
    """A config file's TOML, read within bounds (any command's): its dots counted before it
    is parsed, its nesting after; ConfigError naming ``where`` and the fix otherwise."""
    dots = text.count(".")
    if dots > MAX_CONFIG_DOTS:  # before parsing: a long dotted key takes the parser its square
        raise ConfigError(
            f"{where}: nested too deeply ({dots} dots, at most {MAX_CONFIG_DOTS}: dotted keys "
            "make tables inside one another); its keys are plain names at the top level, "
            "e.g. max-connections = 8"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}; fix the syntax there") from None
    except RecursionError:
        data = None  # nested past what the parser can follow: deeper than any option
    if data is None or deeper_than(data, MAX_CONFIG_DEPTH):
        raise ConfigError(
            f"{where}: nested too deeply (arrays or tables more than {MAX_CONFIG_DEPTH} levels "
            "inside one another); a value is a string, a number, a boolean or an array of "
            "strings"
        )
    return data


def _no_tables(key: str, where: str) -> str:
    """Why a table (``[serve]``, ``serve.listen = ...``) is refused, and what the file is."""
    return (
        f"{where}: {key!r} is a table ([{key}] or {key}.NAME = ...), but the file has none: "
        "each option is a key at the top level, above any [section] line, named like its "
        'flag without the dashes, e.g. listen = "127.0.0.1:8765"'
    )


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
