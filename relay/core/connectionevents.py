"""What happens to a connection and what it does about it: the events
:class:`relay.core.lifecycle.Lifecycle` is told and the steps it answers.

Pure: plain values, like h11's events. The I/O layer (:mod:`relay.server.connections.connection`)
makes the events of what it sees and carries out the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

# -- events: what the I/O layer tells the lifecycle ---------------------------------------


@dataclass(frozen=True, slots=True)
class AgentStarted:
    """The agent runs (started now, or taken from the warm pool)."""


@dataclass(frozen=True, slots=True)
class StartFailed:
    """The agent could not start, and why."""

    why: str


@dataclass(frozen=True, slots=True)
class SocketAttached:
    """A socket became the controlling one: the first, or one that resumed the connection
    (fencing the one before it, if any)."""

    resumed: bool


@dataclass(frozen=True, slots=True)
class SocketGone:
    """The controlling socket went: ``clean`` when the client closed it with 1000 or the
    relay closed it; ``why`` for the log."""

    clean: bool
    why: str
    now: float


@dataclass(frozen=True, slots=True)
class AgentExited:
    """The agent's process exited."""


@dataclass(frozen=True, slots=True)
class StdoutEnded:
    """The agent's stdout ended and all of it was handed on."""

    now: float


@dataclass(frozen=True, slots=True)
class Flushed:
    """A :class:`FlushOutput` is over: the output went, or the socket did."""


@dataclass(frozen=True, slots=True)
class StopRequested:
    """The relay is shutting down."""


@dataclass(frozen=True, slots=True)
class RelayFailed:
    """A task of the relay's own failed (a bug): ``error`` names it for the close reason."""

    error: str


@dataclass(frozen=True, slots=True)
class Tick:
    """The time :meth:`Lifecycle.deadline` gave has come (or a wait ended for nothing)."""

    now: float


@dataclass(frozen=True, slots=True)
class WatcherArrived:
    """A watcher's socket asks to see the connection."""


@dataclass(frozen=True, slots=True)
class WatcherLeft:
    """A watcher that was admitted is gone."""


Event = (
    AgentStarted
    | StartFailed
    | SocketAttached
    | SocketGone
    | AgentExited
    | StdoutEnded
    | Flushed
    | StopRequested
    | RelayFailed
    | Tick
    | WatcherArrived
    | WatcherLeft
)


# -- steps: what the I/O layer carries out, in order ---------------------------------------


@dataclass(frozen=True, slots=True)
class FlushOutput:
    """Wait until the agent's output has reached the socket (or the socket went), stopping
    what is left of its process group meanwhile; then tell :class:`Flushed`."""


@dataclass(frozen=True, slots=True)
class StopAgent:
    """Stop the agent with its process group: stdin EOF, SIGTERM, SIGKILL, each after a
    grace. With ``eof_first`` False, SIGTERM follows stdin EOF at once."""

    eof_first: bool = True


@dataclass(frozen=True, slots=True)
class StopChildren:
    """The agent is gone: stop what is left of its process group."""


@dataclass(frozen=True, slots=True)
class CloseSocket:
    """Close the controlling socket with ``code`` and ``reason``; None for both: with the
    agent's exit status."""

    code: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class KeptRunning:
    """The agent closed its stdout and ran on: the log names how it ends, once it has."""


@dataclass(frozen=True, slots=True)
class Detach:
    """The socket is lost: keep the agent running, wait ``grace`` seconds for a resume;
    log it and tell the watchers (``why`` the socket went)."""

    why: str
    grace: float


@dataclass(frozen=True, slots=True)
class Resumed:
    """A socket resumed the connection: tell the watchers."""


@dataclass(frozen=True, slots=True)
class GraceExpired:
    """No socket resumed the connection within ``grace`` seconds: log it."""

    grace: float


@dataclass(frozen=True, slots=True)
class CloseWatchers:
    """The connection ends: close every watcher saying how (:func:`watchers_close`)."""


@dataclass(frozen=True, slots=True)
class ShutdownWatchers:
    """The relay is stopping: close every watcher with 1001 saying so, before the server's
    own close of every socket (which would say nothing)."""


@dataclass(frozen=True, slots=True)
class AdmitWatcher:
    """Show the arriving watcher the conversation."""


@dataclass(frozen=True, slots=True)
class RefuseWatcher:
    """Close the arriving watcher's socket with ``code`` and ``reason``."""

    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class End:
    """The connection is over: nothing of it remains once the steps before are done."""


Step = (
    FlushOutput
    | StopAgent
    | StopChildren
    | CloseSocket
    | KeptRunning
    | Detach
    | Resumed
    | GraceExpired
    | CloseWatchers
    | ShutdownWatchers
    | AdmitWatcher
    | RefuseWatcher
    | End
)
