"""Settings for ``acp-relay serve`` from flags, ``ACP_RELAY_*`` environment and a TOML file.

Pure: the caller passes the parsed flags, the environment mapping, the config
file's text and the working directory; nothing here reads files or the process
state. Precedence is flag > environment > config file > default.
"""

from __future__ import annotations

import argparse
import difflib
import ipaddress
import math
import shlex
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, TypeVar, cast

from relay.mcp import MERGES, Merge
from relay.paths import FALLBACKS, CwdRule, Fallback, parse_rule

ENV_PREFIX = "ACP_RELAY_"
CONFIG_ENV = "ACP_RELAY_CONFIG"
SECRET_ENV = "ACP_RELAY_SECRET"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")
ORIGIN_EXAMPLES = "https://app.example.com, http://localhost:3000, https://*.example.com or *"

_DEFAULT_PORTS = {"http": 80, "https": 443}
_SIZE_UNITS = {"": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3}
TRACE_MIN_BYTES = 1024  # relay.trace.MIN_MAX_BYTES: room for the open and truncated records
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

T = TypeVar("T")


class ConfigError(Exception):
    """A setting is invalid; the message names its source, the problem and the fix."""


# --- value parsers: take a raw value (str from flag/env, any TOML type), raise ValueError


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _non_empty(value: object) -> str:
    text = _text(value)
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _strings(value: object) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f'expected an array of strings such as ["a", "b"], got {value!r}')
    return list(value)


def _shell_words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot split {text!r} like a shell: {exc}") from None


def _repeated(item: Callable[[str], T]) -> Callable[[object], tuple[T, ...]]:
    def convert(value: object) -> tuple[T, ...]:
        return tuple(item(text) for text in _strings(value))

    return convert


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number of seconds such as 2.5, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number of seconds such as 2.5, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number of seconds, got {value!r}")
    return number


def _positive_seconds(value: object) -> float:
    number = _number(value)
    if number <= 0:
        raise ValueError(f"must be greater than 0, got {value!r}")
    return number


def _seconds(value: object) -> float:
    number = _number(value)
    if number < 0:
        raise ValueError(f"must be 0 or more, got {value!r}")
    return number


def _positive_int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value)
    else:
        raise ValueError(f"expected a whole number such as 64, got {value!r}")
    if number < 1:
        raise ValueError(f"must be at least 1, got {value!r}")
    return number


def parse_size(text: str | int) -> int:
    """Bytes from ``1048576``, ``"1048576"``, ``"16MiB"``, ``"512 KiB"`` or ``"1GiB"``."""
    if isinstance(text, bool):
        raise ValueError(f"expected a size such as 16MiB, got {text!r}")
    if isinstance(text, int):
        size = text
    else:
        digits, unit = _split_size(text)
        if not digits or unit.lower() not in _SIZE_UNITS:
            raise ValueError(
                f"expected bytes as a whole number or with a KiB, MiB or GiB suffix "
                f"such as 16MiB, got {text!r}"
            )
        size = int(digits) * _SIZE_UNITS[unit.lower()]
    if size < 1:
        raise ValueError(f"must be at least 1 byte, got {text!r}")
    return size


def _split_size(text: str) -> tuple[str, str]:
    stripped = text.strip()
    end = len(stripped) - len(stripped.lstrip("0123456789"))
    return stripped[:end], stripped[end:].strip()


def _size(value: object) -> int:
    if not isinstance(value, str | int):
        raise ValueError(f"expected a size such as 16MiB, got {value!r}")
    return parse_size(value)


def _trace_size(value: object) -> int:
    size = _size(value)
    if size < TRACE_MIN_BYTES:
        raise ValueError(f"must be at least {TRACE_MIN_BYTES} bytes (1KiB), got {value!r}")
    return size


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    word = _text(value).strip().lower()
    if word in _TRUE | _FALSE:
        return word in _TRUE
    raise ValueError(f"expected 1/true/yes/on or 0/false/no/off, got {value!r}")


def _choice(value: object, choices: Sequence[str]) -> str:
    word = _text(value).strip().lower()
    if word not in choices:
        raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
    return word


def _log_level(value: object) -> str:
    return _choice(value, LOG_LEVELS)


