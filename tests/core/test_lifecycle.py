"""relay.core.lifecycle: a connection's phases, every (phase, event) pair, from tables."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import CloseCode

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
from relay.core.lifecycle import Lifecycle
from relay.core.lifecyclestate import (
    EXIT_WAIT,
    GOING_AWAY,
    INTERNAL_ERROR,
    LifecycleError,
    Phase,
    watchers_close,
)

T, F = True, False
FIRST, SECOND, OTHER = 1, 2, 9  # the sockets: the one that opened, one that resumes, another
EXITED = Exit(3)  # as the agent's wait sees it
STOPPED = Exit(-15, stopped=True)  # as the relay's stop sees it
GRACE = 30.0
LATER = 1000.0  # past every deadline a test sets

# -- the phases, each reached by the events that lead there ---------------------------------


def starting(resumable: bool = F) -> Lifecycle:
    grace = GRACE if resumable else 0.0
    return Lifecycle(resumable=resumable, grace=grace, most_watchers=2, first=FIRST)


def attached(resumable: bool = F) -> Lifecycle:
    lifecycle = starting(resumable)
    lifecycle.handle(AgentStarted())
    lifecycle.handle(SocketAttached(FIRST, resumed=F))
    return lifecycle


def detached() -> Lifecycle:
    lifecycle = attached(resumable=T)
    lifecycle.handle(SocketGone(FIRST, clean=F, why="lost (no close frame)", now=0.0))
    return lifecycle


def detached_exited() -> Lifecycle:
    lifecycle = detached()
    lifecycle.handle(AgentExited(EXITED))
    return lifecycle


def flushing(resumable: bool = F) -> Lifecycle:
    lifecycle = attached(resumable)
    lifecycle.handle(AgentExited(EXITED))
    return lifecycle


def flushing_again() -> Lifecycle:
    lifecycle = flushing(resumable=T)
    lifecycle.handle(SocketAttached(SECOND, resumed=T))
    return lifecycle


def flushing_lost() -> Lifecycle:
    lifecycle = flushing(resumable=T)
    lifecycle.handle(SocketGone(FIRST, clean=F, why="lost (no close frame)", now=0.0))
    return lifecycle


def stopping() -> Lifecycle:
    lifecycle = attached(resumable=T)
    lifecycle.handle(StopRequested())
    return lifecycle


def ended() -> Lifecycle:
    lifecycle = attached()
    lifecycle.handle(SocketGone(FIRST, clean=T, why="closed by the client", now=0.0))
    return lifecycle


PHASES: dict[str, tuple[Callable[[], Lifecycle], Phase]] = {
    "starting": (starting, Phase.STARTING),
    "attached": (attached, Phase.ATTACHED),
    "attached, resumable": (lambda: attached(resumable=T), Phase.ATTACHED),
    "attached, relay stopping": (stopping, Phase.ATTACHED),
    "detached": (detached, Phase.DETACHED),
    "detached, agent exited": (detached_exited, Phase.DETACHED),
    "flushing": (flushing, Phase.FLUSHING),
    "flushing, resumable": (lambda: flushing(resumable=T), Phase.FLUSHING),
    "flushing again": (flushing_again, Phase.FLUSHING_AGAIN),
    "flushing, socket lost": (flushing_lost, Phase.FLUSHING_LOST),
    "ended": (ended, Phase.ENDED),
}

EVENTS: dict[str, Event] = {
    "agent started": AgentStarted(),
    "start failed": StartFailed("x: command not found"),
    "socket attached": SocketAttached(FIRST, resumed=F),
    "socket resumed": SocketAttached(SECOND, resumed=T),
    "socket closed": SocketGone(FIRST, clean=T, why="closed by the client", now=0.0),
    "socket lost": SocketGone(FIRST, clean=F, why="lost (no close frame)", now=0.0),
    "another socket lost": SocketGone(OTHER, clean=F, why="lost (no close frame)", now=0.0),
    "agent exited": AgentExited(EXITED),
    "agent stopped": AgentStopped(STOPPED),
    "stdout ended": StdoutEnded(now=0.0),
    "flushed": Flushed(),
    "stop requested": StopRequested(),
    "relay failed": RelayFailed("KeyError"),
    "tick": Tick(now=LATER),
    "watcher arrived": WatcherArrived(),
    "watcher left": WatcherLeft(),
}

ERROR = LifecycleError
STOP = StopAgent(eof_first=T)
STOP_NOW = StopAgent(eof_first=F)
CLOSED_BY_CLIENT = "closed by the client"
LOST = "lost (no close frame)"
ADMIT = (AdmitWatcher(),)
WATCHERS_AWAY = ShutdownWatchers()
FAILED = CloseSocket(INTERNAL_ERROR, "relay error: KeyError")
ENDS = (CloseWatchers(), End())
EXPIRED = (GraceExpired(GRACE), STOP, *ENDS)
NO_LONGER = RefuseSocket(4404, "this relay no longer has the connection")
TAKEN_OVER = (FenceSocket(FIRST), Resumed())  # the second socket resumes: the first fenced
LATE_ANSWERED = ("watcher arrived", "socket attached", "socket resumed")

Expected = tuple[tuple[Step, ...], Phase] | type[LifecycleError]
A, D, FL, E, S = Phase.ATTACHED, Phase.DETACHED, Phase.FLUSHING, Phase.ENDED, Phase.STARTING
FA, FLL = Phase.FLUSHING_AGAIN, Phase.FLUSHING_LOST

TABLE: dict[tuple[str, str], Expected] = {
    # starting: only the agent's start, a stop, a watcher and the clock make sense
    ("starting", "agent started"): ((), A),
    ("starting", "start failed"): (
        (CloseSocket(INTERNAL_ERROR, "agent failed to start: x: command not found"), *ENDS), E),
    ("starting", "socket attached"): ERROR,
    ("starting", "socket resumed"): ERROR,
    ("starting", "socket closed"): ERROR,
    ("starting", "socket lost"): ERROR,
    ("starting", "another socket lost"): ERROR,
    ("starting", "agent exited"): ERROR,
    ("starting", "agent stopped"): ERROR,
    ("starting", "stdout ended"): ERROR,
    ("starting", "flushed"): ERROR,
    ("starting", "stop requested"): ((WATCHERS_AWAY,), S),
    ("starting", "relay failed"): ERROR,
    ("starting", "tick"): ((), S),
    ("starting", "watcher arrived"): (ADMIT, S),
    ("starting", "watcher left"): ERROR,
    # attached, plain: the socket's end is the connection's
    ("attached", "agent started"): ERROR,
    ("attached", "start failed"): ERROR,
    ("attached", "socket attached"): ((), A),
    ("attached", "socket resumed"): (TAKEN_OVER, A),
    ("attached", "socket closed"): ((STOP, *ENDS), E),
    ("attached", "socket lost"): ((STOP, *ENDS), E),
    ("attached", "another socket lost"): ((), A),
    ("attached", "agent exited"): ((FlushOutput(),), FL),
    ("attached", "agent stopped"): ((), A),
    ("attached", "stdout ended"): ((), A),
    ("attached", "flushed"): ERROR,
    ("attached", "stop requested"): ((WATCHERS_AWAY,), A),
    ("attached", "relay failed"): ((FAILED, STOP, *ENDS), E),
    ("attached", "tick"): ((), A),
    ("attached", "watcher arrived"): (ADMIT, A),
    ("attached", "watcher left"): ERROR,
    # attached, resumable: a lost socket detaches; a clean close still ends
    ("attached, resumable", "agent started"): ERROR,
    ("attached, resumable", "start failed"): ERROR,
    ("attached, resumable", "socket attached"): ((), A),
    ("attached, resumable", "socket resumed"): (TAKEN_OVER, A),
    ("attached, resumable", "socket closed"): ((STOP, *ENDS), E),
    ("attached, resumable", "socket lost"): ((Detach(LOST, GRACE),), D),
    ("attached, resumable", "another socket lost"): ((), A),
    ("attached, resumable", "agent exited"): ((FlushOutput(),), FL),
    ("attached, resumable", "agent stopped"): ((), A),
    ("attached, resumable", "stdout ended"): ((), A),
    ("attached, resumable", "flushed"): ERROR,
    ("attached, resumable", "stop requested"): ((WATCHERS_AWAY,), A),
    ("attached, resumable", "relay failed"): ((FAILED, STOP, *ENDS), E),
    ("attached, resumable", "tick"): ((), A),
    ("attached, resumable", "watcher arrived"): (ADMIT, A),
    ("attached, resumable", "watcher left"): ERROR,
    # the relay stopping: no detaching, no stdin EOF grace, watchers told already
    ("attached, relay stopping", "agent started"): ERROR,
    ("attached, relay stopping", "start failed"): ERROR,
    ("attached, relay stopping", "socket attached"): ((), A),
    ("attached, relay stopping", "socket resumed"): (TAKEN_OVER, A),
    ("attached, relay stopping", "socket closed"): ((STOP_NOW, End()), E),
    ("attached, relay stopping", "socket lost"): ((STOP_NOW, End()), E),
    ("attached, relay stopping", "another socket lost"): ((), A),
    ("attached, relay stopping", "agent exited"): ((FlushOutput(),), FL),
    ("attached, relay stopping", "agent stopped"): ((), A),
    ("attached, relay stopping", "stdout ended"): ((), A),
    ("attached, relay stopping", "flushed"): ERROR,
    ("attached, relay stopping", "stop requested"): ((), A),
    ("attached, relay stopping", "relay failed"): ((FAILED, STOP_NOW, End()), E),
    ("attached, relay stopping", "tick"): ((), A),
    ("attached, relay stopping", "watcher arrived"): (
        (RefuseWatcher(GOING_AWAY, "the relay is shutting down"),), A),
    ("attached, relay stopping", "watcher left"): ERROR,
    # detached: the agent runs on until a resume or the grace's end; no socket controls it
    ("detached", "agent started"): ERROR,
    ("detached", "start failed"): ERROR,
    ("detached", "socket attached"): ((), A),
    ("detached", "socket resumed"): ((Resumed(),), A),
    ("detached", "socket closed"): ((), D),
    ("detached", "socket lost"): ((), D),
    ("detached", "another socket lost"): ((), D),
    ("detached", "agent exited"): ((StopChildren(),), D),
    ("detached", "agent stopped"): ((), D),
    ("detached", "stdout ended"): ((), D),
    ("detached", "flushed"): ERROR,
    ("detached", "stop requested"): ((WATCHERS_AWAY, STOP_NOW, End()), E),
    ("detached", "relay failed"): ((STOP, *ENDS), E),
    ("detached", "tick"): (EXPIRED, E),
    ("detached", "watcher arrived"): (ADMIT, D),
    ("detached", "watcher left"): ERROR,
    # detached after the agent exited: its output and status wait for a resume
    ("detached, agent exited", "agent started"): ERROR,
    ("detached, agent exited", "start failed"): ERROR,
    ("detached, agent exited", "socket attached"): ((FlushOutput(),), FL),
    ("detached, agent exited", "socket resumed"): ((Resumed(), FlushOutput()), FL),
    ("detached, agent exited", "socket closed"): ((), D),
    ("detached, agent exited", "socket lost"): ((), D),
    ("detached, agent exited", "another socket lost"): ((), D),
    ("detached, agent exited", "agent exited"): ERROR,
    ("detached, agent exited", "agent stopped"): ((), D),
    ("detached, agent exited", "stdout ended"): ((), D),
    ("detached, agent exited", "flushed"): ERROR,
    ("detached, agent exited", "stop requested"): ((WATCHERS_AWAY, STOP_NOW, End()), E),
    ("detached, agent exited", "relay failed"): ((STOP, *ENDS), E),
    ("detached, agent exited", "tick"): (EXPIRED, E),
    ("detached, agent exited", "watcher arrived"): (ADMIT, D),
    ("detached, agent exited", "watcher left"): ERROR,
    # flushing, plain: whatever the socket does, the flush's end closes with the status
    ("flushing", "agent started"): ERROR,
    ("flushing", "start failed"): ERROR,
    ("flushing", "socket attached"): ((), FA),
    ("flushing", "socket resumed"): (TAKEN_OVER, FA),
    ("flushing", "socket closed"): ((), FL),
    ("flushing", "socket lost"): ((), FL),
    ("flushing", "another socket lost"): ((), FL),
    ("flushing", "agent exited"): ERROR,
    ("flushing", "agent stopped"): ((), FL),
    ("flushing", "stdout ended"): ((), FL),
    ("flushing", "flushed"): ((CloseSocket(), *ENDS), E),
    ("flushing", "stop requested"): ((WATCHERS_AWAY,), FL),
    ("flushing", "relay failed"): ((FAILED, STOP, *ENDS), E),
    ("flushing", "tick"): ((), FL),
    ("flushing", "watcher arrived"): (ADMIT, FL),
    ("flushing", "watcher left"): ERROR,
    # flushing, resumable: a lost socket is detached from once the flush ends
    ("flushing, resumable", "agent started"): ERROR,
    ("flushing, resumable", "start failed"): ERROR,
    ("flushing, resumable", "socket attached"): ((), FA),
    ("flushing, resumable", "socket resumed"): (TAKEN_OVER, FA),
    ("flushing, resumable", "socket closed"): ((), FL),
    ("flushing, resumable", "socket lost"): ((), FLL),
    ("flushing, resumable", "another socket lost"): ((), FL),
    ("flushing, resumable", "agent exited"): ERROR,
    ("flushing, resumable", "agent stopped"): ((), FL),
    ("flushing, resumable", "stdout ended"): ((), FL),
    ("flushing, resumable", "flushed"): ((CloseSocket(), *ENDS), E),
    ("flushing, resumable", "stop requested"): ((WATCHERS_AWAY,), FL),
    ("flushing, resumable", "relay failed"): ((FAILED, STOP, *ENDS), E),
    ("flushing, resumable", "tick"): ((), FL),
    ("flushing, resumable", "watcher arrived"): (ADMIT, FL),
    ("flushing, resumable", "watcher left"): ERROR,
    # flushing again: the second socket resumed during the first one's flush, the first
    # fenced (its end changes nothing); the flush's end flushes again, to the second
    ("flushing again", "agent started"): ERROR,
    ("flushing again", "start failed"): ERROR,
    ("flushing again", "socket attached"): ((FenceSocket(SECOND),), FA),
    ("flushing again", "socket resumed"): ((Resumed(),), FA),
    ("flushing again", "socket closed"): ((), FA),
    ("flushing again", "socket lost"): ((), FA),
    ("flushing again", "another socket lost"): ((), FA),
    ("flushing again", "agent exited"): ERROR,
    ("flushing again", "agent stopped"): ((), FA),
    ("flushing again", "stdout ended"): ((), FA),
    ("flushing again", "flushed"): ((FlushOutput(),), FL),
    ("flushing again", "stop requested"): ((WATCHERS_AWAY,), FA),
    ("flushing again", "relay failed"): ((FAILED, STOP, *ENDS), E),
    ("flushing again", "tick"): ((), FA),
    ("flushing again", "watcher arrived"): (ADMIT, FA),
    ("flushing again", "watcher left"): ERROR,
    # flushing, socket lost: no socket controls it; the flush's end detaches, unless a
    # resume came first (flush again) or the relay stops (then it ends)
    ("flushing, socket lost", "agent started"): ERROR,
    ("flushing, socket lost", "start failed"): ERROR,
    ("flushing, socket lost", "socket attached"): ((), FA),
    ("flushing, socket lost", "socket resumed"): ((Resumed(),), FA),
    ("flushing, socket lost", "socket closed"): ((), FLL),
    ("flushing, socket lost", "socket lost"): ((), FLL),
    ("flushing, socket lost", "another socket lost"): ((), FLL),
    ("flushing, socket lost", "agent exited"): ERROR,
    ("flushing, socket lost", "agent stopped"): ((), FLL),
    ("flushing, socket lost", "stdout ended"): ((), FLL),
    ("flushing, socket lost", "flushed"): ((Detach(LOST, GRACE),), D),
    ("flushing, socket lost", "stop requested"): ((WATCHERS_AWAY,), FL),
    ("flushing, socket lost", "relay failed"): ((FAILED, STOP, *ENDS), E),
    ("flushing, socket lost", "tick"): ((), FLL),
    ("flushing, socket lost", "watcher arrived"): (ADMIT, FLL),
    ("flushing, socket lost", "watcher left"): ERROR,
    # ended: late events change nothing; a watcher is told the connection ended
    **{("ended", name): ((), E) for name in EVENTS if name not in LATE_ANSWERED},
    ("ended", "watcher arrived"): ((RefuseWatcher(1000, "the connection ended"),), E),
    # a socket attached as the grace ran out (its welcome under way) is closed, saying so
    ("ended", "socket attached"): ((NO_LONGER,), E),
    ("ended", "socket resumed"): ((NO_LONGER,), E),
}  # fmt: skip


def test_the_table_covers_every_phase_and_event() -> None:
    """Every (phase, event) pair has its row: none is left to chance."""
    assert set(TABLE) == {(phase, event) for phase in PHASES for event in EVENTS}
    assert {phase for _, phase in PHASES.values()} == set(Phase)


@pytest.mark.parametrize(("phase", "event"), sorted(TABLE))
def test_each_phase_and_event(phase: str, event: str) -> None:
    """Each event, in each phase, gives its steps and the phase after, or is refused."""
    make, expected_phase = PHASES[phase]
    lifecycle = make()
    assert lifecycle.phase is expected_phase
    expected = TABLE[(phase, event)]
    if expected is LifecycleError:
        with pytest.raises(LifecycleError):
            lifecycle.handle(EVENTS[event])
        return
    assert isinstance(expected, tuple)
    steps, after = expected
    assert lifecycle.handle(EVENTS[event]) == steps
    assert lifecycle.phase is after


# -- sequences -----------------------------------------------------------------------------


def run(lifecycle: Lifecycle, *events: Event) -> list[tuple[Step, ...]]:
    return [lifecycle.handle(event) for event in events]


def test_a_lone_stdout_end_waits_a_moment_for_the_exit() -> None:
    """An agent that closed its stdout has EXIT_WAIT to exit; then it is stopped, then flushed."""
    lifecycle = attached()
    assert lifecycle.handle(StdoutEnded(now=5.0)) == ()
    assert lifecycle.deadline() == 5.0 + EXIT_WAIT
    assert lifecycle.handle(Tick(now=5.0 + EXIT_WAIT / 2)) == ()
    steps = lifecycle.handle(Tick(now=5.0 + EXIT_WAIT))
    assert steps == (KeptRunning(), STOP, FlushOutput())
    assert lifecycle.deadline() is None
    assert run(lifecycle, AgentExited(EXITED), Flushed()) == [(), (CloseSocket(), *ENDS)]


def test_an_exit_within_the_moment_is_an_exit() -> None:
    """The exit that follows a closed stdout in time is acted on as an exit, not a warning."""
    lifecycle = attached()
    assert run(lifecycle, StdoutEnded(now=0.0), AgentExited(EXITED)) == [(), (FlushOutput(),)]
    assert lifecycle.deadline() is None
    assert lifecycle.handle(Tick(now=LATER)) == ()


def test_a_closed_stdout_while_detached_stops_the_agent_and_keeps_waiting() -> None:
    """Detached, a closed stdout stops the agent; its exit then waits for a resume."""
    lifecycle = detached()
    steps = run(lifecycle, StdoutEnded(now=1.0), Tick(now=1.0 + EXIT_WAIT), AgentExited(EXITED))
    assert steps == [(), (KeptRunning(), STOP), (StopChildren(),)]
    assert lifecycle.phase is Phase.DETACHED
    assert run(lifecycle, SocketAttached(SECOND, resumed=T), Flushed()) == [
        (Resumed(), FlushOutput()),
        (CloseSocket(), *ENDS),
    ]


def test_a_resumable_socket_lost_during_the_flush_detaches() -> None:
    """The flush's socket went: a resumable connection detaches, and a resume gets the rest."""
    lifecycle = flushing(resumable=T)
    gone = SocketGone(FIRST, clean=F, why=LOST, now=2.0)
    assert run(lifecycle, gone, Flushed()) == [(), (Detach(LOST, GRACE),)]
    assert lifecycle.grace_left(now=12.0) == GRACE - 10.0
    assert run(lifecycle, SocketAttached(SECOND, resumed=T), Flushed()) == [
        (Resumed(), FlushOutput()),
        (CloseSocket(), *ENDS),
    ]


