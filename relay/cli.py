"""Command line: ``acp-relay serve`` and ``acp-relay ticket``.

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
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import uvloop

from relay import __version__, logs
from relay.admission import Policy
from relay.config import (
    ConfigError,
    Settings,
    add_serve_arguments,
    agent_environment,
    config_file_path,
    parse_secrets,
    resolve,
)
from relay.mcp import McpConfigError, McpPolicy, McpServer, load_servers
from relay.paths import CwdPolicy, describe_rules
from relay.rewrite import RewritePolicy
from relay.server import Relay, RelayConfig
from relay.ticket import mint, new_nonce

DEMO_AGENT = (sys.executable, "-m", "relay.demo_agent")
DEV_TICKET_TTL = 8 * 3600
SHUTDOWN_MARGIN = 2.0
SECRET_ENV = "ACP_RELAY_SECRET"


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
    return parser


def _add_ticket_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--secret-file", help="file of secrets, one a line; the first signs")
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
    ticket = mint_ticket(signing, subject=subject, audience=args.audience, ttl=args.ttl)
    print(with_ticket(args.url, ticket) if args.url else ticket)
    return 0


def mint_ticket(secret: str, *, subject: str, audience: str | None, ttl: float) -> str:
    """A fresh ticket: real clock, real randomness."""
    return mint(
        secret,
        now=time.time(),
        nonce=new_nonce(os.urandom(16)),
        subject=subject,
        audience=audience,
        ttl=ttl,
    )


def with_ticket(url: str, ticket: str) -> str:
    """``url`` with ``ticket=`` added to its query string."""
    return f"{url}{'&' if '?' in url else '?'}ticket={ticket}"


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
        logs.register_secret(secret)
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
    )


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


def print_dev_banner(url: str, secret: str, audience: str | None, scratch: Path) -> None:
    """Print ready-to-use URLs on stdout (never in the logs): each ticket works once."""
    secret_file = scratch / "secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    browser = mint_ticket(secret, subject="dev-browser", audience=audience, ttl=DEV_TICKET_TTL)
    editor = mint_ticket(secret, subject="dev-editor", audience=audience, ttl=DEV_TICKET_TTL)
    more = f"acp-relay ticket --secret-file {secret_file} --ttl {DEV_TICKET_TTL} --url {url}"
    print(
        "\nacp-relay is running in --dev mode (throwaway secret, demo agent by default).\n"
        f"  WebSocket URL (single use):\n    {with_ticket(url, browser)}\n"
        f"  Editor command (single use):\n    ACP_RELAY_TICKET={editor} acp-relay connect {url}\n"
        f"  More tickets:\n    {more}\n",
        flush=True,
    )
