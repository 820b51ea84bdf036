"""Stop signals during ``serve``'s start-up: noted when they come, acted on where start-up can
stop cleanly.

A handler that raised at once (KeyboardInterrupt, SystemExit) could land anywhere: in the
middle of an import (the clean-up then tripped over the half-made module), between making
the ``--dev`` folder and recording it, or while the relay read the agents' watchdog's
first line (the watchdog then wrote to a closed pipe). So from the moment ``serve`` is
chosen until the server's loop takes the signals over, SIGTERM, SIGINT and SIGHUP are only
noted, and start-up calls :func:`stop_if_requested` between its steps: it exits there with
status 128 + the signal's number, its clean-up done. Start-up's steps are short; should
one hang, a second signal ends the process at once (what it leaves, a ``--dev`` folder,
the next ``serve --dev`` removes, as after SIGKILL).
"""

from __future__ import annotations

import os
import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_noted: list[int] = []  # the stop signal that came, if one did


def defer_stop_signals() -> None:
    """From now on, a stop signal is noted, not acted on, until the loop's handlers replace
    these (or :func:`stop_if_requested` acts on it)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _note)


def _note(signum: int, _frame: FrameType | None) -> None:
    if _noted:  # asked twice: start-up is stuck, or the person means it
        os._exit(128 + _noted[0])
    _noted.append(signum)


def requested() -> signal.Signals | None:
    """The stop signal that came during start-up, or None."""
    return signal.Signals(_noted[0]) if _noted else None


def stop_if_requested() -> None:
    """SystemExit with 128 + the signal's number if a stop signal came: start-up stops here."""
    if _noted:
        raise SystemExit(128 + _noted[0])