def test_a_clean_close_during_the_flush_ends() -> None:
    """A client that closed cleanly during the flush is not waited for."""
    lifecycle = flushing(resumable=T)
    closed = SocketGone(FIRST, clean=T, why=CLOSED_BY_CLIENT, now=2.0)
    assert run(lifecycle, closed, Flushed()) == [(), (CloseSocket(), *ENDS)]


def test_a_plain_socket_lost_during_the_flush_ends() -> None:
    """Without the resume profile, a socket lost during the flush ends the connection."""
    lifecycle = flushing()
    gone = SocketGone(FIRST, clean=F, why=LOST, now=2.0)
    assert run(lifecycle, gone, Flushed()) == [(), (CloseSocket(), *ENDS)]


def test_a_resume_during_the_flush_flushes_again_to_the_new_socket() -> None:
    """The older socket's flush ended with it; the resumed socket gets its own flush."""
    lifecycle = flushing(resumable=T)
    steps = run(
        lifecycle,
        SocketGone(FIRST, clean=F, why=LOST, now=1.0),
        SocketAttached(SECOND, resumed=T),
        Flushed(),
        Flushed(),
    )
    assert steps == [(), (Resumed(),), (FlushOutput(),), (CloseSocket(), *ENDS)]


def test_a_resumed_socket_lost_during_the_reflush_detaches() -> None:
    """A loss after the resume, during the flush, is the one decided: detach again."""
    lifecycle = flushing(resumable=T)
    steps = run(
        lifecycle,
        SocketAttached(SECOND, resumed=T),
        SocketGone(SECOND, clean=F, why=LOST, now=3.0),
        Flushed(),
    )
    assert steps == [TAKEN_OVER, (), (Detach(LOST, GRACE),)]


