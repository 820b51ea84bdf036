"""An agent that ignores stdin EOF and SIGTERM, and has a child that does the same.

Prints "ready <pid> <child pid>" on stdout once both ignore SIGTERM.
"""

import os
import signal
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(
    [
        sys.executable,
        "-c",
        "import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('child ready', flush=True)\ntime.sleep(600)",
    ],
    stdout=subprocess.PIPE,
)
assert child.stdout is not None
child.stdout.readline()
print(f"ready {os.getpid()} {child.pid}", flush=True)
while True:
    time.sleep(1)
