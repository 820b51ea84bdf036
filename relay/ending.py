"""How a connection ends: what happened first, mapped to the steps that end it.

Pure, like h11's state machine: :func:`what_happened` says which event ends the
connection (from what has happened so far), and :func:`ending` maps that event to the
steps the I/O layer (:mod:`relay.connection`) carries out, in order. Tested from a table.

The events:

- the agent failed to start: say why on the socket;
- the agent exited: flush what it wrote (stopping what is left of its process group
  meanwhile), then close the socket with its exit status;
- the agent closed its stdout but runs on (it can say nothing more): stop it, then close
  with its exit status;
- the socket closed (the client left, the network went, or the relay is shutting down
  and closed it with 1001): stop the agent; stdin EOF first unless the relay is
  shutting down (then SIGTERM follows EOF at once);
- a pump failed (a bug in the relay): close with 1011 saying so, stop the agent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

INTERNAL_ERROR = 1011  # WebSocket close code


class Happened(enum.Enum):
    """The event that ends a connection."""

    START_FAILED = "agent failed to start"
    AGENT_EXITED = "agent exited"
    STDOUT_CLOSED = "agent closed its stdout"
    SOCKET_CLOSED = "socket closed"
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
) -> Happened | Wait | None:
    """The event that ends the connection, given what has happened; None while nothing has.

    A relay failure wins over everything. Agents close their stdout as they exit, so a
    stdout that ended first is only taken for a closed stdout once the relay ``waited``
    a moment and neither the exit nor the socket's close came.
    """
    if relay_failed:
        return Happened.RELAY_FAILED
    if agent_exited:
        return Happened.AGENT_EXITED
    if socket_closed:
        return Happened.SOCKET_CLOSED
    if stdout_ended:
        return Happened.STDOUT_CLOSED if waited else Wait.FOR_EXIT
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
class CloseSocket:
    """Close the socket with ``code`` and ``reason``; None for both: the agent's exit status."""

    code: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Warn:
    """Log ``event`` as a warning."""

    event: str


Step = FlushOutput | StopAgent | CloseSocket | Warn


def ending(happened: Happened, *, shutting_down: bool, detail: str = "") -> tuple[Step, ...]:
    """The steps that end a connection after ``happened``; ``detail`` completes a reason.

    ``detail`` is why the agent failed to start, or the name of the relay's error.
    """
    if happened is Happened.START_FAILED:
        return (CloseSocket(INTERNAL_ERROR, f"agent failed to start: {detail}"),)
    if happened is Happened.AGENT_EXITED:
        return (FlushOutput(), CloseSocket())
    if happened is Happened.STDOUT_CLOSED:
        return (
            Warn("agent closed its stdout but is still running: stopping it"),
            StopAgent(),
            CloseSocket(),
        )
    if happened is Happened.SOCKET_CLOSED:
        return (StopAgent(eof_first=not shutting_down),)
    return (
        CloseSocket(INTERNAL_ERROR, f"relay error: {detail}"),
        StopAgent(eof_first=not shutting_down),
    )