def test_the_grace_runs_from_the_loss() -> None:
    """A detached connection's deadline is its loss plus the grace; a tick before changes
    nothing, one at it ends the connection."""
    lifecycle = attached(resumable=T)
    assert lifecycle.deadline() is None
    assert lifecycle.grace_left(now=0.0) == float("inf")
    lifecycle.handle(SocketGone(FIRST, clean=F, why=LOST, now=10.0))
    assert lifecycle.deadline() == 10.0 + GRACE
    assert lifecycle.handle(Tick(now=10.0 + GRACE - 0.5)) == ()
    assert lifecycle.handle(Tick(now=10.0 + GRACE)) == EXPIRED
    assert lifecycle.deadline() is None


@pytest.mark.parametrize(
    ("detached_at", "now", "left"),
    [(None, 100.0, float("inf")), (10.0, 10.0, GRACE), (10.0, 25.0, 15.0), (10.0, 45.0, -5.0)],
)
def test_grace_left(detached_at: float | None, now: float, left: float) -> None:
    """The grace counts from the loss; attached, there is no deadline."""
    lifecycle = attached(resumable=T)
    if detached_at is not None:
        lifecycle.handle(SocketGone(FIRST, clean=F, why=LOST, now=detached_at))
    assert lifecycle.grace_left(now) == left


