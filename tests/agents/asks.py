"""An agent that asks the client for permission, then says what it was answered.

Writes one ``session/request_permission`` request (id ``perm-1``), then reads stdin: a
response to it is reported as an ``answered`` notification carrying its result; any
other line is echoed back, so the client can see that the agent is alive.
"""

import json
import sys

ASK = {
    "jsonrpc": "2.0",
    "id": "perm-1",
    "method": "session/request_permission",
    "params": {
        "sessionId": "s-1",
        "toolCall": {"toolCallId": "t-1", "title": "Write notes.md", "kind": "edit"},
        "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
    },
}
sys.stdout.write(json.dumps(ASK) + "\n")
sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    if message.get("id") == "perm-1" and "result" in message:
        answer = {"jsonrpc": "2.0", "method": "answered", "params": message["result"]}
        sys.stdout.write(json.dumps(answer) + "\n")
    else:
        sys.stdout.write(line)
    sys.stdout.flush()
