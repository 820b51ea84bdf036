"""``acp-relay serve``: resolve the settings, then run the relay under uvloop until a signal.

Reads the environment, the config file, the secret file and the MCP servers file, hands
them to the pure :mod:`relay.config.settings`, checks what the settings name (the agent's
program, its account, the folders), and has :func:`relay.config.resolved.assemble` build
the server's :class:`relay.config.resolved.RelayConfig` from the result.

The listening socket is bound (:mod:`relay.server.http.listener`) as soon as the settings are
checked, before the server's modules (websockets, structlog, the connection code) are
imported: a client that connects meanwhile waits in the backlog and is answered once
the server runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import secrets as random_secrets
import shlex
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from relay.acp.mcp import McpServer
from relay.acp.paths import describe_rules
from relay.commands.devbanner import print_dev_banner
from relay.commands.devfolder import DevFolder, remove_stale
from relay.commands.preflight import (
    agent_account,
    check_account_reaches,
    check_agent_program,
    check_workspace,
    demo_sdk_installed,
    load_secrets,
    private_directory,
    state_directory,
)
from relay.commands.processsetup import keep_memory_private, raise_open_files_limit
from relay.commands.startsignals import STOP_SIGNALS, defer_stop_signals, stop_if_requested
from relay.config.errors import UsageError
from relay.config.resolved import RelayConfig, assemble, mcp_servers
from relay.config.settings import (
    SECRET_ENV,
    Settings,
    add_serve_arguments,
    agent_environment,
    config_file_path,
    config_file_source,
    resolve,
    settings_given,
)
from relay.config.startupchecks import (
    StartupWarning,
    environment_warnings,
    secret_file_warnings,
    secret_warnings,
)
from relay.core.origins import bracketed
from relay.core.redaction import Redactor
from relay.server.agents.watchdog import Watchdog
from relay.server.http.listener import bind_early, cannot_listen
from relay.streams.filereader import read_named

if TYPE_CHECKING:
    import asyncio
    import socket

    from relay.observe import logs

DEMO_AGENT = (sys.executable, "-m", "relay.demo_agent")
SHUTDOWN_MARGIN = 2.0
NOT_PRIVATE = "cannot make the relay non-dumpable: its agents may read its secret in /proc"
WATCHDOG_LOST = "agent watchdog gone: agents would outlive a crash of the relay"
NO_SPEEDUPS = (
    "websockets runs without its C speedups (websockets.speedups): each frame from a client "
    "is unmasked in Python, at a cost per byte; install websockets from a wheel for this "
    "platform, or with a C compiler"
)
STALE_DEV_FOLDER = "removed the folder of a --dev relay that is gone (its throwaway secret)"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` subcommand: ``--config`` and every option of
    :mod:`relay.config.settings`."""
    parser = commands.add_parser(
        "serve",
        help="accept WebSockets and run one agent per socket",
        description="Accept WebSocket connections with a signed ticket and run one agent "
        "process per socket. Every flag is also an ACP_RELAY_<NAME> environment variable "
        "and a key of the --config TOML file; flags win over env, env over the file.",
    )
    add_serve_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Resolve the configuration, then run the relay until SIGTERM, SIGINT or SIGHUP."""
    private = keep_memory_private()
    settings = read_settings(vars(args), os.environ)
    warnings = list(environment_warnings(os.environ))
    if not private and sys.platform == "linux":
        warnings.append(StartupWarning(NOT_PRIVATE))
    if not websockets_speedups():
        warnings.append(StartupWarning(NO_SPEEDUPS))
    if not settings.dev:
        return run_with(settings, warnings, None)
    stop_if_requested()  # before the folder is made
    for stale in remove_stale():
        warnings.append(StartupWarning(STALE_DEV_FOLDER, {"folder": stale}))
    dev = DevFolder.create()
    try:
        if not settings.workspace_given:
            settings = replace(settings, workspace=dev.make_workspace())
        return run_with(settings, warnings, dev)
    finally:
        dev.remove()


def websockets_speedups() -> bool:
    """Whether websockets has its C extension (it falls back to Python without a word)."""
    return importlib.util.find_spec("websockets.speedups") is not None


def run_with(settings: Settings, warnings: list[StartupWarning], dev: DevFolder | None) -> int:
    """Start the relay with ``settings`` (``dev``: the --dev run's folder) and run it."""
    redacting = Redactor()  # the relay's secrets, never logged nor traced
    try:
        secrets = read_secrets(settings, warnings)
        for secret in secrets:
            redacting.add_secret(secret)
        config = relay_config(settings, secrets, os.environ, redacting)
        if settings.dev:
            config = replace(config, console_token=new_console_token())
            redacting.add_secret(config.console_token)
        open_files = raise_open_files_limit()
        listening = bind_early(config.host, config.port)
        watchdog = launch_watchdog(config.kill_grace)  # it starts while the server loads
    finally:  # the warnings first, even when start-up stops (they may say why)
        warn(settings, warnings, redacting)
    try:
        stop_if_requested()  # a stop signal while the above ran: the watchdog goes below
        import uvloop  # only now the server's own modules: the socket above takes connections

        uvloop.run(run_relay(config, settings, secrets, open_files, listening, watchdog, dev))
    finally:
        defer_stop_signals()  # the loop's handlers are gone: the clean-up is not cut short
        watchdog.close()
    return 0


def launch_watchdog(grace: float) -> Watchdog:
    """The agents' watchdog (:mod:`relay.server.agents.watchdog`), launched; :func:`run_relay` waits
    for it."""

    def lost() -> None:
        from relay.observe import logs

        logs.get_logger("relay").error(WATCHDOG_LOST)

    try:
        return Watchdog.launch(grace, lost)
    except OSError as exc:
        raise UsageError(f"cannot start the agents' watchdog: {exc}") from exc


def new_console_token() -> str:
    """A fresh per-run token for the dev console's address (see
    :mod:`relay.server.http.devconsole`)."""
    from relay.server.http import devconsole

    return devconsole.new_token(os.urandom(devconsole.TOKEN_BYTES))


def read_settings(flags: Mapping[str, object], env: Mapping[str, str]) -> Settings:
    """Flags, environment and config file, merged by :func:`relay.config.settings.resolve`."""
    flags = {k: v for k, v in flags.items() if k not in ("func", "command")}
    path = config_file_path(flags, env)
    text = read_named(path, config_file_source(flags)) if path else None
    return resolve(flags, env, text, cwd=os.getcwd(), file_name=path)


def read_secrets(settings: Settings, warnings: list[StartupWarning]) -> tuple[str, ...]:
    """The ticket secrets, checked (a warning added if short or exposed, exit 2 if too
    short); under --dev without any, a throwaway one."""
    if settings.dev and not (settings.secret_file or settings.secret_env):
        return (random_secrets.token_urlsafe(32),)
    secrets = load_secrets(settings.secret_file, settings.secret_env)
    source = f"--secret-file {settings.secret_file}" if settings.secret_file else SECRET_ENV
    warnings.extend(secret_warnings(secrets, source))
    if settings.secret_file:
        mode = os.stat(settings.secret_file).st_mode
        warnings.extend(secret_file_warnings(settings.secret_file, mode))
    return secrets


def warn(
    settings: Settings, warnings: Sequence[StartupWarning], redacting: Redactor | None = None
) -> None:
    """Set up the logs (redacted of ``redacting``'s secrets), then log each start-up warning,
    once."""
    from relay.observe import logs

    logs.configure(settings.log_level, settings.log_format, redacting=redacting)
    log = logs.get_logger("relay")
    for each in warnings:
        log.warning(each.event, **each.fields)


def agent_command(settings: Settings) -> tuple[str, ...]:
    """The agent's argv: --agent, else under --dev the demo agent (if its SDK is there)."""
    if settings.agent_argv is not None:
        return settings.agent_argv
    if not settings.dev:
        raise UsageError(
            "no agent: give --agent 'COMMAND ARGS' (or ACP_RELAY_AGENT); "
            "try `acp-relay serve --dev` for the built-in demo agent"
        )
    if not demo_sdk_installed():
        raise UsageError(
            "the --dev demo agent needs the ACP Python SDK, which is not installed "
            "(No module named 'acp'): install acp-relay with its demo extra "
            "(pip install -e '.[demo]' in a checkout, or 'WHEEL[demo]'), or give --agent 'COMMAND'"
        )
    return DEMO_AGENT


def relay_config(
    settings: Settings, secrets: Sequence[str], env: Mapping[str, str], redacting: Redactor
) -> RelayConfig:
    """The server's configuration (:func:`relay.config.resolved.assemble`), once the agent's
    program and workspace are checked, the MCP servers file read and the folders made
    ready; the agent defaults to the demo agent under --dev. The values the MCP servers
    file expands go to ``redacting``."""
    if settings.dev:
        from relay.server.http import devconsole

        remote = devconsole.remote_dev_refusal(settings.host, settings.dev_allow_remote)
        if remote is not None:
            raise UsageError(remote)
    argv = agent_command(settings)
    account = agent_account(settings.agent_user, settings.agent_group)
    extra_env = () if account is None else account.environment()
    agent_env = agent_environment(env, (*extra_env, *settings.agent_env))
    program = check_agent_program(argv, agent_env, settings.workspace)
    check_workspace(settings.workspace)
    if account is not None:
        check_account_reaches(account, settings.workspace, program)
    servers: tuple[McpServer, ...] = ()
    if settings.mcp_servers:
        servers = load_mcp_file(settings.mcp_servers, env, redacting)
    return assemble(
        settings,
        secrets=secrets,
        agent_argv=argv,
        agent_env=agent_env,
        account=account,
        mcp_servers=servers,
        trace_dir=private_directory(settings.trace_dir, "--trace-dir"),
        state_dir=state_directory(settings.state_dir),
    )


def loop_errors(log: logs.Logger) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An event loop exception handler: each kind logged once per 10 s, with how many more.

    Failed accepts (out of file descriptors, say) come this way, as many as connections try.
    """
    from relay.server.http.edge import RateLimitedLog

    limited = RateLimitedLog(log)

    def handle(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        limited.warning(
            str(context.get("message", "event loop error")),
            reason=None if error is None else f"{type(error).__name__}: {error}",
        )

    return handle


def load_mcp_file(path: str, env: Mapping[str, str], redacting: Redactor) -> tuple[McpServer, ...]:
    """The ``--mcp-servers`` file, read and validated (:func:`relay.config.resolved.mcp_servers`),
    each value it expands a secret of ``redacting``."""
    servers, expanded = mcp_servers(read_named(path, "--mcp-servers"), env, path)
    for value in expanded:
        redacting.add_secret(value)  # tokens the file names by ${VAR}: never logged nor traced
    return servers


async def run_relay(
    config: RelayConfig,
    settings: Settings,
    secrets: Sequence[str],
    open_files: int | None,
    listening: socket.socket | None,
    watchdog: Watchdog,
    dev: DevFolder | None = None,
) -> None:
    """Serve (on ``listening`` if bound already) until SIGTERM, SIGINT or SIGHUP, then shut
    down within kill-grace + 2 s.

    The agents' watchdog (:mod:`relay.server.agents.watchdog`, launched by :func:`run`) runs
    alongside:
    should this process die without shutting down (SIGKILL, a crash), it stops the agents.
    """
    try:
        watchdog.ready()
    except OSError as exc:
        raise UsageError(f"cannot start the agents' watchdog: {exc}") from exc
    await serve_with(config, settings, secrets, open_files, watchdog, listening, dev)


async def serve_with(
    config: RelayConfig,
    settings: Settings,
    secrets: Sequence[str],
    open_files: int | None,
    watchdog: Watchdog,
    listening: socket.socket | None = None,
    dev: DevFolder | None = None,
) -> None:
    """The relay's life, from listening to every agent stopped (``dev``: the --dev run's
    folder, for the banner)."""
    import asyncio

    from relay.observe import logs
    from relay.server.serving import Relay

    relay = Relay(config, guard=watchdog)
    stop = asyncio.Event()
    stopped_by: list[str] = []
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, _stop_on, sig, stop, stopped_by)
    stop_if_requested()  # one noted until the loop took them over: start nothing
    loop.set_exception_handler(loop_errors(logs.get_logger("relay")))
    try:
        await relay.start(listening)
    except OSError as exc:
        raise cannot_listen(config.host, config.port, exc) from exc
    log = logs.get_logger("relay")
    url = f"ws://{_url_host(config.host)}:{relay.port}{config.path}"  # one to connect to
    log.info(
        "listening",
        url=f"ws://{bracketed(config.host)}:{relay.port}{config.path}",  # as bound
        addresses=relay.addresses,
        agent=shlex.join(config.agent_argv),
        relay_pid=os.getpid(),
        open_files=open_files,
        watchdog_pid=watchdog.pid,
    )
    log.info("settings", given=settings_given(settings))
    if config.rewrite is not None:
        log.info(
            "session rewrite",
            cwd_map=describe_rules(config.rewrite.cwd),
            files=config.rewrite.files,
            mcp_servers=[server["name"] for server in config.rewrite.mcp.servers],
            mcp_merge=config.rewrite.mcp.merge,
            drop_client_stdio_mcp=config.rewrite.mcp.drop_client_stdio,
        )
    if dev is not None:
        print_dev_banner(url, secrets[0], settings, config, dev)
    await stop.wait()
    log.info("shutting down", signal=stopped_by[0], connections=len(relay.connections))
    try:
        await asyncio.wait_for(relay.shutdown(), config.kill_grace + SHUTDOWN_MARGIN)
    except TimeoutError:
        log.error("shutdown took too long; killing what is left")
        relay.kill_agents()
    log.info("stopped")


def _stop_on(sig: signal.Signals, stop: asyncio.Event, stopped_by: list[str]) -> None:
    if not stop.is_set():
        stopped_by.append(sig.name)
    stop.set()


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return bracketed(host)
