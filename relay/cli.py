"""Command line: ``acp-relay serve``, ``acp-relay ticket`` and ``acp-relay connect``.

The I/O edge of configuration: reads the environment, the config file and the secret
file, hands them to the pure :mod:`relay.config`, then runs the relay under uvloop.
Diagnostics go to stderr; stdout only carries what a command is asked to print.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import secrets as random_secrets
import shlex
import signal
import ssl
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import uvloop

from relay import __version__, logs
from relay.admission import Policy
from relay.bridge import BridgeConfig, TicketSource, UsageProblem, run_bridge
from relay.config import (
    SECRET_ENV,
    ConfigError,
    Settings,
    add_serve_arguments,
    agent_environment,
    config_file_path,
    parse_secrets,
    parse_size,
    resolve,
)
from relay.mcp import McpConfigError, McpPolicy, McpServer, load_servers
from relay.paths import CwdPolicy, describe_rules
from relay.redact import register_secret
from relay.rewrite import RewritePolicy
from relay.server import Relay, RelayConfig, fresh_ticket
from relay.tracefile import prepare_directory
from relay.urls import ticket_in, with_ticket, without_ticket

DEMO_AGENT = (sys.executable, "-m", "relay.demo_agent")
DEV_TICKET_TTL = 8 * 3600
SHUTDOWN_MARGIN = 2.0


class UsageError(Exception):
    """A problem the user can fix; printed as ``acp-relay: <message>``, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The ``acp-relay`` parser with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="acp-relay",
        description="Serve an ACP agent over WebSocket, one agent process per socket.",
    )
    parser.add_argument("--version", action="version", version=f"acp-relay {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="accept WebSockets and run one agent per socket",
        description="Accept WebSocket connections with a signed ticket and run one agent "
        "process per socket. Every flag is also an ACP_RELAY_<NAME> environment variable "
        "and a key of the --config TOML file; flags win over env, env over the file.",
    )
    add_serve_arguments(serve)
    serve.set_defaults(func=cmd_serve)
    ticket = sub.add_parser(
        "ticket",
        help="mint a single-use ticket (for a control plane)",
        description="Print a single-use ticket signed with the first secret of "
        "--secret-file or $ACP_RELAY_SECRET.",
    )
    _add_ticket_arguments(ticket)
    ticket.set_defaults(func=cmd_ticket)
    connect = sub.add_parser(
        "connect",
        help="be the agent for an editor: bridge stdin/stdout to a relay's WebSocket",
        description="Launched by an editor as if it were the agent: each stdin line goes to "
        "the relay at URL as one WebSocket message, each message comes back as one stdout "
        "line. When the relay cannot be reached or the connection ends, every request gets "
        "a JSON-RPC error saying why. The ticket comes from --ticket-command, --ticket-file, "
        f"--ticket or ${TICKET_ENV}.",
    )
    _add_connect_arguments(connect)
    connect.set_defaults(func=cmd_connect)
    return parser


def _add_ticket_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--secret-file",
        default=os.environ.get("ACP_RELAY_SECRET_FILE") or None,
        help="file of secrets, one a line; the first signs (default: $ACP_RELAY_SECRET_FILE)",
    )
    parser.add_argument("--ttl", type=_ttl, default=60.0, help="seconds (default: 60)")
    parser.add_argument(
        "--subject", default=None, help="who the ticket is for, shown in logs (default: $USER)"
    )
    parser.add_argument("--audience", default=None, help="the relay it is for (--audience there)")
    parser.add_argument("--url", default=None, help="print the full ws:// URL with ?ticket=")


