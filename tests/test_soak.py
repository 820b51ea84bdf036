"""Soak: the long versions of the leak and abuse tests of tests/test_faults.py.

Skipped by default; run with ``pytest --soak tests/test_soak.py -s`` (or with
``ACP_RELAY_SOAK=1``). Each test is bounded in count and time and talks to a relay on
127.0.0.1 only; the figures are printed and written to tests/artifacts/reliability.json.
"""

from __future__ import annotations

import asyncio
import json
import random
import shlex
import sys
import time
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.support.agents import CHOOSER, CRASH_MID_LINE
from tests.support.audit import LogAudit
from tests.support.cli import serve
from tests.support.env import secret_env
from tests.support.figures import record
from tests.support.http import exchange, status_of, upgrade_request
from tests.support.processes import fd_count, rss_kib, zombies
from tests.support.reliability import assert_no_leak, connect_disconnect_cycles
from tests.support.waiting import until

# Every log line the soak produces is searched for tickets and secrets (the audit).
pytestmark = [
    pytest.mark.soak,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("audit", "audit_figures"),
]


async def test_1000_connect_disconnect_cycles_leak_nothing(audit: LogAudit) -> None:
    """1,000 sessions (clean close, TCP abort, refused): no zombie, no fd, task or RSS growth."""
    async with asyncio.timeout(300):
        figures = await connect_disconnect_cycles(audit, 1000, "leaks, 1,000 cycles (soak)")
    assert_no_leak(figures, rss_bound_kib=8192)


AGENTS = {
    "echo": ["cat"],
    "crash": [sys.executable, "-c", CRASH_MID_LINE, "3"],
    "exit": [sys.executable, "-c", "import sys; sys.exit(5)"],
    "deaf": [sys.executable, "-c", "import time; time.sleep(60)"],
}


async def test_concurrent_churn_with_faulty_agents_leaks_nothing(audit: LogAudit) -> None:
    """8 clients at once, 960 sessions of echoing, crashing, exiting and deaf agents: no leak."""
    workers, per_worker, rounds = 8, 40, 3
    async with serve(
        "--agent",
        shlex.join(CHOOSER),
        "--kill-grace",
        "0.3",
        "--max-connections",
        "64",  # deaf sessions count until their agent is stopped, a second or so after
        "--log-level",
        "debug",
        env=secret_env(),
    ) as relay:
        audit.watch(relay.stderr)
        outcomes: dict[str, int] = {}

        async def session(kind: str) -> None:
            async with connect(relay.ticket_url(audit.ticket())) as ws:
                await ws.send(json.dumps({"exec": AGENTS[kind]}))
                if kind == "echo":
                    for n in range(20):
                        await ws.send(f'{{"n":{n}}}')
                        assert await ws.recv() == f'{{"n":{n}}}'
                    outcomes["echo"] = outcomes.get("echo", 0) + 1
                    return
                if kind == "deaf":
                    for _ in range(4):
                        await ws.send("x" * 65536)
                    ws.transport.abort()
                    outcomes["deaf, then gone"] = outcomes.get("deaf, then gone", 0) + 1
                    return
                try:
                    while True:
                        await ws.recv()
                except ConnectionClosed:
                    outcome = f"{kind}: {ws.close_code} {ws.close_reason}"
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1

        async def worker(seed: int) -> None:
            chance = random.Random(seed)
            for _ in range(per_worker):
                if chance.random() < 0.1:
                    answer = await exchange(relay.port, upgrade_request("/acp?ticket=x.y.z"))
                    assert status_of(answer) == 401
                    continue
                kind = chance.choice(["echo", "echo", "crash", "exit", "deaf"])
                async with asyncio.timeout(10):
                    await session(kind)

        await session("echo")
        await relay.until_idle()
        fds = fd_count(relay.pid)
        rss: list[int] = [rss_kib(relay.pid)]
        started = time.monotonic()
        for round_ in range(rounds):  # the first round grows the allocator's pools
            async with asyncio.timeout(300):
                await asyncio.gather(*(worker(round_ * workers + n) for n in range(workers)))
            await relay.until_idle(20)
            rss.append(rss_kib(relay.pid))
        took = time.monotonic() - started
        await until(lambda: fd_count(relay.pid) <= fds, seconds=5, what="fds back")
        figures: dict[str, Any] = {
            "sessions": rounds * workers * per_worker,
            "seconds": round(took, 1),
            "outcomes": dict(sorted(outcomes.items())),
            "fds_before": fds,
            "fds_after": fd_count(relay.pid),
            "rss_kib_before_and_after_each_round": rss,
            "zombies_after": len(zombies(relay.pid)),
            "children_after": len(relay.agent_states()),
        }
    record("concurrent churn with faulty agents (soak)", **figures)
    assert figures["zombies_after"] == figures["children_after"] == 0
    assert figures["fds_after"] == figures["fds_before"]
    # The first round grows the allocator's pools; after it, no growth beyond small bounds.
    assert rss[-1] - rss[-2] < 2048
    assert rss[-1] - rss[1] < 8192
    assert set(outcomes) <= {
        "echo",
        "deaf, then gone",
        "crash: 1011 agent exited with status 3",
        "exit: 1011 agent exited with status 5",
    }
