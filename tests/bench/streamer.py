"""The benchmark's streaming agent: answers each prompt with a burst of ACP notifications.

For every line on stdin that is a request (it has an ``id``), it writes
``params.updates`` ``session/update`` notifications of about ``params.size`` bytes
(an agent streaming tokens), numbered from 0 in ``text``, then the request's answer
(``{"stopReason":"end_turn"}``), as fast as its stdout takes them; after
``params.delay`` seconds, if given. Lines without an
``id`` (notifications) are ignored. It is built to cost the agent side next to nothing
(the notifications are made once, written in large blocks), so that what is measured
is the server between it and the client.

Run by the benchmark as ``python streamer.py``; standard library only.
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


def notification(number: int, size: int) -> bytes:
    """One ``session/update`` line (newline included) of about ``size`` bytes."""
    text = f"{number:07d} "
    pad = max(0, size - len(HEAD) - len(MIDDLE) - len(TAIL) - len(text))
    return (HEAD + MIDDLE + text + "x" * pad + TAIL).encode()


def answer(request_id: object) -> bytes:
    reply = {"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}}
    return json.dumps(reply, separators=(",", ":")).encode() + b"\n"


def stream(out: BinaryIO, updates: int, size: int) -> None:
    """Write ``updates`` notifications to ``out`` in blocks of about BLOCK bytes."""
    write = out.write
    block: list[bytes] = []
    held = 0
    for number in range(updates):
        line = notification(number, size)
        block.append(line)
        held += len(line)
        if held >= BLOCK:
            write(b"".join(block))
            block, held = [], 0
    if block:
        write(b"".join(block))


def main() -> int:
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(message, dict) or "id" not in message:
            continue
        params = message.get("params") or {}
        time.sleep(float(params.get("delay", 0)))
        stream(out, int(params.get("updates", 0)), int(params.get("size", 200)))
        out.write(answer(message["id"]))
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