def test_a_resume_after_a_loss_tells_the_gap() -> None:
    """Detached at 10 s, resumed at 12.5 s: 2.5 s without a socket; attached, none."""
    lifecycle = attached(resumable=T)
    assert lifecycle.detached_for(now=5.0) is None
    lifecycle.handle(SocketGone(FIRST, clean=F, why=LOST, now=10.0))
    assert lifecycle.detached_for(now=12.5) == 2.5
    lifecycle.handle(SocketAttached(SECOND, resumed=T))
    assert lifecycle.detached_for(now=13.0) is None


def test_the_earliest_deadline_comes_first() -> None:
    """Detached with a stdout that ended, the exit's moment comes before the grace's end."""
    lifecycle = detached()
    lifecycle.handle(StdoutEnded(now=4.0))
    assert lifecycle.deadline() == 4.0 + EXIT_WAIT


def test_a_resume_stops_the_grace() -> None:
    """Once resumed, no deadline is left of the grace."""
    lifecycle = detached()
    lifecycle.handle(SocketAttached(SECOND, resumed=T))
    assert lifecycle.deadline() is None
    assert lifecycle.grace_left(now=LATER) == float("inf")


def test_watchers_are_counted_up_to_the_most() -> None:
    """The watchers' cap holds after the upgrade too; one that leaves makes room."""
    lifecycle = attached()
    assert run(lifecycle, WatcherArrived(), WatcherArrived()) == [ADMIT, ADMIT]
    refused = lifecycle.handle(WatcherArrived())
    assert refused == (RefuseWatcher(1013, "the connection has its most watchers"),)
    assert lifecycle.watchers == 2
    assert run(lifecycle, WatcherLeft(), WatcherArrived()) == [(), ADMIT]


