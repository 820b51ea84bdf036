"""An agent that takes ``slow_start.py SECONDS [STDERR_BYTES]`` to start, then answers at once.

Like a real agent loading its runtime: it sleeps before it reads stdin (a request sent
meanwhile waits in the pipe), after writing STDERR_BYTES of log lines to stderr (0 by
default). Then each request gets its answer at once: ``initialize`` a v1 result, any
other an empty one; each result carries ``_meta.pid`` and ``_meta.ready`` (the wall-clock
time the start ended), so a test can tell which agent answered and when it was ready.
"""

import json
import os
import sys
import time

delay = float(sys.argv[1])
noise = int(sys.argv[2]) if len(sys.argv) > 2 else 0
line = b"slow_start agent loading its runtime " + b"." * 3963 + b"\n"  # 4000 bytes
for _ in range(noise // len(line)):
    sys.stderr.buffer.write(line)
sys.stderr.buffer.flush()
time.sleep(delay)
ready = time.time()
sys.stderr.write(f"slow_start agent ready after {delay} s\n")
sys.stderr.flush()
for text in sys.stdin:
    message = json.loads(text)
    if "id" not in message or "method" not in message:
        continue
    result: dict[str, object] = {"_meta": {"pid": os.getpid(), "ready": ready}}
    if message["method"] == "initialize":
        result |= {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
