"""A connection's lifecycle: events in, steps out, one state (sans-I/O, like h11's).

Pure. Everything that decides how a connection goes lives here: whether a controlling
socket is attached, whether the agent exited or closed its stdout, whether the relay is
stopping, how long a detached connection waits for a resume, how many watchers look on.
The I/O layer (:mod:`relay.server.connections.connection`) tells :class:`Lifecycle` what
happened, one event at a time, and carries out the steps it answers, in order; it keeps
no lifecycle flag of its own. The clock comes in with the events (``now``); a
connection waiting for something to happen asks :meth:`Lifecycle.deadline` when to come
back with a :class:`Tick`.

The phases:

- ``STARTING``: the agent starts; the first socket waits for it.
- ``ATTACHED``: a controlling socket carries the connection.
- ``DETACHED``: resumable only: the socket was lost other than by the client's clean
  close; the agent runs on (or has exited: its output and status wait) until a socket
  resumes the connection or the grace ends.
- ``FLUSHING``: the agent is gone or being stopped: what it wrote goes to the socket,
  then the socket is closed with its exit status.
- ``ENDED``: nothing of the connection remains once the steps before are done; every
  later event changes nothing.

What ends a connection, for every connection:

- the agent failed to start: say why on the socket;
- the agent exited: flush what it wrote (stopping what is left of its process group
  meanwhile), then close the socket with its exit status;
- the agent closed its stdout and did not exit within a moment (it can say nothing
  more): stop it, flush, close with its exit status;
- the socket closed (the client left, or the relay is shutting down and closed it):
  stop the agent; stdin EOF first unless the relay is shutting down (then SIGTERM
  follows EOF at once);
- a relay task failed (a bug in the relay): close with 1011 saying so, stop the agent.

A resumable connection differs where its socket is lost other than by a clean close: it
is detached, not ended, until a resume or the grace's end; an agent that exits while it
is detached waits the same way, so that a resume still receives the rest of its output
and its exit status.
"""

from __future__ import annotations

import enum
from typing import assert_never

from relay.core.connectionevents import (
    AdmitWatcher,
    AgentExited,
    AgentStarted,
    CloseSocket,
    CloseWatchers,
    Detach,
    End,
    Event,
    Flushed,
    FlushOutput,
    GraceExpired,
    KeptRunning,
    RefuseWatcher,
    RelayFailed,
    Resumed,
    ShutdownWatchers,
    SocketAttached,
    SocketGone,
    StartFailed,
    StdoutEnded,
    Step,
    StopAgent,
    StopChildren,
    StopRequested,
    Tick,
    WatcherArrived,
    WatcherLeft,
)
from relay.core.resumeprofile import CANNOT_RESUME, NO_CONNECTION

INTERNAL_ERROR = 1011  # websockets' CloseCode.INTERNAL_ERROR (pure modules import no websockets)
GOING_AWAY = 1001  # websockets' CloseCode.GOING_AWAY
EXIT_WAIT = 0.2  # seconds an agent that closed its stdout has to exit by itself
SHUTTING_DOWN = "the relay is shutting down"
CONNECTION_ENDED = "the connection ended"


class Phase(enum.Enum):
    """Where a connection stands."""

    STARTING = "starting"
    ATTACHED = "attached"
    DETACHED = "detached"
    FLUSHING = "flushing"
    ENDED = "ended"


AT_ONCE = (Detach, Resumed, ShutdownWatchers, AdmitWatcher, RefuseWatcher)
"""Steps about the watchers and the log alone: carried out as their event is told. The
others concern the agent and the controlling socket and are carried out in order, each
once the one before it is done (a flush, an agent's stop, take time)."""


class LifecycleError(Exception):
    """An event that cannot happen in the connection's phase: a bug of the relay's I/O."""


def watchers_close(exit_reason: str | None, shutting_down: bool) -> tuple[int, str]:
    """The close code and reason watchers get when their connection ends."""
    if shutting_down:
        return GOING_AWAY, SHUTTING_DOWN
    why = f": {exit_reason}" if exit_reason else ""
    return 1000, f"{CONNECTION_ENDED}{why}"