def test_a_stopping_relay_closes_the_watchers_once() -> None:
    """At shutdown the watchers hear why first; the end does not close them again."""
    lifecycle = attached(resumable=T)
    steps = run(
        lifecycle,
        StopRequested(),
        StopRequested(),
        SocketGone(FIRST, clean=F, why="closed with 1001", now=0.0),
    )
    assert steps == [(WATCHERS_AWAY,), (), (STOP_NOW, End())]
    closes = [s for each in steps for s in each if isinstance(s, CloseWatchers | ShutdownWatchers)]
    assert closes == [WATCHERS_AWAY]


def test_only_the_watchers_and_the_log_go_at_once() -> None:
    """Steps told at once concern the watchers and the log alone; those about the agent and
    the controlling socket wait their turn."""
    assert set(AT_ONCE) == {
        Detach,
        Resumed,
        ShutdownWatchers,
        AdmitWatcher,
        RefuseWatcher,
        FenceSocket,
        RefuseSocket,
    }
    in_order = (FlushOutput, StopAgent, StopChildren, CloseSocket, CloseWatchers, End)
    assert not set(in_order) & set(AT_ONCE)


# -- which socket controls the connection, which exit account counts ---------------------

CONTROLLERS: list[tuple[str, Event, tuple[Step, ...], int | None, int | None]] = [
    # (phase, event, steps, the controller after, the socket the close line names after)
    ("attached", SocketAttached(FIRST, resumed=F), (), FIRST, FIRST),
    ("attached", SocketAttached(SECOND, resumed=T), TAKEN_OVER, SECOND, SECOND),
    ("attached", SocketGone(SECOND, clean=F, why=LOST, now=0.0), (), FIRST, FIRST),
    ("attached", SocketGone(FIRST, clean=T, why=CLOSED_BY_CLIENT, now=0.0), (STOP, *ENDS),
     None, FIRST),
    ("attached, resumable", SocketGone(FIRST, clean=F, why=LOST, now=0.0),
     (Detach(LOST, GRACE),), None, FIRST),
    ("detached", SocketAttached(SECOND, resumed=T), (Resumed(),), SECOND, SECOND),
    ("flushing, resumable", SocketAttached(SECOND, resumed=T), TAKEN_OVER, SECOND, SECOND),
    ("flushing again", SocketGone(FIRST, clean=F, why=LOST, now=0.0), (), SECOND, SECOND),
    ("flushing again", SocketGone(SECOND, clean=F, why=LOST, now=0.0), (), None, SECOND),
    ("flushing, socket lost", SocketAttached(SECOND, resumed=T), (Resumed(),), SECOND, SECOND),
    ("ended", SocketAttached(SECOND, resumed=T), (NO_LONGER,), None, FIRST),
]  # fmt: skip


