"""An agent that streams ``stream.py COUNT [DELAY]`` numbered notifications, then echoes stdin.

Each line carries its index and the agent's pid: ``{"jsonrpc":"2.0","method":"n",
"params":{"i":0,"pid":123}}``. With DELAY (seconds), it sleeps that long every 100 lines.
Stdin is echoed line by line meanwhile, so requests sent during the stream get answers.
"""

import os
import sys
import threading
import time


def echo() -> None:
    for line in sys.stdin.buffer:
        with lock:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()


lock = threading.Lock()
threading.Thread(target=echo, daemon=True).start()
count = int(sys.argv[1])
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
pid = os.getpid()
for i in range(count):
    with lock:
        sys.stdout.buffer.write(
            b'{"jsonrpc":"2.0","method":"n","params":{"i":%d,"pid":%d}}\n' % (i, pid)
        )
    if i % 100 == 99:
        with lock:
            sys.stdout.flush()
        if delay:
            time.sleep(delay)
with lock:
    sys.stdout.flush()
while True:
    time.sleep(3600)
