"""A connection's whole state, as :class:`relay.core.lifecycle.Lifecycle` holds it.

Pure: one frozen :class:`State`, replaced whole by each transition, so that nothing the
lifecycle knows lies outside it. Its :class:`Phase` is where the controlling socket
stands, the flush's aftermath included (a resume or a loss during a flush changes what
the flush's end does, so each is a phase of its own); :class:`Agent` is what is known of
the agent's process, which runs beside the phases (it may exit in any of them). The other
fields are named, each with the phases in which it may be set; :meth:`State.check` says
which of these rules a state breaks (none, for every state a lifecycle reaches).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from relay.core.connectionevents import SocketGone
from relay.core.exits import Exit

INTERNAL_ERROR = 1011  # websockets' CloseCode.INTERNAL_ERROR (pure modules import no websockets)
GOING_AWAY = 1001  # websockets' CloseCode.GOING_AWAY
TRY_AGAIN_LATER = 1013  # websockets' CloseCode.TRY_AGAIN_LATER
EXIT_WAIT = 0.2  # seconds an agent that closed its stdout has to exit by itself
SHUTTING_DOWN = "the relay is shutting down"
CONNECTION_ENDED = "the connection ended"
MOST_WATCHERS = "the connection has its most watchers"


class LifecycleError(Exception):
    """An event that cannot happen in the connection's phase: a bug of the relay's I/O."""


class Phase(enum.Enum):
    """Where a connection stands: what its controlling socket does, or what it waits for."""

    STARTING = "starting"  # the agent starts; the first socket waits for it
    ATTACHED = "attached"  # a controlling socket carries the connection
    DETACHED = "detached"  # resumable: the socket was lost; a resume or the grace's end
    FLUSHING = "flushing"  # the agent's output to the socket; then close it with the status
    FLUSHING_AGAIN = "flushing again"  # a socket resumed during the flush: then flush to it
    FLUSHING_LOST = "flushing, socket lost"  # the socket was lost meanwhile: then detach
    ENDED = "ended"  # nothing of the connection remains once the steps before are done


FLUSHES = (Phase.FLUSHING, Phase.FLUSHING_AGAIN, Phase.FLUSHING_LOST)


class Agent(enum.Enum):
    """The agent's process, as the lifecycle knows it."""

    RUNNING = "running"  # or being stopped by the relay
    QUIET = "quiet"  # its stdout ended: it has EXIT_WAIT seconds to exit by itself
    EXITED = "exited"


@dataclass(frozen=True, slots=True)
class State:
    """Everything one connection's lifecycle knows; each transition makes a new one."""

    phase: Phase = Phase.STARTING
    agent: Agent = Agent.RUNNING
    quiet_since: float | None = None  # Agent.QUIET alone: when its stdout ended
    lost: SocketGone | None = None  # DETACHED, FLUSHING_LOST alone: the grace runs from it
    stopping: bool = False  # the relay shuts down (the watchers were told already)
    controller: int | None = None  # the socket whose frames reach the agent
    last: int | None = None  # the last socket that was the controller, for the close line
    watchers: int = 0  # watchers admitted and not yet gone
    exit: Exit | None = None  # the agent's, once known: a stop's account over its wait's

    def check(self) -> list[str]:
        """The rules of the state this one breaks: none, for every state reached."""
        broken = []
        if (self.quiet_since is not None) != (self.agent is Agent.QUIET):
            broken.append("quiet_since is set while the agent is quiet, and only then")
        if (self.lost is not None) != (self.phase in (Phase.DETACHED, Phase.FLUSHING_LOST)):
            broken.append("lost is set while detached or flushing to a lost socket, only then")
        if self.lost is not None and self.controller is not None:
            broken.append("no controller after the controlling socket was lost")
        if self.agent is Agent.EXITED and self.exit is None:
            broken.append("an agent that exited has its exit")
        if self.phase is Phase.ATTACHED and self.agent is Agent.EXITED:
            broken.append("an agent's exit ends the attached phase")
        if self.watchers < 0:
            broken.append("watchers are counted from 0")
        return broken

    @property
    def exited(self) -> bool:
        return self.agent is Agent.EXITED

    @property
    def detached_at(self) -> float | None:
        """When the controlling socket was lost, while the connection is detached."""
        lost = self.lost
        return lost.now if lost is not None and self.phase is Phase.DETACHED else None

    @property
    def closing_socket(self) -> int | None:
        """The socket whose close the connection's last line names: the controller, or the
        last socket that was."""
        return self.controller if self.controller is not None else self.last


def watchers_close(exit_reason: str | None, shutting_down: bool) -> tuple[int, str]:
    """The close code and reason watchers get when their connection ends."""
    if shutting_down:
        return GOING_AWAY, SHUTTING_DOWN
    why = f": {exit_reason}" if exit_reason else ""
    return 1000, f"{CONNECTION_ENDED}{why}"
