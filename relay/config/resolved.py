"""What ``serve`` needs, resolved: the server's and every connection's settings, assembled.

Pure. Where :mod:`relay.config.settings` holds the settings as the user gave them (flag,
environment, file, default), this holds what the running relay is made of, and
:func:`assemble` builds it from them and from what the CLI read and checked (the secrets,
the agent's program and account, the MCP servers file's text, the folders made ready);
nothing is read from files or the environment past this point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.acp.mcp import McpConfigError, McpPolicy, McpServer, expanded_values, load_servers
from relay.acp.paths import CwdPolicy
from relay.acp.rewrite import RewritePolicy
from relay.config import defaults
from relay.config.errors import UsageError
from relay.core.admission import Policy

if TYPE_CHECKING:
    from relay.config.account import Account
    from relay.config.settings import Settings


@dataclass(frozen=True)
class RelayConfig:
    """What ``serve`` needs, resolved: no files or environment are read past this point."""

    host: str
    port: int
    path: str
    agent_argv: tuple[str, ...]
    workspace: str
    agent_env: dict[str, str]
    policy: Policy
    max_message_bytes: int
    ping_interval: float
    ping_timeout: float
    kill_grace: float
    open_timeout: float
    rewrite: RewritePolicy | None = None
    console: bool = False  # serve the dev console at / (only under --dev)
    console_token: str = ""  # the console's per-run token (its address's ?token=)
    trace_dir: str | None = None  # one NDJSON trace file per connection
    trace_max_bytes: int = defaults.TRACE_MAX_BYTES
    resume_grace: float = defaults.RESUME_GRACE  # seconds a detached connection waits; 0: off
    resume_buffer: int = defaults.RESUME_BUFFER  # agent output kept until acknowledged
    max_watchers: int = defaults.MAX_WATCHERS  # watchers per connection; 0: sharing off
    watch_history: int = defaults.WATCH_HISTORY  # the conversation kept for watchers
    state_dir: str | None = None  # spent ticket ids kept there across restarts
    metrics_listen: tuple[str, int] | None = None  # /metrics on a port of its own, too
    agent_account: Account | None = None  # run agents as another user (--agent-user)
    warm_agents: int = 0  # agents started ahead of demand (relay.server.agents.warm)
    warm_max_age: float = defaults.WARM_MAX_AGE  # seconds one waits before it is recycled


def assemble(
    settings: Settings,
    *,
    secrets: Sequence[str],
    agent_argv: Sequence[str],
    agent_env: dict[str, str],
    account: Account | None,
    mcp_servers: tuple[McpServer, ...],
    trace_dir: str | None,
    state_dir: str | None,
) -> RelayConfig:
    """The server's configuration from ``settings`` and what the CLI read and checked."""
    return RelayConfig(
        host=settings.host,
        port=settings.port,
        path=settings.path,
        agent_argv=tuple(agent_argv),
        workspace=settings.workspace,
        agent_env=agent_env,
        policy=admission_policy(settings, secrets),
        max_message_bytes=settings.max_message_bytes,
        ping_interval=settings.ping_interval,
        ping_timeout=settings.ping_timeout,
        kill_grace=settings.kill_grace,
        open_timeout=settings.open_timeout,
        rewrite=rewrite_policy(settings, mcp_servers),
        console=settings.dev,
        trace_dir=trace_dir,
        trace_max_bytes=settings.trace_max_bytes,
        resume_grace=settings.resume_grace,
        resume_buffer=settings.resume_buffer,
        max_watchers=settings.max_watchers,
        watch_history=settings.watch_history,
        state_dir=state_dir,
        metrics_listen=settings.metrics_listen,
        agent_account=account,
        warm_agents=warm_agents(settings),
        warm_max_age=settings.warm_max_age,
    )


def admission_policy(settings: Settings, secrets: Sequence[str]) -> Policy:
    """Who may open a socket: the secrets, the tickets' lifetime (under --dev a working day
    at least), the audience, the origins, the most connections."""
    ttl = settings.ticket_ttl
    if settings.dev:
        ttl = max(ttl, defaults.DEV_TICKET_TTL)
    return Policy(
        secrets=tuple(secrets),
        ticket_ttl=ttl,
        audience=settings.audience,
        allow_origins=settings.allow_origins,
        max_connections=settings.max_connections,
    )


def rewrite_policy(settings: Settings, servers: tuple[McpServer, ...]) -> RewritePolicy:
    """Path mapping, MCP servers and the --files policy for the boundary."""
    cwd = CwdPolicy(
        rules=settings.cwd_map,
        fallback=settings.cwd_fallback,
        workspace=settings.workspace,
        must_exist=settings.cwd_must_exist,
    )
    mcp = McpPolicy(servers, settings.mcp_merge, settings.drop_client_stdio_mcp)
    return RewritePolicy(cwd, mcp, settings.files)


def warm_agents(settings: Settings) -> int:
    """--warm-agents as given; when not, 1 under --dev (its console's sockets start at once)
    and 0 otherwise."""
    if settings.warm_agents is not None:
        return settings.warm_agents
    return 1 if settings.dev else 0


def mcp_servers(
    text: str, env: Mapping[str, str], path: str
) -> tuple[tuple[McpServer, ...], tuple[str, ...]]:
    """The servers of the ``--mcp-servers`` file ``path`` (its ``text``), validated, with
    ``${VAR}`` expanded from ``env``; and the values expanded, secrets never to be logged."""
    try:
        servers = load_servers(text, env, source=f"--mcp-servers {path}")
    except McpConfigError as exc:
        raise UsageError(str(exc)) from exc
    return servers, tuple(sorted(expanded_values(text, env)))
