"""Tests for relay.core.exits: an agent's exit as a close code and reason, signals by name."""

from __future__ import annotations

import signal
import sys

import pytest

from relay.core.exits import SIGNAL_NAMES, Exit, signal_name


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
