"""Resume time (issue 12): from the network coming back to the first replayed message.

``acp-relay connect`` (its reconnect, :mod:`relay.client.link.resuming`) talks to a relay running
the streaming agent through a TCP proxy that can cut (:mod:`tests.support.netcut`). Each
trial:

1. the editor sends a prompt that the agent answers after ``DELAY`` seconds;
2. the proxy resets every connection and refuses new ones: the network is down; connect
   retries with its backoff, the agent writes its answer into the relay's replay window;
3. after ``OUTAGE`` seconds the proxy accepts again: the network is back;
4. the clock stops when the first replayed message reaches connect's stdout.

Trials are ``SETTLE_SECONDS`` apart: connect takes a socket lost sooner after its resume
for a relay that welcomes then drops, and resumes ever more slowly (a flap pause).

Reported per trial: network back -> first message; the proxy's first accepted connection
after it (connect's next attempt, which its backoff step decides) -> first message, that
is the resume itself; and the backoff wait in between.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from typing import Any

from relay.core.windows import SETTLE_SECONDS
from tests.bench.peers import SECRET, relay_argv, wait_for_port, with_group_killed
from tests.support.connect import editor
from tests.support.env import clean_env
from tests.support.netcut import NetCut
from tests.support.sockets import free_port

DELAY = 0.3  # seconds before the agent answers: it answers while the network is down
OUTAGE = 1.0  # seconds the network stays down
UPDATES = 50  # notifications in each answer
TICKETS = shlex.join([
    sys.executable, "-c",
    "from relay.commands.ticket import fresh_ticket; "
        f"print(fresh_ticket({SECRET!r}, subject='bench'))",
])  # fmt: skip
CONNECT_ARGS = ("--ticket-command", TICKETS, "--ping-interval", "1", "--ping-timeout", "1")


class DownableCut(NetCut):
    """A NetCut that notes when it first accepts a connection again after the network is back."""

    def __init__(self, target_port: int) -> None:
        super().__init__(target_port)
        self.accepted_at: float | None = None  # first connection accepted since up()

    def cut(self) -> None:
        """The network goes: every connection reset, new ones closed at once."""
        self.refusing = True
        self.reset()

    def up(self) -> None:
        self.accepted_at = None
        self.refusing = False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.refusing and self.accepted_at is None:
            self.accepted_at = time.monotonic()
        await super()._accept(reader, writer)


def _prompt(request_id: int) -> bytes:
    params = {"sessionId": "sess_bench", "prompt": [], "updates": UPDATES, "delay": DELAY}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": params}
    return json.dumps(message).encode()


async def _trials(port: int, count: int) -> list[dict[str, float]]:
    got: list[dict[str, float]] = []
    net = DownableCut(port)
    async with net:
        url = f"ws://127.0.0.1:{net.port}/acp"
        async with editor(url, *CONNECT_ARGS, env=clean_env()) as ed:
            await ed.send(_prompt(-1))  # connected, the agent up: the trials can start
            for _ in range(UPDATES + 1):
                await ed.receive_line()
            for trial in range(count):
                if trial:  # an outage of its own: a loss before the resume settled is a flap
                    await asyncio.sleep(SETTLE_SECONDS + 0.5)
                await ed.send(_prompt(trial))
                await asyncio.sleep(DELAY / 3)  # the prompt reaches the agent before the cut
                net.cut()
                await asyncio.sleep(OUTAGE)
                back = time.monotonic()
                net.up()
                first = await ed.receive_line()
                arrived = time.monotonic()
                for _ in range(UPDATES):  # the rest of the answer, and the answer itself
                    await ed.receive_line()
                if b"session/update" not in first:
                    raise RuntimeError(f"the first message after the resume was {first[:80]!r}")
                accepted = net.accepted_at or back
                got.append({
                    "back_to_first_ms": (arrived - back) * 1000,
                    "resume_ms": (arrived - accepted) * 1000,
                    "backoff_wait_ms": (accepted - back) * 1000,
                })  # fmt: skip
            await ed.close_stdin()
    return got


def measure(trials: int, streamer: str) -> dict[str, Any]:
    """``trials`` outages; p50 and worst of each figure, in ms."""
    port = free_port()
    env = dict(os.environ, ACP_RELAY_SECRET=SECRET)
    argv = relay_argv(port, streamer, "--resume-grace", "30")
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)  # fmt: skip
    try:
        wait_for_port(port)
        got = asyncio.run(asyncio.wait_for(_trials(port, trials), 30 + trials * 10))
    except (Exception, TimeoutError) as exc:  # a failed trial is a figure: say why
        return {"error": f"{type(exc).__name__}: {exc}"[-600:]}
    finally:
        with_group_killed(process)
    out: dict[str, Any] = {"trials": len(got), "outage_s": OUTAGE}
    for key in ("back_to_first_ms", "resume_ms", "backoff_wait_ms"):
        values = sorted(trial[key] for trial in got)
        out[f"{key.removesuffix('_ms')}_p50_ms"] = values[len(values) // 2]
        out[f"{key.removesuffix('_ms')}_max_ms"] = values[-1]
    return out
