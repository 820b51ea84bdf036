"""The chat benchmark's agent: asks permission again and again, and says when it was answered.

Plain JSON lines. A prompt ``bench N`` makes N permission requests, one after the other:
request ``i`` is titled ``bench i T`` (T: this machine's monotonic clock when it is
written); once answered, one ``agent_message_chunk`` says ``answered i T`` (T: when the
answer was read) on a line of its own. Then ``end_turn``.
"""

import json
import sys
import time


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read() -> dict[str, object]:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit(0)
    message = json.loads(line)
    assert isinstance(message, dict)
    return message


OPTIONS = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"},
           {"optionId": "reject", "name": "Reject", "kind": "reject_once"}]  # fmt: skip
while True:
    message = read()
    method, ident = message.get("method"), message.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": 1}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": ident, "result": {"sessionId": "bench"}})
    elif method == "session/prompt":
        params = message["params"]
        assert isinstance(params, dict)
        count = int(str(params["prompt"][0]["text"]).split()[-1])
        for i in range(count):
            title = f"bench {i} {time.monotonic():.6f}"
            send({"jsonrpc": "2.0", "id": f"ask-{i}", "method": "session/request_permission",
                  "params": {"sessionId": "bench", "options": OPTIONS,
                             "toolCall": {"toolCallId": f"t-{i}", "title": title,
                                          "kind": "execute"}}})  # fmt: skip
            while read().get("id") != f"ask-{i}":
                pass
            said = f"answered {i} {time.monotonic():.6f}\n"
            chunk = {"sessionUpdate": "agent_message_chunk",
                     "content": {"type": "text", "text": said}}  # fmt: skip
            send({"jsonrpc": "2.0", "method": "session/update",
                  "params": {"sessionId": "bench", "update": chunk}})  # fmt: skip
        send({"jsonrpc": "2.0", "id": ident, "result": {"stopReason": "end_turn"}})
