"""Defaults shared by ``serve``, ``connect``, the server and the bridge: one place for each.

Pure constants. The option tables (:mod:`relay.config.settings`, :mod:`relay.commands`) show them in
``--help`` and docs/configuration.md; the server's and the bridge's configurations
default to them.
"""

from __future__ import annotations

MIB = 1024 * 1024

LISTEN = "127.0.0.1:8765"
PATH = "/acp"
MAX_CONNECTIONS = 64
MAX_MESSAGE_BYTES = 64 * MIB  # largest WebSocket message either way
PING_INTERVAL = 20.0  # seconds between keepalive pings
PING_TIMEOUT = 20.0  # seconds without a pong before the peer counts as gone
OPEN_TIMEOUT = 10.0  # seconds to reach the peer and finish the WebSocket handshake
KILL_GRACE = 3.0  # seconds after stdin EOF before SIGTERM, and after SIGTERM before SIGKILL
TICKET_TTL = 60.0  # seconds a ticket stays valid
TRACE_MAX_BYTES = 16 * MIB
MIN_TRACE_MAX_BYTES = 1024  # a smaller --trace-max-bytes would not hold an open record
CONFIG_ENV = "ACP_RELAY_CONFIG"  # the config file, when no --config is given
SECRET_ENV = "ACP_RELAY_SECRET"  # the ticket secret itself, instead of --secret-file
RESUME_GRACE = 60.0  # seconds a detached resumable connection waits for a resume
RESUME_BUFFER = 16 * MIB  # agent output kept per resumable connection until acknowledged
MAX_WATCHERS = 4  # watchers one connection may have at once
WATCH_HISTORY = 1 * MIB  # the conversation kept per connection for watchers that attach later
LOG_LEVEL = "info"
TICKET_ENV = "ACP_RELAY_TICKET"  # connect's ticket (serve does not read it)
WARM_MAX_AGE = 600.0  # seconds a warm agent waits for a connection before it is recycled
DEV_TICKET_TTL = 8 * 3600  # seconds the tickets of serve --dev stay valid at least: a working day
