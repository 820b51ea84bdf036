"""An agent that answers each request after ``slow_answer.py SECONDS``, with an empty result."""

import json
import sys
import time

delay = float(sys.argv[1])
for line in sys.stdin:
    message = json.loads(line)
    time.sleep(delay)
    if "id" in message and "method" in message:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}) + "\n")
        sys.stdout.flush()
