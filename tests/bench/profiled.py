"""``acp-relay`` with a profiler that signals turn on and off, for tests/bench/hotpath.py.

    python -m tests.bench.profiled PSTATS_FILE -- serve ARGS...

Runs ``acp-relay ARGS`` as usual. SIGUSR1 starts :mod:`cProfile` (the event loop's
thread, built-in functions included); SIGUSR2 stops it and writes its statistics to
PSTATS_FILE. So the profile covers only the messages between the two signals, not the
start-up nor the connection's opening.
"""

from __future__ import annotations

import cProfile
import signal
import sys
from types import FrameType

from relay.commands import main as relay_main


def main(argv: list[str]) -> int:
    out, separator, *rest = argv
    if separator != "--":
        raise SystemExit("usage: python -m tests.bench.profiled PSTATS_FILE -- ARGS...")
    profile = cProfile.Profile(builtins=True)

    def start(_signum: int, _frame: FrameType | None) -> None:
        profile.enable()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        profile.disable()
        profile.dump_stats(out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    return relay_main(rest)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