def _log_format(value: object) -> str | None:
    word = _choice(value, (*LOG_FORMATS, "auto"))
    return None if word == "auto" else word


def _cwd_rule(item: str) -> CwdRule:
    return parse_rule(item)


def _cwd_fallback(value: object) -> Fallback:
    return cast(Fallback, _choice(value, FALLBACKS))


def _mcp_merge(value: object) -> Merge:
    return cast(Merge, _choice(value, MERGES))


def _url_path(value: object) -> str:
    text = _text(value)
    if not text.startswith("/") or any(c.isspace() or c in "?#" for c in text):
        raise ValueError(f"must start with / and have no spaces, ? or #, e.g. /acp; got {text!r}")
    return text


def _agent_argv(value: object) -> tuple[str, ...]:
    argv = _strings(value) if isinstance(value, list) else _shell_words(_text(value))
    if not argv:
        raise ValueError("the agent command is empty; give a program, e.g. 'my-agent --acp'")
    return tuple(argv)


def _env_entry(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not _is_env_name(name):
        raise ValueError(
            f"bad entry {item!r}: expected NAME=VALUE, NAME made of letters, digits "
            "and _ and not starting with a digit"
        )
    return name, value


def _is_env_name(name: str) -> bool:
    return (
        bool(name) and name.isascii() and name.replace("_", "a").isalnum() and not name[0].isdigit()
    )


# --- hosts, listen addresses and origins


def _is_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and label.isascii()
        and label.replace("-", "a").isalnum()
        and not label.startswith("-")
        and not label.endswith("-")
    )


def _is_hostname(host: str) -> bool:
    labels = host.split(".")
    if len(host) > 253 or not all(_is_label(label) for label in labels):
        return False
    if all(label.isdigit() for label in labels):
        return _is_ipv4(host)
    return True


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _ipv6(text: str) -> str:
    try:
        return ipaddress.IPv6Address(text).compressed
    except ValueError:
        raise ValueError(f"{text!r} is not an IPv6 address") from None


def _port(text: str, lowest: int) -> int:
    if not (text.isascii() and text.isdigit()) or not lowest <= int(text) <= 65535:
        raise ValueError(f"port must be a number from {lowest} to 65535, got {text!r}")
    return int(text)


def parse_listen(text: str) -> tuple[str, int]:
    """``(host, port)`` from ``HOST:PORT``; IPv6 hosts in brackets, returned without them."""
    host, sep, port = text.rpartition(":")
    try:
        if not sep or text.endswith("]"):
            raise ValueError("no port")
        return _listen_host(host), _port(port, lowest=0)
    except ValueError as exc:
        raise ValueError(
            f"bad address {text!r}: {exc}; expected HOST:PORT such as 127.0.0.1:8765, "
            "0.0.0.0:8765 or [::1]:8765"
        ) from None


def _listen_host(host: str) -> str:
    if host.startswith("[") and host.endswith("]"):
        return _ipv6(host[1:-1])
    if ":" in host:
        raise ValueError("IPv6 addresses need brackets")
    if not host:
        raise ValueError("no host (for all interfaces use 0.0.0.0 or [::])")
    if not _is_hostname(host):
        raise ValueError(f"{host!r} is not a host name or IP address")
    return host


def _listen(value: object) -> tuple[str, int]:
    return parse_listen(_text(value))


@dataclass(frozen=True)
class _Origin:
    scheme: str
    host: str
    port: int | None


def _parse_origin(text: str, *, wildcard: bool = False) -> _Origin:
    scheme, sep, rest = text.lower().partition("://")
    if not sep or not _is_scheme(scheme):
        raise ValueError("expected scheme://host[:port]")
    if any(c in rest for c in "/?#@\\"):
        raise ValueError("an origin has no path, query, user or trailing slash")
    host, port = _split_host_port(rest)
    _check_host(host, wildcard=wildcard)
    return _Origin(scheme, host, _DEFAULT_PORTS.get(scheme) if port is None else port)


def _is_scheme(scheme: str) -> bool:
    return (
        scheme[:1].isalpha()
        and scheme.isascii()
        and scheme.replace("+", "a").replace("-", "a").replace(".", "a").isalnum()
    )


