"""relay.core.ending: what ends a connection first, and the steps that end it, as tables."""

from __future__ import annotations

import pytest
from websockets.frames import CloseCode

from relay.core.ending import (
    INTERNAL_ERROR,
    CloseSocket,
    Detach,
    End,
    FlushOutput,
    Happened,
    Step,
    StopAgent,
    StopChildren,
    Wait,
    ending,
    what_happened,
)

F, T = False, True


@pytest.mark.parametrize(
    ("failed", "exited", "closed", "eof", "waited", "expected"),
    [
        (F, F, F, F, F, None),
        (T, T, T, T, T, Happened.RELAY_FAILED),
        (T, F, F, F, F, Happened.RELAY_FAILED),
        (F, T, F, F, F, Happened.AGENT_EXITED),
        (F, T, T, T, F, Happened.AGENT_EXITED),
        (F, F, T, F, F, Happened.SOCKET_CLOSED),
        (F, F, T, T, F, Happened.SOCKET_CLOSED),
        (F, F, F, T, F, Wait.FOR_EXIT),
        (F, F, F, T, T, Happened.STDOUT_CLOSED),
        (F, T, F, T, T, Happened.AGENT_EXITED),
        (F, F, T, T, T, Happened.SOCKET_CLOSED),
    ],
)
def test_what_happened_first(
    failed: bool, exited: bool, closed: bool, eof: bool, waited: bool, expected: object
) -> None:
    """A relay failure wins, then the agent's exit, then the socket; a lone stdout EOF waits."""
    happened = what_happened(
        relay_failed=failed,
        agent_exited=exited,
        socket_closed=closed,
        stdout_ended=eof,
        waited=waited,
    )
    assert happened == expected


EXIT_CLOSE = (FlushOutput(), CloseSocket(), End())


@pytest.mark.parametrize(
    ("happened", "shutting_down", "detail", "steps"),
    [
        (Happened.START_FAILED, F, "x: command not found",
         (CloseSocket(1011, "agent failed to start: x: command not found"), End())),
        (Happened.AGENT_EXITED, F, "", EXIT_CLOSE),
        (Happened.AGENT_EXITED, T, "", EXIT_CLOSE),
        (Happened.STDOUT_CLOSED, F, "", (StopAgent(eof_first=T), *EXIT_CLOSE)),
        (Happened.SOCKET_CLOSED, F, "", (StopAgent(eof_first=T), End())),
        (Happened.SOCKET_CLOSED, T, "", (StopAgent(eof_first=F), End())),
        (Happened.SOCKET_LOST, F, "", (StopAgent(eof_first=T), End())),
        (Happened.SOCKET_LOST, T, "", (StopAgent(eof_first=F), End())),
        (Happened.RELAY_FAILED, F, "KeyError",
         (CloseSocket(1011, "relay error: KeyError"), StopAgent(eof_first=T), End())),
        (Happened.RELAY_FAILED, T, "KeyError",
         (CloseSocket(1011, "relay error: KeyError"), StopAgent(eof_first=F), End())),
    ],
)  # fmt: skip
def test_ending_steps(
    happened: Happened, shutting_down: bool, detail: str, steps: tuple[Step, ...]
) -> None:
    """Each event ends the connection with its steps, in order; shutdown skips the EOF grace."""
    assert ending(happened, shutting_down=shutting_down, detail=detail) == steps


@pytest.mark.parametrize(
    ("happened", "attached", "shutting_down", "steps"),
    [
        (Happened.SOCKET_LOST, T, F, (Detach(),)),
        (Happened.SOCKET_LOST, T, T, (StopAgent(eof_first=F), End())),
        (Happened.SOCKET_CLOSED, T, F, (StopAgent(eof_first=T), End())),
        (Happened.AGENT_EXITED, T, F, EXIT_CLOSE),
        (Happened.AGENT_EXITED, F, F, (StopChildren(),)),
        (Happened.STDOUT_CLOSED, F, F, (StopAgent(eof_first=T),)),
        (Happened.GRACE_EXPIRED, F, F, (StopAgent(eof_first=T), End())),
        (Happened.SHUTDOWN, F, T, (StopAgent(eof_first=F), End())),
        (Happened.RELAY_FAILED, F, F, (StopAgent(eof_first=T), End())),
        (Happened.RELAY_FAILED, T, F,
         (CloseSocket(1011, "relay error: E"), StopAgent(eof_first=T), End())),
    ],
)  # fmt: skip
def test_resumable_ending_steps(
    happened: Happened, attached: bool, shutting_down: bool, steps: tuple[Step, ...]
) -> None:
    """A resumable connection detaches on a lost socket and waits; a clean close still ends it."""
    got = ending(
        happened, shutting_down=shutting_down, detail="E", resumable=True, attached=attached
    )
    assert got == steps


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"socket_lost": T}, Happened.SOCKET_LOST),
        ({"socket_lost": T, "agent_exited": T}, Happened.AGENT_EXITED),
        ({"grace_expired": T}, Happened.GRACE_EXPIRED),
        ({"shutdown": T, "grace_expired": T}, Happened.SHUTDOWN),
        ({"shutdown": T, "relay_failed": T}, Happened.RELAY_FAILED),
    ],
)
def test_what_happened_while_resumable(flags: dict[str, bool], expected: Happened) -> None:
    """Detached events come after the agent's and the socket's; a shutdown beats the grace."""
    base = {
        "relay_failed": F,
        "agent_exited": F,
        "socket_closed": F,
        "stdout_ended": F,
        "waited": F,
    }
    assert what_happened(**{**base, **flags}) == expected


def test_every_event_ends_or_detaches() -> None:
    """No event is left without steps; every sequence ends the connection or detaches it."""
    for happened in Happened:
        for resumable, attached in ((F, T), (T, T), (T, F)):
            steps = ending(
                happened, shutting_down=False, detail="d", resumable=resumable, attached=attached
            )
            assert steps
            ends = isinstance(steps[-1], End) or Detach() in steps
            assert ends or not attached, (happened, resumable, attached, steps)


def test_the_tables_close_code_is_websockets_internal_error() -> None:
    """The pure table's 1011 is the standard code websockets names INTERNAL_ERROR."""
    assert INTERNAL_ERROR == CloseCode.INTERNAL_ERROR
