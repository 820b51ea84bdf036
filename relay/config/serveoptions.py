"""``acp-relay serve``'s option table: every flag, ``ACP_RELAY_*`` variable and config key,
grouped by concern as ``--help`` and docs/configuration.md show them.

Pure data. Where :mod:`relay.config.settings` resolves the options into
:class:`relay.config.settings.Settings` (flag over environment over file over default),
this module declares them: each :class:`relay.config.options.Option` once, with its help,
default and converter; ``connect`` and ``ticket`` take some of them by name
(:func:`option_named`).
"""

from __future__ import annotations

from collections.abc import Iterable

from relay.acp.mcp import MERGES
from relay.acp.paths import FALLBACKS, parse_rule
from relay.acp.rewrite import Files
from relay.config import convert, defaults
from relay.config.defaults import SECRET_ENV
from relay.config.options import Option
from relay.core.origins import ORIGIN_EXAMPLES, check_origin_pattern, parse_listen
from relay.core.resumeprofile import MAX_GRACE_SECONDS, MAX_WINDOW

GROUPS: tuple[tuple[str, tuple[Option, ...]], ...] = (
    (
        "listening",
        (
            Option(
                "listen",
                "address to listen on; IPv6 as [::1]:8765",
                defaults.LISTEN,
                "HOST:PORT",
                convert.from_text(parse_listen),
            ),
            Option(
                "path",
                "URL path of the WebSocket endpoint",
                defaults.PATH,
                "PATH",
                convert.url_path,
            ),
        ),
    ),
    (
        "tickets and admission",
        (
            Option(
                "secret-file",
                f"file of ticket secrets, one per line: the first signs, all "
                f"verify; or put the secret itself in env {SECRET_ENV}",
                None,
                "FILE",
                convert.non_empty,
                is_path=True,
            ),
            Option(
                "audience",
                "audience (aud) tickets must carry",
                None,
                "AUD",
                convert.non_empty,
                default_text="none, aud not checked",
            ),
            Option(
                "ticket-ttl",
                "seconds a ticket stays valid",
                defaults.TICKET_TTL,
                "SECONDS",
                convert.positive_seconds,
            ),
            Option(
                "allow-origin",
                f"browser Origin allowed to connect: {ORIGIN_EXAMPLES}",
                (),
                "ORIGIN",
                convert.from_text(check_origin_pattern),
                repeatable=True,
                attribute="allow_origins",
                default_text="none, so only pages from localhost, 127.0.0.0/8 or [::1]",
            ),
            Option(
                "state-dir",
                "directory where spent ticket ids are kept across restarts "
                "(created if missing, mode 0700; refused if another user owns it or its group or "
                "others may write it; one relay at a time); without it a ticket used before a "
                "restart works once more within its lifetime",
                None,
                "DIR",
                convert.non_empty,
                default_text="none, spent tickets kept in memory only",
                is_path=True,
            ),
        ),
    ),
    (
        "the agent",
        (
            Option(
                "agent",
                "agent command, split like a shell but never run by one",
                None,
                "COMMAND",
                convert.command,
                attribute="agent_argv",
            ),
            Option(
                "workspace",
                "directory the agent runs in",
                None,
                "DIR",
                convert.non_empty,
                default_text="current directory; under --dev a fresh one, removed at exit",
                is_path=True,
            ),
            Option(
                "agent-env",
                "extra variable for the agent's environment",
                (),
                "NAME=VALUE",
                convert.env_entry,
                repeatable=True,
                default_text="none",
            ),
            Option(
                "agent-user",
                "run agents as this user (a name or uid; the relay must run as "
                "root), so that they can read neither the relay's secret nor its memory",
                None,
                "USER",
                convert.non_empty,
                default_text="none, the relay's own user",
            ),
            Option(
                "agent-group",
                "the agents' group under --agent-user",
                None,
                "GROUP",
                convert.non_empty,
                default_text="the --agent-user's primary group",
            ),
            Option(
                "kill-grace",
                "seconds an agent gets after stdin EOF before SIGTERM, then before SIGKILL",
                defaults.KILL_GRACE,
                "SECONDS",
                convert.seconds,
            ),
        ),
    ),
    (
        "paths and MCP",
        (
            Option(
                "cwd-map",
                "map a client path prefix to the agent's: /Users/alice=/workspace, "
                "C:\\Users\\alice=/workspace, //wsl$/Ubuntu/home/alice=/workspace; longest wins",
                (),
                "CLIENT=AGENT",
                convert.from_text(parse_rule),
                repeatable=True,
                default_text="none",
            ),
            Option(
                "cwd-fallback",
                "when no --cwd-map rule matches: workspace (use --workspace), "
                "keep (pass unchanged) or reject",
                "workspace",
                "POLICY",
                convert.one_of(*FALLBACKS),
            ),
            Option(
                "cwd-must-exist",
                "refuse a translated cwd that does not exist on this machine",
                True,
                None,
                convert.boolean,
                is_flag=True,
                negatable=True,
                default_text="on",
            ),
            Option(
                "files",
                "who serves files and terminals to the agent: box (the editor's fs "
                "and terminal capabilities are withheld, the agent uses the box's own), shared "
                "(the editor's, reached through --cwd-map: the agent's paths are translated to "
                "the editor's) or pass (capabilities and the agent's paths pass unchanged)",
                "box",
                "POLICY",
                convert.member_of(Files),
            ),
            Option(
                "mcp-servers",
                "JSON file of MCP servers to add to every session; ${VAR} is "
                "expanded from the environment at start-up",
                None,
                "FILE",
                convert.non_empty,
                is_path=True,
            ),
            Option(
                "mcp-merge",
                "append (the relay's server wins a name clash) or replace the client's mcpServers",
                "append",
                "MODE",
                convert.one_of(*MERGES),
            ),
            Option(
                "drop-client-stdio-mcp",
                "drop the client's stdio MCP servers (they name programs on the user's machine)",
                False,
                None,
                convert.boolean,
                is_flag=True,
                default_text="off",
            ),
        ),
    ),
    (
        "resuming",
        (
            Option(
                "resume-grace",
                "seconds a connection whose client opted in to resuming "
                "(acp-relay.resume.v1) waits for a resume after losing its socket, at most a week; "
                "0 turns resuming off",
                defaults.RESUME_GRACE,
                "SECONDS",
                convert.at_most(
                    convert.seconds, float(MAX_GRACE_SECONDS), f"{MAX_GRACE_SECONDS} s (a week)"
                ),
            ),
            Option(
                "resume-buffer",
                "agent output a resumable connection keeps until the client "
                "acknowledges it, in bytes or with KiB/MiB/GiB, at most 1TiB; when full the "
                "agent waits",
                defaults.RESUME_BUFFER,
                "SIZE",
                convert.at_most(convert.size, MAX_WINDOW, f"{MAX_WINDOW} bytes (1TiB)"),
                default_text="16MiB",
            ),
        ),
    ),
    (
        "sharing",
        (
            Option(
                "max-watchers",
                "watchers (acp-relay.watch.v1) one connection may have at once, "
                "besides its controlling socket; 0 turns sharing off",
                defaults.MAX_WATCHERS,
                "N",
                convert.count,
            ),
            Option(
                "watch-history",
                "the conversation each connection keeps for its watchers, in "
                "bytes or with KiB/MiB/GiB (oldest whole messages dropped first); in memory "
                "only",
                defaults.WATCH_HISTORY,
                "SIZE",
                convert.size,
                default_text="1MiB",
            ),
        ),
    ),
    (
        "warm agents",
        (
            Option(
                "warm-agents",
                "agents kept started ahead of demand, each waiting with stdin "
                "open (same command, workspace and environment): a new socket takes one instead "
                "of waiting for a start; not connections (/busy stays false, --max-connections "
                "does not count them)",
                None,
                "N",
                convert.count,
                default_text="0; 1 under --dev",
            ),
            Option(
                "warm-max-age",
                "seconds a warm agent waits for a connection before it is "
                "replaced by a fresh one (for agents that read configuration or credentials at "
                "start-up); 0: never",
                defaults.WARM_MAX_AGE,
                "SECONDS",
                convert.seconds,
            ),
        ),
    ),
    (
        "limits",
        (
            Option(
                "max-connections",
                "max sockets at once",
                defaults.MAX_CONNECTIONS,
                "N",
                convert.positive_int,
            ),
            Option(
                "max-message-bytes",
                "largest WebSocket message, in bytes or with KiB/MiB/GiB",
                defaults.MAX_MESSAGE_BYTES,
                "SIZE",
                convert.size,
                default_text="64MiB",
            ),
            Option(
                "open-timeout",
                "seconds a client has to finish the WebSocket handshake",
                defaults.OPEN_TIMEOUT,
                "SECONDS",
                convert.positive_seconds,
            ),
            Option(
                "ping-interval",
                "seconds between keepalive pings",
                defaults.PING_INTERVAL,
                "SECONDS",
                convert.positive_seconds,
            ),
            Option(
                "ping-timeout",
                "seconds to wait for a pong before closing",
                defaults.PING_TIMEOUT,
                "SECONDS",
                convert.positive_seconds,
            ),
        ),
    ),
    (
        "observability",
        (
            Option(
                "log-format",
                "log format: json, console or auto",
                None,
                "FORMAT",
                convert.log_format,
                default_text="auto: console on a terminal, else json",
            ),
            Option(
                "log-level",
                "log level: debug, info, warning or error",
                defaults.LOG_LEVEL,
                "LEVEL",
                convert.log_level,
            ),
            Option(
                "trace-dir",
                "write one NDJSON trace file per connection (every message, "
                "both ways) into DIR, created if missing; for debugging",
                None,
                "DIR",
                convert.non_empty,
                default_text="none, no traces",
                is_path=True,
            ),
            Option(
                "trace-max-bytes",
                "largest trace file, in bytes or with KiB/MiB/GiB; a full "
                "trace ends with a 'truncated' record",
                defaults.TRACE_MAX_BYTES,
                "SIZE",
                convert.size_at_least(defaults.MIN_TRACE_MAX_BYTES, "1KiB"),
                default_text="16MiB",
            ),
            Option(
                "metrics-listen",
                "also serve GET /metrics (Prometheus text format) on this "
                "address, e.g. for a scraper on another network than the proxy's; /metrics stays "
                "on the main address too",
                None,
                "HOST:PORT",
                convert.from_text(parse_listen),
                default_text="none, /metrics on the main address only",
            ),
        ),
    ),
    (
        "dev",
        (
            Option(
                "dev",
                "development mode, not for production: throwaway secret, demo agent unless "
                "--agent, ready ticket URLs on stdout, the dev console at /",
                False,
                None,
                convert.boolean,
                is_flag=True,
                default_text="off",
            ),
            Option(
                "dev-allow-remote",
                "let --dev listen on an address other than loopback (its console and tickets "
                "are then reachable from the network)",
                False,
                None,
                convert.boolean,
                is_flag=True,
                default_text="off",
            ),
        ),
    ),
)
OPTIONS: tuple[Option, ...] = tuple(option for _, options in GROUPS for option in options)


_BY_DEST = {option.dest: option for option in OPTIONS}


def option_named(name: str) -> Option:
    """The ``serve`` option named ``name`` (e.g. to declare it for another command too)."""
    return _BY_DEST[name.replace("-", "_")]


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