@pytest.mark.parametrize(("phase", "event", "steps", "controller", "closing"), CONTROLLERS)
def test_the_lifecycle_says_which_socket_controls_the_connection(
    phase: str, event: Event, steps: tuple[Step, ...], controller: int | None, closing: int | None
) -> None:
    """The socket attached last controls the connection (the one before it fenced), the
    loss of another changes nothing, a late one is refused; the close line names the
    controller, or the last socket that was."""
    lifecycle = PHASES[phase][0]()
    assert lifecycle.handle(event) == steps
    assert (lifecycle.controller, lifecycle.closing_socket) == (controller, closing)


def test_the_first_socket_controls_the_starting_connection() -> None:
    """The socket that opened the connection controls it before the agent runs: a failed
    start is said on it."""
    lifecycle = starting()
    assert (lifecycle.controller, lifecycle.closing_socket) == (FIRST, FIRST)


EXITED_0 = Exit(0)
KILLED = Exit(-15)  # as the wait sees an agent the relay's SIGTERM ended
ACCOUNTS: list[tuple[str, tuple[Event, ...], Exit | None]] = [
    ("attached", (), None),
    ("attached", (AgentExited(EXITED_0),), EXITED_0),
    ("attached", (AgentExited(EXITED_0), AgentStopped(EXITED_0)), EXITED_0),
    # the stop ends the agent: its account knows the relay signalled it, whichever comes first
    ("ended", (AgentExited(KILLED), AgentStopped(STOPPED)), STOPPED),
    ("ended", (AgentStopped(STOPPED), AgentExited(KILLED)), STOPPED),
    ("detached", (AgentExited(EXITED), Tick(LATER), AgentStopped(STOPPED)), STOPPED),
]