def _split_host_port(rest: str) -> tuple[str, int | None]:
    if rest.startswith("["):
        inner, bracket, after = rest[1:].partition("]")
        if not bracket:
            raise ValueError("unclosed [ in IPv6 host")
        host = f"[{_ipv6(inner)}]"
    else:
        host, colon, port = rest.partition(":")
        after = colon + port
    if not after:
        return host, None
    if not after.startswith(":"):
        raise ValueError("unexpected text after the host")
    return host, _port(after[1:], lowest=1)


def _check_host(host: str, *, wildcard: bool) -> None:
    if host.startswith("["):
        return
    starred = wildcard and host.startswith("*.")
    name = host[2:] if starred else host
    if starred and "." not in name:
        raise ValueError("'*.' must be followed by at least two labels, e.g. *.example.com")
    if "*" in name:
        raise ValueError("'*' may only be the whole first label, e.g. https://*.example.com")
    if not _is_hostname(name):
        raise ValueError(f"{host!r} is not a valid host")


def check_origin_pattern(text: str) -> str:
    """Return an ``--allow-origin`` value unchanged if well-formed; ValueError otherwise."""
    if text == "*":
        return text
    try:
        _parse_origin(text, wildcard=True)
    except ValueError as exc:
        raise ValueError(
            f"invalid origin {text!r}: {exc}; write it like {ORIGIN_EXAMPLES}"
        ) from None
    return text


def origin_allowed(origin: str, patterns: Sequence[str]) -> bool:
    """Whether a browser ``Origin`` header value may connect.

    ``"*"`` among the patterns admits anything. Otherwise scheme and host compare
    case-insensitively, ports exactly (80/443 implied for http/https), and
    ``*.example.com`` matches one or more labels before ``example.com`` but not
    ``example.com`` itself. With no patterns only loopback pages (localhost,
    127.0.0.0/8, [::1]) are admitted. Requests without an Origin header are
    the caller's business (non-browser clients: always allowed).
    """
    if "*" in patterns:
        return True
    try:
        got = _parse_origin(origin)
    except ValueError:
        return False
    if not patterns:
        return _is_loopback(got.host)
    return any(_origin_matches(got, pattern) for pattern in patterns)


def _origin_matches(got: _Origin, pattern: str) -> bool:
    try:
        want = _parse_origin(pattern, wildcard=True)
    except ValueError:
        return False
    if (want.scheme, want.port) != (got.scheme, got.port):
        return False
    if want.host.startswith("*."):
        return got.host.endswith(want.host[1:])
    return got.host == want.host


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --- secrets and the agent's environment


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


# Not for the agent: systemd's credentials folder holds the relay's secret file.
PRIVATE_ENV = frozenset({"CREDENTIALS_DIRECTORY"})


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


@dataclass(frozen=True)
class Option:
    """One ``serve`` option: flag ``--name``, env ``ACP_RELAY_NAME``, TOML key ``name``."""

    name: str
    help: str
    default: object
    metavar: str | None
    convert: Callable[[object], object]
    repeatable: bool = False
    is_flag: bool = False
    default_text: str | None = None
    negatable: bool = False  # a boolean flag with a --no- form (its default is on)

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()

    def help_text(self) -> str:
        shown = self.default_text or ("none" if self.default is None else str(self.default))
        if self.repeatable:
            return f"{self.help} (repeatable; default: {shown}; env {self.env}, split like a shell)"
        return f"{self.help} (default: {shown}; env {self.env})"


