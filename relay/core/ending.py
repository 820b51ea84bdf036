"""How a connection ends: what happened first, mapped to the steps that follow it.

Pure, like h11's state machine: :func:`what_happened` says which event comes next
(from what has happened so far), and :func:`ending` maps that event to the steps the
I/O layer (:mod:`relay.connections.connection`) carries out, in order.
Tested from a table.

For every connection:

- the agent failed to start: say why on the socket;
- the agent exited: flush what it wrote (stopping what is left of its process group
  meanwhile), then close the socket with its exit status;
- the agent closed its stdout but runs on (it can say nothing more): stop it, then
  close with its exit status (whether it had kept running or was crashing is known only
  then: :func:`relay.core.exits.ending_event`);
- the socket closed (the client left, or the relay is shutting down and closed it with
  1001): stop the agent; stdin EOF first unless the relay is shutting down (then
  SIGTERM follows EOF at once);
- a pump failed (a bug in the relay): close with 1011 saying so, stop the agent.

A *resumable* connection (the client opted in and ``--resume-grace`` is not 0) differs
where a socket is lost other than by the client's clean close (1000): it is detached,
not ended. The agent keeps running, and the connection waits for a resume until its
grace expires (then the agent is stopped) or the relay shuts down. An agent that exits
while no socket is attached waits the same way, so that a resume still receives the
rest of its output and its exit status.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

INTERNAL_ERROR = 1011  # websockets' CloseCode.INTERNAL_ERROR (pure modules import no websockets)


class Happened(enum.Enum):
    """The event a connection must act on."""

    START_FAILED = "agent failed to start"
    AGENT_EXITED = "agent exited"
    STDOUT_CLOSED = "agent closed its stdout"
    SOCKET_CLOSED = "socket closed"  # by the client with 1000, or by the relay
    SOCKET_LOST = "socket lost"  # any other way: reset, EOF, heartbeat timeout, 1001
    GRACE_EXPIRED = "resume grace expired"
    SHUTDOWN = "relay shutting down"
    RELAY_FAILED = "relay failed"


class Wait(enum.Enum):
    """Not yet decided: the agent closed its stdout; give its exit a moment to arrive."""

    FOR_EXIT = "wait for the exit"


def what_happened(
    *,
    relay_failed: bool,
    agent_exited: bool,
    socket_closed: bool,
    stdout_ended: bool,
    waited: bool,
    socket_lost: bool = False,
    grace_expired: bool = False,
    shutdown: bool = False,
) -> Happened | Wait | None:
    """The next event to act on, given what has happened; None while nothing has.

    A relay failure wins over everything, then the agent's exit, then the socket.
    Agents close their stdout as they exit, so a stdout that ended first is only taken
    for a closed stdout once the relay ``waited`` a moment and neither the exit nor the
    socket's close came. ``grace_expired`` and ``shutdown`` only arise while detached.
    """
    if relay_failed:
        return Happened.RELAY_FAILED
    if agent_exited:
        return Happened.AGENT_EXITED
    if socket_closed:
        return Happened.SOCKET_CLOSED
    if socket_lost:
        return Happened.SOCKET_LOST
    if stdout_ended:
        return Happened.STDOUT_CLOSED if waited else Wait.FOR_EXIT
    if shutdown:
        return Happened.SHUTDOWN
    if grace_expired:
        return Happened.GRACE_EXPIRED
    return None


@dataclass(frozen=True)
class FlushOutput:
    """Wait until the agent's output has reached the socket; stop its process group meanwhile."""


@dataclass(frozen=True)
class StopAgent:
    """Stop the agent with its process group: stdin EOF, SIGTERM, SIGKILL, each after a grace.

    With ``eof_first`` False, SIGTERM follows stdin EOF at once.
    """

    eof_first: bool = True


@dataclass(frozen=True)
class StopChildren:
    """The agent is gone: stop what is left of its process group."""


@dataclass(frozen=True)
class CloseSocket:
    """Close the socket with ``code`` and ``reason``; None for both: the agent's exit status."""

    code: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Detach:
    """Keep the agent running without a socket; wait the grace for a resume."""


@dataclass(frozen=True)
class End:
    """The connection is over: nothing of it remains once the steps before are done."""


Step = FlushOutput | StopAgent | StopChildren | CloseSocket | Detach | End


def ending(
    happened: Happened,
    *,
    shutting_down: bool,
    detail: str = "",
    resumable: bool = False,
    attached: bool = True,
) -> tuple[Step, ...]:
    """The steps that follow ``happened``; they end the connection unless they Detach.

    ``detail`` is why the agent failed to start, or the name of the relay's error.
    ``attached`` says whether a socket is attached now (always, unless ``resumable``).
    """
    stop = StopAgent(eof_first=not shutting_down)
    close_with_exit = (FlushOutput(), CloseSocket(), End())
    if happened is Happened.START_FAILED:
        return (CloseSocket(INTERNAL_ERROR, f"agent failed to start: {detail}"), End())
    if happened is Happened.RELAY_FAILED:
        close = (CloseSocket(INTERNAL_ERROR, f"relay error: {detail}"),) if attached else ()
        return (*close, stop, End())
    if happened is Happened.AGENT_EXITED:
        return close_with_exit if attached else (StopChildren(),)
    if happened is Happened.STDOUT_CLOSED:
        rest = close_with_exit if attached else ()
        return (StopAgent(), *rest)  # how it then ended is named at the close
    if happened is Happened.SOCKET_LOST and resumable and not shutting_down:
        return (Detach(),)
    if happened in (Happened.SOCKET_CLOSED, Happened.SOCKET_LOST, Happened.SHUTDOWN):
        return (stop, End())
    return (StopAgent(), End())  # GRACE_EXPIRED
