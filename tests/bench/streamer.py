"""The benchmark's streaming agent: answers each prompt with a burst of ACP notifications.

For every line on stdin that is a request (it has an ``id``), it writes
``params.updates`` ``session/update`` notifications of about ``params.size`` bytes
(an agent streaming tokens), numbered from 0 in ``text``, then the request's answer
(``{"stopReason":"end_turn"}``), as fast as its stdout takes them; after
``params.delay`` seconds, if given. Lines without an
``id`` (notifications) are ignored. It is built to cost the agent side next to nothing
(the notifications are made once, written in large blocks), so that what is measured
is the server between it and the client.

``params.mode`` says what each notification is:

- ``text`` (the default): an ``agent_message_chunk`` of text, which the relay never
  parses;
- ``tool``: a ``tool_call_update`` whose ``locations[0].path`` is a file under the folder
  given as ``--box DIR`` (a box folder the relay's ``--cwd-map`` maps), which the relay
  translates to the editor's path in every notification; its number is in a text
  content block.

Run by the benchmark as ``python streamer.py [--box DIR]``; standard library only.
"""

from __future__ import annotations

import json
import sys
import time
from typing import BinaryIO

BLOCK = 1 << 16  # bytes per write to stdout
HEAD = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"sess_bench",'
MIDDLE = '"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"'
TAIL = '"}}}}\n'
TOOL_MIDDLE = '"update":{"sessionUpdate":"tool_call_update","toolCallId":"call_bench","locations":'
TOOL_CONTENT = ',"content":[{"type":"content","content":{"type":"text","text":"'
TOOL_TAIL = '"}}]}}}\n'


def notification(number: int, size: int, box: str | None = None) -> bytes:
    """One ``session/update`` line (newline included) of about ``size`` bytes: a text chunk,
    or with ``box`` a tool call update located at a file under ``box``."""
    text = f"{number:07d} "
    if box is None:
        middle, tail = MIDDLE, TAIL
    else:
        location = json.dumps([{"path": f"{box}/project/src/module_{number % 1000:03d}.py"}])
        middle, tail = TOOL_MIDDLE + location.replace(" ", "") + TOOL_CONTENT, TOOL_TAIL
    pad = max(0, size - len(HEAD) - len(middle) - len(tail) - len(text))
    return (HEAD + middle + text + "x" * pad + tail).encode()


def answer(request_id: object) -> bytes:
    reply = {"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}}
    return json.dumps(reply, separators=(",", ":")).encode() + b"\n"


def stream(out: BinaryIO, updates: int, size: int, box: str | None = None) -> None:
    """Write ``updates`` notifications to ``out`` in blocks of about BLOCK bytes."""
    write = out.write
    block: list[bytes] = []
    held = 0
    for number in range(updates):
        line = notification(number, size, box)
        block.append(line)
        held += len(line)
        if held >= BLOCK:
            write(b"".join(block))
            block, held = [], 0
    if block:
        write(b"".join(block))


def box_folder(argv: list[str]) -> str | None:
    """The folder of ``--box DIR``, if given."""
    return argv[argv.index("--box") + 1] if "--box" in argv else None


def main() -> int:
    out = sys.stdout.buffer
    box = box_folder(sys.argv[1:])
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(message, dict) or "id" not in message:
            continue
        params = message.get("params") or {}
        time.sleep(float(params.get("delay", 0)))
        located = box if params.get("mode") == "tool" else None
        if params.get("mode") == "tool" and box is None:
            raise SystemExit("streamer.py: the tool mode needs --box DIR")
        stream(out, int(params.get("updates", 0)), int(params.get("size", 200)), located)
        out.write(answer(message["id"]))
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
