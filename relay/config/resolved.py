"""What ``serve`` needs, resolved: the server's and every connection's settings.

Pure data. Where :mod:`relay.config.settings` holds the settings as the user gave them
(flag, environment, file, default), this holds what the running relay is made of, built
from them by the CLI (secrets read, rules parsed, MCP servers loaded); nothing is read
from files or the environment past this point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.acp.rewrite import RewritePolicy
from relay.config import defaults
from relay.core.admission import Policy

if TYPE_CHECKING:
    from relay.config.account import Account


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
    warm_agents: int = 0  # agents started ahead of demand (relay.connections.warmagents)
    warm_max_age: float = defaults.WARM_MAX_AGE  # seconds one waits before it is recycled
