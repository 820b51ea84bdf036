"""How a child process ended, in words: an agent's exit as a WebSocket close, a signal's name.

Pure: the exit status (and a failed agent's last stderr line) in, the close code and the
words out. Used by both sides: ``serve``
tells a client how its agent ended, ``connect`` tells the editor how its ticket command
failed. Signal names come from a table, not from the ``signal`` module (which also holds
the process-wide signal handlers, no business of pure code): the numbers every Unix
shares, and Linux's own on Linux; elsewhere another number is spelled out.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from relay.core.framing import MAX_CLOSE_REASON_BYTES, end_within

# Numbers POSIX fixes, or that Linux, macOS and the BSDs share.
_SHARED_SIGNALS = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    5: "SIGTRAP",
    6: "SIGABRT",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
    24: "SIGXCPU",
    25: "SIGXFSZ",
    26: "SIGVTALRM",
    27: "SIGPROF",
}
_LINUX_SIGNALS = {
    7: "SIGBUS",
    10: "SIGUSR1",
    12: "SIGUSR2",
    16: "SIGSTKFLT",
    17: "SIGCHLD",
    18: "SIGCONT",
    19: "SIGSTOP",
    20: "SIGTSTP",
    21: "SIGTTIN",
    22: "SIGTTOU",
    23: "SIGURG",
    28: "SIGWINCH",
    29: "SIGIO",
    30: "SIGPWR",
    31: "SIGSYS",
}
SIGNAL_NAMES = _SHARED_SIGNALS | (_LINUX_SIGNALS if sys.platform == "linux" else {})

CLOSE_NORMAL = 1000  # RFC 6455 normal closure: the agent exited 0
CLOSE_INTERNAL_ERROR = 1011  # RFC 6455 internal error: the agent failed

# What the log calls an agent's end, when there is something to say about it.
AGENT_FAILED = "agent failed"
AGENT_CRASHED = "agent crashed"
KEPT_RUNNING = "agent closed its stdout but kept running: stopped it"


def signal_name(number: int) -> str:
    """SIGTERM for 15, and so on; the number when the signal has no name here."""
    return SIGNAL_NAMES.get(number, f"signal {number}")


@dataclass(frozen=True)
class Exit:
    """How the agent ended, as a WebSocket close code and reason; ``stopped`` when the
    relay had signalled it (SIGTERM, SIGKILL) before it exited."""

    returncode: int
    stopped: bool = False

    @property
    def failed(self) -> bool:
        """The agent ended badly on its own: a non-zero status, or a signal not the relay's."""
        return self.returncode != 0 and not self.stopped

    @property
    def close_code(self) -> int:
        return CLOSE_NORMAL if self.returncode == 0 else CLOSE_INTERNAL_ERROR

    @property
    def reason(self) -> str:
        if self.returncode == 0:
            return "agent exited"
        if self.returncode < 0:
            return f"agent killed by {signal_name(-self.returncode)}"
        return f"agent exited with status {self.returncode}"

    def reason_with(self, stderr_line: str) -> str:
        """The close reason: :attr:`reason`, then for an agent that failed the end of its
        last stderr line (where a program says why), as much as a close reason holds."""
        if not self.failed or not stderr_line:
            return self.reason
        head = f"{self.reason}: "
        return head + end_within(stderr_line, MAX_CLOSE_REASON_BYTES - len(head.encode()))


def ending_event(exit_: Exit, *, stdout_closed_first: bool) -> str | None:
    """What the log calls the agent's end (a warning); None when it ended well.

    A signal the relay did not send is a crash; a non-zero status of the agent's own is a
    failure, whether or not its stdout closed a moment before its exit (which of the two
    the relay saw first depends on scheduling, and must not change the name). An agent
    that closed its stdout and ended only when the relay stopped it had kept running.
    """
    if exit_.failed:
        return AGENT_CRASHED if exit_.returncode < 0 else AGENT_FAILED
    return KEPT_RUNNING if stdout_closed_first else None
