"""Tests for relay.ending: what ends a connection first, and the steps that end it, as tables."""

from __future__ import annotations

import pytest

from relay.ending import (
    CloseSocket,
    FlushOutput,
    Happened,
    Step,
    StopAgent,
    Wait,
    Warn,
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


STOPPING = "agent closed its stdout but is still running: stopping it"


@pytest.mark.parametrize(
    ("happened", "shutting_down", "detail", "steps"),
    [
        (Happened.START_FAILED, F, "x: command not found",
         (CloseSocket(1011, "agent failed to start: x: command not found"),)),
        (Happened.AGENT_EXITED, F, "", (FlushOutput(), CloseSocket())),
        (Happened.AGENT_EXITED, T, "", (FlushOutput(), CloseSocket())),
        (Happened.STDOUT_CLOSED, F, "", (Warn(STOPPING), StopAgent(eof_first=T), CloseSocket())),
        (Happened.SOCKET_CLOSED, F, "", (StopAgent(eof_first=T),)),
        (Happened.SOCKET_CLOSED, T, "", (StopAgent(eof_first=F),)),
        (Happened.RELAY_FAILED, F, "KeyError",
         (CloseSocket(1011, "relay error: KeyError"), StopAgent(eof_first=T))),
        (Happened.RELAY_FAILED, T, "KeyError",
         (CloseSocket(1011, "relay error: KeyError"), StopAgent(eof_first=F))),
    ],
)  # fmt: skip
def test_ending_steps(
    happened: Happened, shutting_down: bool, detail: str, steps: tuple[Step, ...]
) -> None:
    """Each event ends the connection with its steps, in order; shutdown skips the EOF grace."""
    assert ending(happened, shutting_down=shutting_down, detail=detail) == steps


def test_every_event_has_an_ending() -> None:
    """No event is left without steps, so no connection can hang undecided."""
    for happened in Happened:
        assert ending(happened, shutting_down=False, detail="d")