class Lifecycle:
    """One connection's state, from the agent's start to the end; see the module's text."""

    def __init__(self, *, resumable: bool, grace: float, most_watchers: int) -> None:
        self.resumable = resumable  # a lost socket detaches, for ``grace`` seconds
        self.grace = grace
        self.most_watchers = most_watchers
        self.phase = Phase.STARTING
        self.shutting_down = False
        self.exited = False  # the agent's process exited
        self.watchers = 0
        self._detached_at: float | None = None
        self._stdout_ended_at: float | None = None  # awaiting the exit a moment
        self._gone_in_flush: SocketGone | None = None  # while flushing
        self._reflush = False  # a resume came during the flush

    # -- what the I/O layer asks -----------------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.phase is Phase.ENDED

    @property
    def attached(self) -> bool:
        """Whether a controlling socket carries the connection (or awaits the agent)."""
        return self.phase in (Phase.STARTING, Phase.ATTACHED, Phase.FLUSHING)

    @property
    def detached(self) -> bool:
        return self.phase is Phase.DETACHED

    def grace_left(self, now: float) -> float:
        """Seconds a detached connection still waits for a resume (infinite otherwise)."""
        if self._detached_at is None:
            return float("inf")
        return self._detached_at + self.grace - now

    def detached_for(self, now: float) -> float | None:
        """Seconds without a socket so far; None while one is attached."""
        return None if self._detached_at is None else now - self._detached_at

    def deadline(self) -> float | None:
        """When to come back with a :class:`Tick` if nothing happens before; None: never."""
        times = []
        if self._stdout_ended_at is not None:
            times.append(self._stdout_ended_at + EXIT_WAIT)
        if self._detached_at is not None:
            times.append(self._detached_at + self.grace)
        return min(times, default=None)

    # -- events ----------------------------------------------------------------------------

    def handle(self, event: Event) -> tuple[Step, ...]:
        """The steps that follow ``event``, in order; none once the connection ended, but
        for a watcher's refusal and a late socket's close."""
        if self.phase is Phase.ENDED:
            if isinstance(event, WatcherArrived):
                return (RefuseWatcher(1000, CONNECTION_ENDED),)
            if isinstance(event, SocketAttached):
                # A resume accepted as the grace ran out (its welcome was under way): no
                # agent is left for it, so its socket is closed saying so, never left open.
                return (CloseSocket(CANNOT_RESUME, NO_CONNECTION),)
            return ()
        match event:
            case AgentStarted():
                self._expect(event, Phase.STARTING)
                self.phase = Phase.ATTACHED
                return ()
            case StartFailed(why=why):
                self._expect(event, Phase.STARTING)
                return self._end(CloseSocket(INTERNAL_ERROR, f"agent failed to start: {why}"))
            case SocketAttached(resumed=resumed):
                return self._attached(resumed)
            case SocketGone():
                return self._socket_gone(event)
            case AgentExited():
                if self.phase is Phase.STARTING or self.exited:
                    raise LifecycleError(f"the agent exited while {self.phase.value}, or twice")
                return self._agent_exited()
            case StdoutEnded(now=now):
                self._started(event)
                if not self.exited:
                    self._stdout_ended_at = now
                return ()
            case Flushed():
                return self._flushed()
            case StopRequested():
                return self._stop_requested()
            case RelayFailed(error=error):
                self._started(event)
                close = CloseSocket(INTERNAL_ERROR, f"relay error: {error}")
                return self._end(*((close,) if self.attached else ()), self._stop())
            case Tick(now=now):
                return self._tick(now)
            case WatcherArrived():
                if self.shutting_down:
                    return (RefuseWatcher(GOING_AWAY, SHUTTING_DOWN),)
                if self.watchers >= self.most_watchers:
                    return (RefuseWatcher(1013, "the connection has its most watchers"),)
                self.watchers += 1
                return (AdmitWatcher(),)
            case WatcherLeft():
                if self.watchers == 0:
                    raise LifecycleError("a watcher left that was never admitted")
                self.watchers -= 1
                return ()
            case _:
                assert_never(event)

    # -- each event ------------------------------------------------------------------------

    def _attached(self, resumed: bool) -> tuple[Step, ...]:
        if self.phase is Phase.STARTING:
            raise LifecycleError("a socket attached before the agent started")
        told: tuple[Step, ...] = (Resumed(),) if resumed else ()
        if self.phase is Phase.FLUSHING:
            # The flush under way is the older socket's: flush again, to this one.
            self._reflush, self._gone_in_flush = True, None
            return told
        if self.phase is Phase.DETACHED:
            self._detached_at = None
            if self.exited:  # its exit waited for this socket: output, then the status
                self.phase = Phase.FLUSHING
                return (*told, FlushOutput())
            self.phase = Phase.ATTACHED
        return told

    def _socket_gone(self, gone: SocketGone) -> tuple[Step, ...]:
        if self.phase is Phase.STARTING:
            raise LifecycleError("a socket went before the agent started")
        if self.phase is Phase.FLUSHING:
            # Decided once the flush is over; a socket that resumed meanwhile is gone too.
            self._gone_in_flush, self._reflush = gone, False
            return ()
        if self.phase is Phase.DETACHED:
            return ()  # an older socket's loss, reported late: the connection is detached
        if not gone.clean and self.resumable and not self.shutting_down:
            return self._detach(gone)
        return self._end(self._stop())

    def _agent_exited(self) -> tuple[Step, ...]:
        self.exited = True
        self._stdout_ended_at = None
        if self.phase is Phase.DETACHED:
            return (StopChildren(),)  # its output and status wait for a resume
        if self.phase is Phase.FLUSHING:
            return ()  # stopped by the relay, already flushing
        self.phase = Phase.FLUSHING
        return (FlushOutput(),)

    def _flushed(self) -> tuple[Step, ...]:
        self._expect(Flushed(), Phase.FLUSHING)
        gone, self._gone_in_flush = self._gone_in_flush, None
        if self._reflush:  # a socket resumed the connection during the flush: flush to it
            self._reflush = False
            return (FlushOutput(),)
        if gone is not None and not gone.clean and self.resumable and not self.shutting_down:
            return self._detach(gone)  # the socket went meanwhile: a resume gets the rest
        return self._end(CloseSocket())

    def _stop_requested(self) -> tuple[Step, ...]:
        if self.shutting_down:
            return ()
        self.shutting_down = True
        close = ShutdownWatchers()
        if self.phase is Phase.DETACHED:
            return (close, *self._end(self._stop()))
        return (close,)

    def _tick(self, now: float) -> tuple[Step, ...]:
        waited = self._stdout_ended_at
        if waited is not None and now >= waited + EXIT_WAIT and not self.exited:
            self._stdout_ended_at = None
            return self._stdout_closed()
        if self.phase is Phase.DETACHED and self.grace_left(now) <= 0:
            return (GraceExpired(self.grace), *self._end(StopAgent()))
        return ()

    def _stdout_closed(self) -> tuple[Step, ...]:
        """The agent closed its stdout and runs on: it can say nothing more."""
        if self.phase is Phase.DETACHED:
            return (KeptRunning(), StopAgent())  # its exit then waits for a resume
        self.phase = Phase.FLUSHING
        return (KeptRunning(), StopAgent(), FlushOutput())

    # -- shared ----------------------------------------------------------------------------

    def _started(self, event: Event) -> None:
        if self.phase is Phase.STARTING:
            raise LifecycleError(f"{type(event).__name__} before the agent started")

    def _expect(self, event: Event, phase: Phase) -> None:
        if self.phase is not phase:
            raise LifecycleError(f"{type(event).__name__} while {self.phase.value}")

    def _stop(self) -> StopAgent:
        return StopAgent(eof_first=not self.shutting_down)

    def _detach(self, gone: SocketGone) -> tuple[Step, ...]:
        self.phase = Phase.DETACHED
        self._detached_at = gone.now
        return (Detach(gone.why, self.grace),)

    def _end(self, *steps: Step) -> tuple[Step, ...]:
        self.phase = Phase.ENDED
        self._detached_at = self._stdout_ended_at = None
        # A relay that is stopping closed its watchers already, saying why.
        close: tuple[Step, ...] = () if self.shutting_down else (CloseWatchers(),)
        return (*steps, *close, End())