def _ttl(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(
            f"expected seconds greater than 0 such as 60, got {text!r}"
        )
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``acp-relay``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except (ConfigError, UsageError) as exc:
        print(f"acp-relay: {exc}", file=sys.stderr)
        return 2
    return status


# -- ticket -----------------------------------------------------------------------


def cmd_ticket(args: argparse.Namespace) -> int:
    """Print a ticket, or a URL carrying one."""
    signing = load_secrets(args.secret_file, os.environ.get(SECRET_ENV))[0]
    subject = args.subject or os.environ.get("USER") or "acp-relay-ticket"
    ticket = fresh_ticket(signing, subject=subject, audience=args.audience, ttl=args.ttl)
    print(with_ticket(args.url, ticket) if args.url else ticket)
    return 0


def load_secrets(secret_file: str | None, secret_env: str | None) -> tuple[str, ...]:
    """Secrets from the file, else from $ACP_RELAY_SECRET; a UsageError says how to give one."""
    if secret_file:
        try:
            text = Path(secret_file).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read --secret-file {secret_file}: {exc.strerror}") from exc
        return parse_secrets(text, source=f"--secret-file {secret_file}")
    if secret_env:
        return parse_secrets(secret_env, source=SECRET_ENV)
    raise UsageError(
        "no secret: give --secret-file FILE (one secret a line, the first signs) "
        f"or set {SECRET_ENV}; for a throwaway local setup use `acp-relay serve --dev`"
    )


# -- serve ------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    """Resolve the configuration, then run the relay until SIGTERM or SIGINT."""
    settings = read_settings(vars(args), os.environ)
    logs.configure(settings.log_level, settings.log_format)
    if settings.dev:
        secrets = _dev_secrets(settings)
    else:
        secrets = load_secrets(settings.secret_file, settings.secret_env)
    for secret in secrets:
        register_secret(secret)
    config = relay_config(settings, secrets, os.environ)
    uvloop.run(run_relay(config, settings, secrets))
    return 0


def read_settings(flags: Mapping[str, object], env: Mapping[str, str]) -> Settings:
    """Flags, environment and config file, merged by :func:`relay.config.resolve`."""
    flags = {k: v for k, v in flags.items() if k not in ("func", "command")}
    path = config_file_path(flags, env)
    text = None
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read --config {path}: {exc.strerror}") from exc
    return resolve(flags, env, text, cwd=os.getcwd(), file_name=path)


def _dev_secrets(settings: Settings) -> tuple[str, ...]:
    if settings.secret_file or settings.secret_env:
        return load_secrets(settings.secret_file, settings.secret_env)
    return (random_secrets.token_urlsafe(32),)


def relay_config(settings: Settings, secrets: Sequence[str], env: Mapping[str, str]) -> RelayConfig:
    """The server's configuration; the agent defaults to the demo agent under --dev."""
    argv = settings.agent_argv
    if argv is None:
        if not settings.dev:
            raise UsageError(
                "no agent: give --agent 'COMMAND ARGS' (or ACP_RELAY_AGENT); "
                "try `acp-relay serve --dev` for the built-in demo agent"
            )
        argv = DEMO_AGENT
    ttl = max(settings.ticket_ttl, DEV_TICKET_TTL) if settings.dev else settings.ticket_ttl
    policy = Policy(
        secrets=tuple(secrets),
        ticket_ttl=ttl,
        audience=settings.audience,
        allow_origins=settings.allow_origins,
        max_connections=settings.max_connections,
    )
    return RelayConfig(
        host=settings.host,
        port=settings.port,
        path=settings.path,
        agent_argv=tuple(argv),
        workspace=settings.workspace,
        agent_env=agent_environment(env, settings.agent_env),
        policy=policy,
        max_message_bytes=settings.max_message_bytes,
        ping_interval=settings.ping_interval,
        ping_timeout=settings.ping_timeout,
        kill_grace=settings.kill_grace,
        open_timeout=settings.open_timeout,
        rewrite=rewrite_policy(settings, env),
        console=settings.dev,
        trace_dir=_trace_dir(settings.trace_dir),
        trace_max_bytes=settings.trace_max_bytes,
    )


def _trace_dir(path: str | None) -> str | None:
    """``--trace-dir``, created (mode 0700) if missing; a UsageError if it cannot be used."""
    if path is None:
        return None
    try:
        return prepare_directory(path)
    except OSError as exc:
        raise UsageError(f"cannot use --trace-dir {path}: {exc.strerror or exc}") from exc


def rewrite_policy(settings: Settings, env: Mapping[str, str]) -> RewritePolicy:
    """Path mapping and MCP servers for the session-opening rewrite."""
    cwd = CwdPolicy(
        rules=settings.cwd_map,
        fallback=settings.cwd_fallback,
        workspace=settings.workspace,
        must_exist=settings.cwd_must_exist,
    )
    servers: tuple[McpServer, ...] = ()
    if settings.mcp_servers:
        servers = load_mcp_file(settings.mcp_servers, env)
    mcp = McpPolicy(servers, settings.mcp_merge, settings.drop_client_stdio_mcp)
    return RewritePolicy(cwd, mcp)


def load_mcp_file(path: str, env: Mapping[str, str]) -> tuple[McpServer, ...]:
    """The ``--mcp-servers`` file, validated, with ``${VAR}`` expanded from ``env``."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read --mcp-servers {path}: {exc.strerror}") from exc
    try:
        return load_servers(text, env, source=f"--mcp-servers {path}")
    except McpConfigError as exc:
        raise UsageError(str(exc)) from exc


async def run_relay(config: RelayConfig, settings: Settings, secrets: Sequence[str]) -> None:
    """Serve until SIGTERM/SIGINT, then shut down within kill-grace + 2 s."""
    relay = Relay(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await relay.start()
    except OSError as exc:
        host = f"[{config.host}]" if ":" in config.host else config.host
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise UsageError(f"cannot listen on {host}:{config.port} (--listen): {why}") from exc
    log = logs.get_logger("relay")
    url = f"ws://{_url_host(config.host)}:{relay.port}{config.path}"
    log.info("listening", url=url, agent=shlex.join(config.agent_argv), pid=os.getpid())
    if config.rewrite is not None:
        log.info(
            "session rewrite",
            cwd_map=describe_rules(config.rewrite.cwd),
            mcp_servers=[server["name"] for server in config.rewrite.mcp.servers],
            mcp_merge=config.rewrite.mcp.merge,
            drop_client_stdio_mcp=config.rewrite.mcp.drop_client_stdio,
        )
    with tempfile.TemporaryDirectory(prefix="acp-relay-dev-") as scratch:
        if settings.dev:
            print_dev_banner(url, secrets[0], settings.audience, Path(scratch))
        await stop.wait()
    log.info("shutting down", connections=len(relay.sessions))
    try:
        await asyncio.wait_for(relay.shutdown(), config.kill_grace + SHUTDOWN_MARGIN)
    except TimeoutError:
        log.error("shutdown took too long; killing what is left")
        relay.kill_agents()
    log.info("stopped")


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def self_command() -> str:
    """How to run this acp-relay again: the script's full path, or ``python -m relay``.

    The banner's commands then work without the virtualenv on PATH.
    """
    script = Path(sys.argv[0])
    if script.name == "acp-relay":
        return shlex.quote(str(script.resolve()))
    return shlex.join([sys.executable, "-m", "relay"])


def print_dev_banner(url: str, secret: str, audience: str | None, scratch: Path) -> None:
    """Print ready-to-use URLs on stdout (never in the logs): each ticket works once."""
    secret_file = scratch / "secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    browser = fresh_ticket(secret, subject="dev-browser", audience=audience, ttl=DEV_TICKET_TTL)
    editor = fresh_ticket(secret, subject="dev-editor", audience=audience, ttl=DEV_TICKET_TTL)
    me = self_command()
    more = f"{me} ticket --secret-file {secret_file} --ttl {DEV_TICKET_TTL} --url {url}"
    console = "http://" + url.split("/")[2] + "/"  # ws://HOST:PORT/path -> http://HOST:PORT/
    print(
        "\nacp-relay is running in --dev mode (throwaway secret, demo agent by default).\n"
        f"  Dev console (a fresh ticket per page load):\n    {console}\n"
        f"  WebSocket URL (single use):\n    {with_ticket(url, browser)}\n"
        f"  Editor command (single use):\n    ACP_RELAY_TICKET={editor} {me} connect {url}\n"
        f"  More tickets:\n    {more}\n",
        flush=True,
    )


# -- connect ------------------------------------------------------------------------

TICKET_ENV = "ACP_RELAY_TICKET"
_HEADER_NAME_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")


def _add_connect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="the relay's endpoint, ws:// or wss://")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--ticket-command",
        metavar="COMMAND",
        help="command that prints a fresh ticket, split like a shell but never run by one; "
        "run at each connect",
    )
    source.add_argument("--ticket-file", metavar="FILE", help="file holding the ticket")
    source.add_argument(
        "--ticket",
        metavar="TICKET",
        help=f"the ticket itself; shows in process listings, prefer ${TICKET_ENV}",
    )
    parser.add_argument(
        "--ticket-in",
        choices=("header", "query"),
        default="header",
        help="send the ticket as Authorization: Bearer (header, default) or ?ticket= (query)",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="extra header on the upgrade request, e.g. for a proxy (repeatable)",
    )
    parser.add_argument(
        "--cacert", metavar="FILE", help="PEM CA bundle trusted for wss:// instead of the system's"
    )
    parser.add_argument(
        "--max-message-bytes",
        type=_size,
        default=64 * 1024 * 1024,
        metavar="SIZE",
        help="largest message either way, in bytes or with KiB/MiB/GiB (default: 64MiB)",
    )
    for name, default, what in (
        ("ping-interval", 20.0, "seconds between heartbeat pings"),
        ("ping-timeout", 20.0, "seconds without a pong before the relay counts as gone"),
        ("open-timeout", 10.0, "seconds to reach the relay and finish the handshake"),
    ):
        parser.add_argument(
            f"--{name}",
            type=_ttl,
            default=default,
            metavar="SECONDS",
            help=f"{what} (default: {default:g})",
        )
    parser.add_argument(
        "--log-format",
        choices=("json", "console", "auto"),
        default="auto",
        help="log format on stderr (default: auto, console on a terminal, else json)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="log level (default: info)",
    )


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_connect(args: argparse.Namespace) -> int:
    """Bridge this process's stdin and stdout to the relay until stdin closes."""
    config = connect_config(args, os.environ)
    logs.configure(args.log_level, None if args.log_format == "auto" else args.log_format)
    try:
        return uvloop.run(run_bridge(config))
    except UsageProblem as exc:
        raise UsageError(str(exc)) from exc


def connect_config(args: argparse.Namespace, env: Mapping[str, str]) -> BridgeConfig:
    """The bridge's configuration from the flags and $ACP_RELAY_TICKET; UsageError if wrong."""
    url = _relay_url(args.url)
    source = _ticket_source(args, env, ticket_in(args.url))
    if source.value is not None:
        register_secret(source.value)
    headers = tuple(_header(text) for text in args.header)
    if args.ticket_in == "header" and any(name.lower() == "authorization" for name, _ in headers):
        raise UsageError(
            "--header Authorization would replace the ticket; use --ticket-in query with it"
        )
    return BridgeConfig(
        url=url,
        ticket=source,
        ticket_in=args.ticket_in,
        headers=headers,
        tls=_tls_context(url, args.cacert),
        max_message_bytes=args.max_message_bytes,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        open_timeout=args.open_timeout,
    )


def _relay_url(text: str) -> str:
    """``text`` without its ticket, checked to be a ws:// or wss:// URL with a host."""
    url = without_ticket(text)
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("ws", "wss") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number
        valid = False
    if not valid:
        raise UsageError(
            f"expected a ws:// or wss:// URL such as wss://relay.example.com/acp, got {url!r}"
        )
    return url


def _ticket_source(
    args: argparse.Namespace, env: Mapping[str, str], url_ticket: str | None
) -> TicketSource:
    """Flags first, then a ``?ticket=`` in the URL, then $ACP_RELAY_TICKET."""
    flagged = args.ticket_command is not None or args.ticket_file or args.ticket is not None
    if url_ticket and flagged:
        raise UsageError("the URL already carries ?ticket=; give the ticket one way only")
    if args.ticket_command is not None:
        return TicketSource(command=_command_words(args.ticket_command))
    if args.ticket_file:
        return TicketSource(file=args.ticket_file)
    if args.ticket is not None:
        if not args.ticket.strip():
            raise UsageError("--ticket is empty")
        return TicketSource(value=args.ticket.strip())
    if url_ticket:
        return TicketSource(value=url_ticket)
    if env.get(TICKET_ENV, "").strip():
        return TicketSource(value=env[TICKET_ENV].strip())
    raise UsageError(
        f"no ticket: set {TICKET_ENV}, or give --ticket-command 'CMD' (a fresh ticket at each "
        "connect), --ticket-file FILE or --ticket TICKET (shows in process listings)"
    )


def _command_words(text: str) -> tuple[str, ...]:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"cannot split --ticket-command like a shell: {exc}") from None
    if not words:
        raise UsageError("--ticket-command is empty")
    return tuple(words)


def _header(text: str) -> tuple[str, str]:
    """``Name: value`` as a pair; the value (maybe a credential) is never echoed."""
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not name or not set(name.lower()) <= _HEADER_NAME_CHARS:
        raise UsageError(f"--header expects 'Name: value', got one starting {name[:40]!r}")
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"--header {name}: the value has a line break or NUL")
    return name, value.strip()


def _tls_context(url: str, cacert: str | None) -> ssl.SSLContext | None:
    """The trust for wss://: the system store, or only ``cacert`` when given."""
    if cacert is None:
        return None
    if not url.startswith("wss:"):
        raise UsageError("--cacert is for wss:// URLs")
    try:
        return ssl.create_default_context(cafile=cacert)
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot load --cacert {cacert}: {why}") from None