OPTIONS: tuple[Option, ...] = (
    Option("listen", "address to listen on; IPv6 as [::1]:8765", "127.0.0.1:8765",
           "HOST:PORT", _listen),
    Option("path", "URL path of the WebSocket endpoint", "/acp", "PATH", _url_path),
    Option("agent", "agent command, split like a shell but never run by one", None,
           "COMMAND", _agent_argv),
    Option("workspace", "directory the agent runs in", None, "DIR", _non_empty,
           default_text="current directory"),
    Option("agent-env", "extra variable for the agent's environment", (), "NAME=VALUE",
           _repeated(_env_entry), repeatable=True, default_text="none"),
    Option("secret-file", f"file of ticket secrets, one per line: the first signs, all "
           f"verify; or put the secret itself in env {SECRET_ENV}", None, "FILE", _non_empty),
    Option("allow-origin", f"browser Origin allowed to connect: {ORIGIN_EXAMPLES}", (),
           "ORIGIN", _repeated(check_origin_pattern), repeatable=True,
           default_text="none, so only pages from localhost, 127.0.0.0/8 or [::1]"),
    Option("max-connections", "max sockets at once", 64, "N", _positive_int),
    Option("max-message-bytes", "largest WebSocket message, in bytes or with KiB/MiB/GiB",
           64 * 1024**2, "SIZE", _size, default_text="64MiB"),
    Option("ping-interval", "seconds between keepalive pings", 20, "SECONDS",
           _positive_seconds),
    Option("ping-timeout", "seconds to wait for a pong before closing", 20, "SECONDS",
           _positive_seconds),
    Option("kill-grace",
           "seconds an agent gets after stdin EOF before SIGTERM, then before SIGKILL", 3,
           "SECONDS", _seconds),
    Option("ticket-ttl", "seconds a ticket stays valid", 60, "SECONDS", _positive_seconds),
    Option("audience", "audience (aud) tickets must carry", None, "AUD", _non_empty,
           default_text="none, aud not checked"),
    Option("open-timeout", "seconds a client has to finish the WebSocket handshake", 10,
           "SECONDS", _positive_seconds),
    Option("log-format", "log format: json, console or auto", None, "FORMAT", _log_format,
           default_text="auto: console on a terminal, else json"),
    Option("log-level", "log level: debug, info, warning or error", "info", "LEVEL",
           _log_level),
    Option("cwd-map", "map a client path prefix to the agent's: /Users/alice=/workspace, "
           "C:\\Users\\alice=/workspace, //wsl$/Ubuntu/home/alice=/workspace; longest wins",
           (), "CLIENT=AGENT", _repeated(_cwd_rule), repeatable=True, default_text="none"),
    Option("cwd-fallback", "when no --cwd-map rule matches: workspace (use --workspace), "
           "keep (pass unchanged) or reject", "workspace", "POLICY", _cwd_fallback),
    Option("cwd-must-exist", "refuse a translated cwd that does not exist on this machine",
           True, None, _bool, is_flag=True, negatable=True, default_text="on"),
    Option("mcp-servers", "JSON file of MCP servers to add to every session; ${VAR} is "
           "expanded from the environment at start-up", None, "FILE", _non_empty),
    Option("mcp-merge", "append (the relay's server wins a name clash) or replace the "
           "client's mcpServers", "append", "MODE", _mcp_merge),
    Option("drop-client-stdio-mcp", "drop the client's stdio MCP servers (they name "
           "programs on the user's machine)", False, None, _bool, is_flag=True,
           default_text="off"),
    Option("trace-dir", "write one NDJSON trace file per connection (every message, "
           "both ways) into DIR, created if missing; for debugging", None, "DIR", _non_empty,
           default_text="none, no traces"),
    Option("trace-max-bytes", "largest trace file, in bytes or with KiB/MiB/GiB; a full "
           "trace ends with a 'truncated' record", 16 * 1024**2, "SIZE", _trace_size,
           default_text="16MiB"),
    Option("dev",
           "development mode, not for production: throwaway secret, demo agent unless "
           "--agent, ready ticket URLs on stdout, the dev console at /", False, None, _bool,
           is_flag=True,
           default_text="off"),
)  # fmt: skip

_BY_DEST = {option.dest: option for option in OPTIONS}
_KNOWN_ENV = frozenset({CONFIG_ENV, SECRET_ENV, *(option.env for option in OPTIONS)})


@dataclass(frozen=True)
class Settings:
    """Resolved ``serve`` settings."""

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
    mcp_servers: str | None = None
    mcp_merge: Merge = "append"
    drop_client_stdio_mcp: bool = False
    trace_dir: str | None = None
    trace_max_bytes: int = 16 * 1024**2


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and one flag per option; flags not given stay out of the Namespace."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"TOML file of these options, keys named like the flags (env {CONFIG_ENV})",
    )
    for option in OPTIONS:
        _add_option(parser, option)


