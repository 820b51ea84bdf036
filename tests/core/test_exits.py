"""Tests for relay.core.exits: an agent's exit as a close code and reason, signals by name."""

from __future__ import annotations

import signal
import sys

import pytest

from relay.core.exits import (
    AGENT_CRASHED,
    AGENT_FAILED,
    KEPT_RUNNING,
    SIGNAL_NAMES,
    Exit,
    ending_event,
    signal_name,
)
from relay.core.framing import MAX_CLOSE_REASON_BYTES


@pytest.mark.parametrize(
    ("returncode", "code", "reason"),
    [
        (0, 1000, "agent exited"),
        (3, 1011, "agent exited with status 3"),
        (-9, 1011, "agent killed by SIGKILL"),
        (-15, 1011, "agent killed by SIGTERM"),
        (-200, 1011, "agent killed by signal 200"),
    ],
)
def test_exit_close_code_and_reason(returncode: int, code: int, reason: str) -> None:
    """An exit status maps to the close code and reason the client sees."""
    assert (Exit(returncode).close_code, Exit(returncode).reason) == (code, reason)


def test_signal_name() -> None:
    """Signals are named; unknown numbers are spelled out."""
    assert (signal_name(2), signal_name(999)) == ("SIGINT", "signal 999")


@pytest.mark.skipif(sys.platform != "linux", reason="the table names Linux's own numbers there")
def test_the_signal_table_names_every_signal_as_the_platform_does() -> None:
    """Each of the 31 classic signal numbers is named as Python's signal module names it."""
    for number in range(1, 32):
        assert signal_name(number) == signal.Signals(number).name
    assert len(SIGNAL_NAMES) == 31


@pytest.mark.parametrize(
    ("exit_", "failed"),
    [(Exit(0), False), (Exit(2), True), (Exit(-9), True), (Exit(-9, stopped=True), False)],
)
def test_an_exit_failed_unless_0_or_the_relays_doing(exit_: Exit, failed: bool) -> None:
    """An agent failed when it exited non-zero, or died of a signal, the relay not stopping it."""
    assert exit_.failed is failed


NO_MODULE = (
    "/home/alice/.venv/bin/python3: Error while finding module specification for "
    "'relay.demo_agent' (ModuleNotFoundError: No module named 'relay')"
)


@pytest.mark.parametrize(
    ("exit_", "line", "reason"),
    [
        (Exit(1), "KeyError: ANTHROPIC_API_KEY",
         "agent exited with status 1: KeyError: ANTHROPIC_API_KEY"),
        (Exit(1), NO_MODULE,
         "agent exited with status 1: ...g module specification for 'relay.demo_agent' "
         "(ModuleNotFoundError: No module named 'relay')"),
        (Exit(-6), "Fatal error: SIGABRT", "agent killed by SIGABRT: Fatal error: SIGABRT"),
        (Exit(1), "", "agent exited with status 1"),
        (Exit(0), "bye", "agent exited"),
        (Exit(-15, stopped=True), "terminated", "agent killed by SIGTERM"),
    ],
)  # fmt: skip
def test_a_failed_agents_close_reason_ends_with_its_last_stderr_line(
    exit_: Exit, line: str, reason: str
) -> None:
    """A failed agent's close reason carries the end of its last stderr line, within the 123
    bytes of a close reason; an agent that did not fail, or said nothing, gets its exit alone."""
    assert exit_.reason_with(line) == reason
    assert len(reason.encode()) <= MAX_CLOSE_REASON_BYTES


@pytest.mark.parametrize(
    ("exit_", "stdout_closed_first", "event"),
    [
        (Exit(0), False, None),
        (Exit(0), True, KEPT_RUNNING),  # ran on without stdout until its stdin ended
        (Exit(-15, stopped=True), True, KEPT_RUNNING),
        (Exit(-9, stopped=True), False, None),  # the relay stopped it: the client left
        (Exit(1), False, AGENT_FAILED),
        (Exit(1), True, AGENT_FAILED),  # a failure, whatever came first of EOF and exit
        (Exit(-11), False, AGENT_CRASHED),
        (Exit(-6), True, AGENT_CRASHED),
    ],
)
def test_an_agents_end_is_named(exit_: Exit, stdout_closed_first: bool, event: str | None) -> None:
    """A signal not the relay's is a crash, a status of its own a failure (stdout closed
    first or not); an agent that closed its stdout and ran on until stopped kept running;
    a clean end says nothing."""
    assert ending_event(exit_, stdout_closed_first=stdout_closed_first) == event
