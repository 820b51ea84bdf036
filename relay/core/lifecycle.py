"""A connection's lifecycle: events in, steps out, one state (sans-I/O, like h11's).

Pure. Everything that decides how a connection goes lives here: which socket controls
the connection (and which one a resume fences), whether the agent exited or closed its
stdout and which account of its exit counts, whether the relay is stopping, how long a
detached connection waits for a resume, how many watchers look on. The I/O layer
(:mod:`relay.server.connections.connection`) tells :class:`Lifecycle` what happened, one
event at a time, and pulls the steps that follow from the lifecycle's one list
(:meth:`Lifecycle.next_step`); it keeps no lifecycle flag of its own. The clock comes in
with the events (``now``); a connection waiting for something to happen asks
:meth:`Lifecycle.deadline` when to come back with a :class:`Tick`.

The whole state is one :class:`relay.core.lifecyclestate.State`, replaced by each
transition; its phases are listed there. The transitions are one ``match`` per phase
(:meth:`Lifecycle._starting`, ``_attached``, ``_detached``, ``_flushing``, ``_ended``),
each over every event type and checked exhaustive, rather than a table the code reads:
what an event does depends on more than the pair (phase, event) (whether the connection
is resumable, the relay stopping, the socket's close clean, the socket the controller,
the agent gone, a deadline past), and a table would need a guard column for each of these
or a row for each combination; a match per phase reads as the phase's answer to every
event on one screen, its conditions written where they apply. The tests hold the table:
every (phase, event) pair with its steps (tests/core/test_lifecycle.py).

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

from dataclasses import replace
from typing import Any, assert_never

from relay.core.connectionevents import (
    AT_ONCE,
    AdmitWatcher,
    AgentExited,
    AgentStarted,
    AgentStopped,
    CloseSocket,
    CloseWatchers,
    Detach,
    End,
    Event,
    FenceSocket,
    Flushed,
    FlushOutput,
    GraceExpired,
    KeptRunning,
    RefuseSocket,
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
from relay.core.exits import Exit
from relay.core.lifecyclestate import (
    CONNECTION_ENDED,
    EXIT_WAIT,
    FLUSHES,
    GOING_AWAY,
    INTERNAL_ERROR,
    MOST_WATCHERS,
    SHUTTING_DOWN,
    TRY_AGAIN_LATER,
    Agent,
    LifecycleError,
    Phase,
    State,
    watchers_close,
)
from relay.core.resumeprofile import CANNOT_RESUME, NO_CONNECTION


class Lifecycle:
    """One connection's state, from the agent's start to the end; see the module's text."""

    def __init__(self, *, resumable: bool, grace: float, most_watchers: int, first: int) -> None:
        """``first``: the socket that opened the connection, its controller from the start."""
        self.resumable = resumable  # a lost socket detaches, for ``grace`` seconds
        self.grace = grace
        self.most_watchers = most_watchers
        self.state = State(controller=first, last=first)
        self._pending: list[Step] = []  # the steps told and not yet pulled, in order

    # -- what the I/O layer asks -----------------------------------------------------------

    @property
    def phase(self) -> Phase:
        return self.state.phase

    @property
    def ended(self) -> bool:
        return self.state.phase is Phase.ENDED

    @property
    def attached(self) -> bool:
        """Whether a controlling socket carries the connection (or awaits the agent)."""
        return self.state.phase in (Phase.STARTING, Phase.ATTACHED, *FLUSHES)

    @property
    def detached(self) -> bool:
        return self.state.phase is Phase.DETACHED

    @property
    def exited(self) -> bool:
        return self.state.exited

    @property
    def exit(self) -> Exit | None:
        """How the agent ended, once known: the stop's account if the relay stopped it."""
        return self.state.exit

    @property
    def watchers(self) -> int:
        return self.state.watchers

    @property
    def controller(self) -> int | None:
        """The socket whose frames reach the agent, and to which its output goes."""
        return self.state.controller

    @property
    def closing_socket(self) -> int | None:
        """The socket whose close the connection's last line names."""
        return self.state.closing_socket

    def watchers_close(self) -> tuple[int, str]:
        """What the watchers are told as the connection ends (read once the agent is gone)."""
        exit_ = self.state.exit
        return watchers_close(None if exit_ is None else exit_.reason, self.state.stopping)

    def grace_left(self, now: float) -> float:
        """Seconds a detached connection still waits for a resume (infinite otherwise)."""
        since = self.state.detached_at
        return float("inf") if since is None else since + self.grace - now

    def detached_for(self, now: float) -> float | None:
        """Seconds without a socket so far; None while one is attached."""
        since = self.state.detached_at
        return None if since is None else now - since

    def deadline(self) -> float | None:
        """When to come back with a :class:`Tick` if nothing happens before; None: never."""
        times = []
        if self.state.quiet_since is not None:
            times.append(self.state.quiet_since + EXIT_WAIT)
        since = self.state.detached_at
        if since is not None:
            times.append(since + self.grace)
        return min(times, default=None)

    def next_step(self, *, in_order: bool) -> Step | None:
        """Take the first step of the one list that is carried out in order (``in_order``)
        or at once (:data:`AT_ONCE`, not ``in_order``); None when none of them waits."""
        for index, step in enumerate(self._pending):
            if isinstance(step, AT_ONCE) != in_order:
                return self._pending.pop(index)
        return None

    # -- events ----------------------------------------------------------------------------

    def handle(self, event: Event) -> tuple[Step, ...]:
        """Take ``event``: the steps that follow, in order, join the list the I/O pulls
        (and are returned, for a reader); none once the connection ended, but for a
        watcher's refusal and a late socket's."""
        match self.state.phase:
            case Phase.STARTING:
                steps = self._starting(event)
            case Phase.ATTACHED:
                steps = self._attached(event)
            case Phase.DETACHED:
                steps = self._detached(event)
            case Phase.FLUSHING | Phase.FLUSHING_AGAIN | Phase.FLUSHING_LOST:
                steps = self._flushing(event)
            case Phase.ENDED:
                steps = self._ended(event)
            case _:
                assert_never(self.state.phase)
        self._pending.extend(steps)
        return steps

    # -- one match per phase ---------------------------------------------------------------

    def _starting(self, event: Event) -> tuple[Step, ...]:
        """The agent starts; the first socket waits for it."""
        match event:
            case AgentStarted():
                return self._become((), phase=Phase.ATTACHED)
            case StartFailed(why=why):
                return self._end(CloseSocket(INTERNAL_ERROR, f"agent failed to start: {why}"))
            case StopRequested() | Tick() | WatcherArrived() | WatcherLeft():
                return self._anywhere(event)
            case (
                SocketAttached()
                | SocketGone()
                | AgentExited()
                | AgentStopped()
                | StdoutEnded()
                | Flushed()
                | RelayFailed()
            ):
                raise LifecycleError(f"{type(event).__name__} before the agent started")
            case _:
                assert_never(event)

    def _attached(self, event: Event) -> tuple[Step, ...]:
        """A controlling socket carries the connection."""
        match event:
            case SocketAttached():
                return self._controlled_by(event)
            case SocketGone() if event.socket == self.state.controller:
                return self._lost_or_closed(event)
            case SocketGone():
                return ()  # a fenced socket's end, reported after the resume
            case AgentExited(exit=exit_):
                return self._become((FlushOutput(),), **self._exited(exit_), phase=Phase.FLUSHING)
            case RelayFailed(error=error):
                return self._end(CloseSocket(INTERNAL_ERROR, f"relay error: {error}"), self._stop())
            case Tick(now=now) if self._quiet_for_long(now):
                # It closed its stdout and ran on: it can say nothing more.
                steps = (KeptRunning(), StopAgent(), FlushOutput())
                return self._become(steps, **self._loud(), phase=Phase.FLUSHING)
            case AgentStopped() | StdoutEnded() | StopRequested() | Tick():
                return self._anywhere(event)
            case WatcherArrived() | WatcherLeft():
                return self._anywhere(event)
            case AgentStarted() | StartFailed() | Flushed():
                raise self._refused(event)
            case _:
                assert_never(event)

    def _detached(self, event: Event) -> tuple[Step, ...]:
        """Resumable only: the socket was lost; the agent runs on (or exited: its output and
        status wait) until a socket resumes the connection or the grace ends."""
        match event:
            case SocketAttached() if self.state.exited:  # its exit waited: output, then status
                steps = (*self._controlled_by(event), FlushOutput())
                return self._become(steps, phase=Phase.FLUSHING, lost=None)
            case SocketAttached():
                return self._become(self._controlled_by(event), phase=Phase.ATTACHED, lost=None)
            case SocketGone():
                return ()  # an older socket's loss, reported late: the connection is detached
            case AgentExited(exit=exit_) if not self.state.exited:
                return self._become((StopChildren(),), **self._exited(exit_))
            case StopRequested() if not self.state.stopping:
                self._become((), stopping=True)
                return (ShutdownWatchers(), *self._end(self._stop()))
            case RelayFailed():
                return self._end(self._stop())
            case Tick(now=now) if self._quiet_for_long(now):
                # Its stdout closed and it ran on: stopped; its exit then waits for a resume.
                return self._become((KeptRunning(), StopAgent()), **self._loud())
            case Tick(now=now) if self.grace_left(now) <= 0:
                return (GraceExpired(self.grace), *self._end(StopAgent()))
            case AgentExited() | AgentStopped() | StdoutEnded() | StopRequested() | Tick():
                return self._anywhere(event)
            case WatcherArrived() | WatcherLeft():
                return self._anywhere(event)
            case AgentStarted() | StartFailed() | Flushed():
                raise self._refused(event)
            case _:
                assert_never(event)

    def _flushing(self, event: Event) -> tuple[Step, ...]:
        """The agent is gone or being stopped: what it wrote goes to the socket; the flush's
        end closes the socket with the exit status, flushes again to a socket that resumed
        meanwhile (FLUSHING_AGAIN), or detaches from one lost meanwhile (FLUSHING_LOST)."""
        match event:
            case SocketAttached():
                # The flush under way is the older socket's: flush again, to this one.
                steps = self._controlled_by(event)
                return self._become(steps, phase=Phase.FLUSHING_AGAIN, lost=None)
            case SocketGone() if event.socket == self.state.controller:
                # Decided once the flush is over (a resume meanwhile is then undone).
                if self._detaches(event):
                    return self._become((), phase=Phase.FLUSHING_LOST, lost=event, controller=None)
                return self._become((), phase=Phase.FLUSHING, controller=None)
            case SocketGone():
                return ()  # a fenced socket's end
            case AgentExited(exit=exit_) if not self.state.exited:
                return self._become((), **self._exited(exit_))  # stopped by the relay
            case Flushed() if self.state.phase is Phase.FLUSHING_AGAIN:
                return self._become((FlushOutput(),), phase=Phase.FLUSHING)
            case Flushed() if self.state.lost is not None:
                return self._detach(self.state.lost)  # a resume gets the rest
            case Flushed():
                return self._end(CloseSocket())
            case StopRequested() if self.state.phase is Phase.FLUSHING_LOST:
                # A relay that stops waits for no resume: the flush's end ends it.
                self._become((), phase=Phase.FLUSHING, lost=None)
                return self._anywhere(event)
            case RelayFailed(error=error):
                return self._end(CloseSocket(INTERNAL_ERROR, f"relay error: {error}"), self._stop())
            case Tick(now=now) if self._quiet_for_long(now):
                return self._become((KeptRunning(), StopAgent()), **self._loud())  # flushing
            case AgentExited() | AgentStopped() | StdoutEnded() | StopRequested() | Tick():
                return self._anywhere(event)
            case WatcherArrived() | WatcherLeft():
                return self._anywhere(event)
            case AgentStarted() | StartFailed():
                raise self._refused(event)
            case _:
                assert_never(event)

    def _ended(self, event: Event) -> tuple[Step, ...]:
        """Nothing of the connection remains: later events change nothing but the account
        of the agent's exit; a watcher and a late socket are told it ended."""
        match event:
            case WatcherArrived():
                return (RefuseWatcher(1000, CONNECTION_ENDED),)
            case SocketAttached():
                # A resume accepted as the grace ran out (its welcome was under way): no
                # agent is left for it, so its socket is closed saying so, never left open.
                return (RefuseSocket(CANNOT_RESUME, NO_CONNECTION),)
            case AgentExited(exit=exit_):
                return self._become((), **self._exited(exit_))
            case AgentStopped(exit=exit_):
                return self._become((), exit=exit_)
            case (
                AgentStarted()
                | StartFailed()
                | SocketGone()
                | StdoutEnded()
                | Flushed()
                | StopRequested()
                | RelayFailed()
                | Tick()
                | WatcherLeft()
            ):
                return ()
            case _:
                assert_never(event)

    def _anywhere(self, event: Event) -> tuple[Step, ...]:
        """What an event does alike in every phase but the end."""
        state = self.state
        match event:
            case AgentExited():
                raise LifecycleError("the agent exited twice")
            case AgentStopped(exit=exit_):  # the stop's account knows whether it signalled
                return self._become((), exit=exit_)
            case StdoutEnded(now=now) if state.agent is not Agent.EXITED:
                return self._become((), agent=Agent.QUIET, quiet_since=now)
            case StopRequested() if not state.stopping:
                return self._become((ShutdownWatchers(),), stopping=True)
            case WatcherArrived() if state.stopping:
                return (RefuseWatcher(GOING_AWAY, SHUTTING_DOWN),)
            case WatcherArrived() if state.watchers >= self.most_watchers:
                return (RefuseWatcher(TRY_AGAIN_LATER, MOST_WATCHERS),)
            case WatcherArrived():
                return self._become((AdmitWatcher(),), watchers=state.watchers + 1)
            case WatcherLeft() if state.watchers == 0:
                raise LifecycleError("a watcher left that was never admitted")
            case WatcherLeft():
                return self._become((), watchers=state.watchers - 1)
            case StdoutEnded() | StopRequested() | Tick():
                return ()
            case _:
                raise self._refused(event)

    # -- shared ----------------------------------------------------------------------------

    def _become(self, steps: tuple[Step, ...], **changes: Any) -> tuple[Step, ...]:
        """The state after a transition (``changes`` to the fields of :class:`State`)."""
        self.state = replace(self.state, **changes)
        return steps

    def _refused(self, event: Event) -> LifecycleError:
        return LifecycleError(f"{type(event).__name__} while {self.state.phase.value}")

    def _controlled_by(self, attached: SocketAttached) -> tuple[Step, ...]:
        """``attached`` becomes the controller; the one before it, if another, is fenced."""
        before = self.state.controller
        fence = (FenceSocket(before),) if before not in (None, attached.socket) else ()
        told = (Resumed(),) if attached.resumed else ()
        return self._become((*fence, *told), controller=attached.socket, last=attached.socket)

    def _detaches(self, gone: SocketGone) -> bool:
        """Whether losing the controller detaches the connection rather than ending it."""
        return not gone.clean and self.resumable and not self.state.stopping

    def _lost_or_closed(self, gone: SocketGone) -> tuple[Step, ...]:
        if self._detaches(gone):
            return self._detach(gone)
        self._become((), controller=None)  # it is gone: nothing is closed on it
        return self._end(self._stop())

    def _exited(self, exit_: Exit) -> dict[str, Any]:
        """The agent exited: the first account of it stands until a stop's (see AgentStopped)."""
        return {"agent": Agent.EXITED, "quiet_since": None, "exit": self.state.exit or exit_}

    def _quiet_for_long(self, now: float) -> bool:
        """Whether the agent closed its stdout EXIT_WAIT ago or more and has not exited."""
        since = self.state.quiet_since
        return since is not None and now >= since + EXIT_WAIT

    def _loud(self) -> dict[str, Any]:
        """The agent's quiet moment is over: it is stopped (its exit still comes)."""
        return {"agent": Agent.RUNNING, "quiet_since": None}

    def _stop(self) -> StopAgent:
        return StopAgent(eof_first=not self.state.stopping)

    def _detach(self, gone: SocketGone) -> tuple[Step, ...]:
        steps = (Detach(gone.why, self.grace),)
        return self._become(steps, phase=Phase.DETACHED, lost=gone, controller=None)

    def _end(self, *steps: Step) -> tuple[Step, ...]:
        # The controller stays: a CloseSocket before End closes it as it is carried out.
        agent = Agent.RUNNING if self.state.agent is Agent.QUIET else self.state.agent
        self._become((), phase=Phase.ENDED, agent=agent, quiet_since=None, lost=None)
        # A relay that is stopping closed its watchers already, saying why.
        close: tuple[Step, ...] = () if self.state.stopping else (CloseWatchers(),)
        return (*steps, *close, End())
