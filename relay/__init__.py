"""acp-relay: serve an ACP agent over WebSocket, one agent process per socket."""

__version__ = "0.1.0.dev0"