@pytest.mark.parametrize(("phase", "events", "expected"), ACCOUNTS)
def test_which_account_of_the_agents_exit_counts(
    phase: str, events: tuple[Event, ...], expected: Exit | None
) -> None:
    """The wait's account of the exit stands until the stop's, which says whether the relay
    signalled the agent; in every phase, the end included."""
    lifecycle = PHASES[phase][0]()
    run(lifecycle, *events)
    assert lifecycle.exit == expected


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ((), (1000, "the connection ended")),
        ((AgentExited(EXITED),), (1000, "the connection ended: agent exited with status 3")),
        ((AgentExited(EXITED), StopRequested()), (1001, "the relay is shutting down")),
    ],
)
def test_the_watchers_hear_how_the_agent_ended(
    events: tuple[Event, ...], expected: tuple[int, str]
) -> None:
    """What the watchers are told at the end is read from the lifecycle's own state."""
    lifecycle = attached()
    run(lifecycle, *events)
    assert lifecycle.watchers_close() == expected


# -- one list of steps ---------------------------------------------------------------------


def pull(lifecycle: Lifecycle, *, in_order: bool) -> list[Step]:
    steps = []
    while (step := lifecycle.next_step(in_order=in_order)) is not None:
        steps.append(step)
    return steps


def test_the_steps_are_pulled_from_one_list() -> None:
    """The steps of every event wait in one list: those carried out at once are taken ahead
    of the others, each kind in the order told."""
    lifecycle = attached(resumable=T)
    run(lifecycle, AgentExited(EXITED), WatcherArrived(), SocketAttached(SECOND, T), Flushed())
    assert pull(lifecycle, in_order=F) == [AdmitWatcher(), *TAKEN_OVER]
    assert pull(lifecycle, in_order=T) == [FlushOutput(), FlushOutput()]
    assert lifecycle.next_step(in_order=F) is lifecycle.next_step(in_order=T) is None


@pytest.mark.parametrize(
    ("exit_reason", "shutting_down", "expected"),
    [
        (None, F, (1000, "the connection ended")),
        ("agent exited with status 3", F,
         (1000, "the connection ended: agent exited with status 3")),
        ("agent exited", T, (1001, "the relay is shutting down")),
    ],
)  # fmt: skip
def test_what_watchers_are_told_at_the_end(
    exit_reason: str | None, shutting_down: bool, expected: tuple[int, str]
) -> None:
    """Watchers hear how their connection ended, or that the relay is going away."""
    assert watchers_close(exit_reason, shutting_down) == expected


