"""What happens to a connection and what it does about it: the events
:class:`relay.core.lifecycle.Lifecycle` is told and the steps it answers.

Pure: plain values, like h11's events. The I/O layer (:mod:`relay.server.connections.connection`)
makes the events of what it sees and carries out the steps. A socket is named by a number
of the I/O's (``socket``): the lifecycle decides which one is the controlling socket, and
the steps that concern another socket name it.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.core.exits import Exit

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
    """Socket ``socket`` was welcomed as the controlling one: the first, or one that resumed
    the connection (the lifecycle says whether it becomes the controller)."""

    socket: int
    resumed: bool


@dataclass(frozen=True, slots=True)
class SocketGone:
    """Socket ``socket``, once attached, went: ``clean`` when the client closed it with 1000
    or the relay closed it; ``why`` for the log. Only the controller's loss counts."""

    socket: int
    clean: bool
    why: str
    now: float


@dataclass(frozen=True, slots=True)
class AgentExited:
    """The agent's process exited, as its wait saw it."""

    exit: Exit


@dataclass(frozen=True, slots=True)
class AgentStopped:
    """A :class:`StopAgent` is over: the stop's account of the exit, which knows whether the
    relay signalled the agent."""

    exit: Exit


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
    | AgentStopped
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
    grace, then tell :class:`AgentStopped`. With ``eof_first`` False, SIGTERM follows stdin
    EOF at once."""

    eof_first: bool = True


@dataclass(frozen=True, slots=True)
class StopChildren:
    """The agent is gone: stop what is left of its process group."""


@dataclass(frozen=True, slots=True)
class CloseSocket:
    """Close the controlling socket (the lifecycle's, as the step is carried out) with
    ``code`` and ``reason``; None for both: with the agent's exit status."""

    code: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class FenceSocket:
    """Close ``socket``: another socket took the connection over."""

    socket: int


@dataclass(frozen=True, slots=True)
class RefuseSocket:
    """Close the socket just told of as attached with ``code`` and ``reason``: the
    connection ended while it was welcomed."""

    code: int
    reason: str


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
    """The connection ends: close every watcher saying how (:meth:`Lifecycle.watchers_close`,
    read as the step is carried out: once the agent's exit is known)."""


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
    | FenceSocket
    | RefuseSocket
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

AT_ONCE = (
    Detach,
    Resumed,
    ShutdownWatchers,
    AdmitWatcher,
    RefuseWatcher,
    FenceSocket,
    RefuseSocket,
)
"""Steps carried out as their event is told: about the watchers, the log, or a socket
other than the controller (fenced, or refused as it arrives). The others concern the
agent and the controlling socket and are carried out in order, each once the one before
it is done (a flush, an agent's stop, take time)."""
