"""An agent that crashes: it writes what a crashing runtime writes to stderr, then kills
itself with a signal.

Usage: dies_by_signal.py SIGNAL [--stdout-first]: SIGNAL by name (SIGSEGV, SIGABRT).
With --stdout-first it closes its stdout first and dies only once its stdin ends (when
the relay, seeing the stdout closed, stops it): a crash whose exit comes after its stdout
closed.
"""

import os
import signal
import sys

number = signal.Signals[sys.argv[1]]
sys.stderr.write(f"Fatal error: {number.name} in the agent's runtime, dumping core\n")
sys.stderr.flush()
if "--stdout-first" in sys.argv[2:]:
    os.close(1)
    while os.read(0, 65536):
        pass
signal.signal(number, signal.SIG_DFL)
os.kill(os.getpid(), number)