def test_the_close_codes_are_websockets() -> None:
    """The pure module's codes are the standard ones websockets names."""
    assert INTERNAL_ERROR == CloseCode.INTERNAL_ERROR
    assert GOING_AWAY == CloseCode.GOING_AWAY


# -- properties ----------------------------------------------------------------------------

SOCKETS = st.sampled_from([FIRST, SECOND, OTHER])
EXITS = st.builds(Exit, st.integers(-15, 3), st.booleans())
ANY_EVENT = st.one_of(
    st.just(AgentStarted()),
    st.builds(StartFailed, st.just("why")),
    st.builds(SocketAttached, SOCKETS, st.booleans()),
    st.builds(SocketGone, SOCKETS, st.booleans(), st.just("why"), st.floats(0, 100)),
    st.builds(AgentExited, EXITS),
    st.builds(AgentStopped, EXITS),
    st.builds(StdoutEnded, st.floats(0, 100)),
    st.just(Flushed()),
    st.just(StopRequested()),
    st.builds(RelayFailed, st.just("E")),
    st.builds(Tick, st.floats(0, 200)),
    st.just(WatcherArrived()),
    st.just(WatcherLeft()),
)


@given(resumable=st.booleans(), events=st.lists(ANY_EVENT, max_size=30))
def test_a_connection_ends_once_and_then_stays_ended(resumable: bool, events: list[Event]) -> None:
    """Whatever happens, End comes at most once, last of its steps, and nothing follows it
    but refusals of watchers and closes of late sockets; the agent is stopped or gone
    before the end."""
    lifecycle = starting(resumable)
    ends = 0
    stopped = False
    for event in events:
        try:
            steps = lifecycle.handle(event)
        except LifecycleError:
            continue
        if ends:
            assert all(isinstance(step, RefuseWatcher | RefuseSocket) for step in steps)
        stopped = stopped or lifecycle.exited or any(isinstance(s, StopAgent) for s in steps)
        if End() in steps:
            ends += 1
            assert steps[-1] == End()
            assert lifecycle.phase is Phase.ENDED
            started = not isinstance(event, StartFailed)
            assert stopped or not started or isinstance(event, Flushed)
    assert ends <= 1
    assert lifecycle.watchers >= 0


@given(resumable=st.booleans(), events=st.lists(ANY_EVENT, max_size=30))
def test_every_state_reached_keeps_the_states_rules(resumable: bool, events: list[Event]) -> None:
    """Whatever happens, the state holds each field only where it means something
    (State.check), and the steps pulled are those told, each lane in its order."""
    lifecycle = starting(resumable)
    told: list[Step] = []
    for event in events:
        with contextlib.suppress(LifecycleError):
            told.extend(lifecycle.handle(event))
        assert lifecycle.state.check() == []
    at_once, in_order = pull(lifecycle, in_order=F), pull(lifecycle, in_order=T)
    assert at_once == [step for step in told if isinstance(step, AT_ONCE)]
    assert in_order == [step for step in told if not isinstance(step, AT_ONCE)]


@given(resumable=st.booleans(), events=st.lists(ANY_EVENT, max_size=30))
def test_an_agent_that_exited_stays_exited_and_never_kept_running(
    resumable: bool, events: list[Event]
) -> None:
    """Once the agent exited, nothing makes it running again: a stdout's end told after the
    exit sets no deadline, and no tick says it kept running (the mutation that set the
    deadline anyway fails here)."""
    lifecycle = starting(resumable)
    for event in events:
        exited = lifecycle.exited
        try:
            steps = lifecycle.handle(event)
        except LifecycleError:
            continue
        if exited:
            assert lifecycle.exited
            assert KeptRunning() not in steps
            assert lifecycle.state.quiet_since is None


@given(resumable=st.booleans(), events=st.lists(ANY_EVENT, max_size=30))
def test_a_deadline_is_consumed_by_the_tick_it_asks_for(
    resumable: bool, events: list[Event]
) -> None:
    """Whatever happened, a Tick at the deadline moves the deadline past it or clears it:
    the connection never waits on a time already past (its wait would spin)."""
    lifecycle = starting(resumable)
    for event in events:
        with contextlib.suppress(LifecycleError):
            lifecycle.handle(event)
        deadline = lifecycle.deadline()
        if deadline is None:
            continue
        with contextlib.suppress(LifecycleError):
            lifecycle.handle(Tick(deadline))
        after = lifecycle.deadline()
        assert after is None or after > deadline