def _add_option(parser: argparse.ArgumentParser, option: Option) -> None:
    kwargs: dict[str, Any] = {"dest": option.dest, "default": argparse.SUPPRESS}
    kwargs["help"] = option.help_text().replace("%", "%%")
    if option.negatable:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif option.is_flag:
        kwargs["action"] = "store_true"
    else:
        kwargs["metavar"] = option.metavar
        kwargs["action"] = "append" if option.repeatable else "store"
    parser.add_argument(option.flag, **kwargs)


def config_file_path(flags: Mapping[str, object], env: Mapping[str, str]) -> str | None:
    """The config file named by ``--config``, else by ``ACP_RELAY_CONFIG``, else None."""
    flag = flags.get("config")
    if isinstance(flag, str) and flag:
        return flag
    return env.get(CONFIG_ENV) or None


def unknown_env_names(env: Mapping[str, str]) -> tuple[str, ...]:
    """``ACP_RELAY_*`` variables that match no option (likely typos; worth a warning)."""
    return tuple(sorted(k for k in env if k.startswith(ENV_PREFIX) and k not in _KNOWN_ENV))


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
    values = {option.dest: _value(option, flags, env, table) for option in OPTIONS}
    loaded = name if file_text is not None else None
    return _settings(values, cwd=cwd, secret_env=env.get(SECRET_ENV) or None, config_file=loaded)


def _value(
    option: Option, flags: Mapping[str, object], env: Mapping[str, str], table: Mapping[str, _Raw]
) -> Any:
    raw = _lookup(option, flags, env, table)
    if raw is None:
        return None if option.default is None else option.convert(option.default)
    try:
        value = _shell_words(_text(raw.value)) if raw.shell_split else raw.value
        return option.convert(value)
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
        option = _option_for_key(key, where)
        if option.dest in table:
            raise ConfigError(f"{where}: {option.name} is given twice ({key!r}); keep one")
        source = f"config file key {key}" + (f" in {name}" if name else "")
        table[option.dest] = _Raw(value, source)
    return table


def _option_for_key(key: str, where: str) -> Option:
    option = _BY_DEST.get(key.replace("-", "_"))
    if option is not None:
        return option
    if key.replace("-", "_") == "secret":
        raise ConfigError(
            f"{where}: key {key!r} is not allowed: the secret goes in env {SECRET_ENV} "
            "or in the file named by secret-file"
        )
    names = [o.name for o in OPTIONS]
    close = difflib.get_close_matches(key.replace("_", "-"), names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(names)}")


def _settings(
    values: Mapping[str, Any], *, cwd: str, secret_env: str | None, config_file: str | None
) -> Settings:
    host, port = values["listen"]
    secret_file = values["secret_file"]
    mcp_file = values["mcp_servers"]
    return Settings(
        host=host,
        port=port,
        path=values["path"],
        agent_argv=values["agent"],
        workspace=_absolute(values["workspace"] or cwd, cwd),
        agent_env=values["agent_env"],
        secret_file=None if secret_file is None else _absolute(secret_file, cwd),
        secret_env=secret_env,
        allow_origins=values["allow_origin"],
        max_connections=values["max_connections"],
        max_message_bytes=values["max_message_bytes"],
        ping_interval=values["ping_interval"],
        ping_timeout=values["ping_timeout"],
        kill_grace=values["kill_grace"],
        ticket_ttl=values["ticket_ttl"],
        audience=values["audience"],
        open_timeout=values["open_timeout"],
        log_format=values["log_format"],
        log_level=values["log_level"],
        dev=values["dev"],
        config_file=config_file,
        cwd_map=values["cwd_map"],
        cwd_fallback=values["cwd_fallback"],
        cwd_must_exist=values["cwd_must_exist"],
        mcp_servers=None if mcp_file is None else _absolute(mcp_file, cwd),
        mcp_merge=values["mcp_merge"],
        drop_client_stdio_mcp=values["drop_client_stdio_mcp"],
        trace_dir=None if values["trace_dir"] is None else _absolute(values["trace_dir"], cwd),
        trace_max_bytes=values["trace_max_bytes"],
    )


def _absolute(path: str, cwd: str) -> str:
    return str(PurePath(cwd) / path)
