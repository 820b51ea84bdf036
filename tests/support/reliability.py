"""Workloads of the fault suite (tests/test_faults.py) that its soak runs longer.

A relay subprocess whose stderr the log audit searches, connect/disconnect cycles against
it measured from ``/proc``, and the check that nothing leaked. Loopback only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.client import connect

from tests.support.audit import LogAudit
from tests.support.cli import RelayRun, serve
from tests.support.env import secret_env
from tests.support.figures import record
from tests.support.http import exchange, status_of, upgrade_request
from tests.support.processes import fd_count, rss_kib, zombies
from tests.support.waiting import until

SERVE_GRACE = 0.5  # --kill-grace of relay_process


@asynccontextmanager
async def relay_process(audit: LogAudit, *args: str) -> AsyncIterator[RelayRun]:
    """``acp-relay serve --agent cat`` as a subprocess, its stderr searched by the audit."""
    flags = ("--agent", "cat", "--kill-grace", str(SERVE_GRACE), *args)
    async with serve(*flags, env=secret_env()) as relay:
        audit.watch(relay.stderr)
        yield relay


async def connect_disconnect_cycles(audit: LogAudit, cycles: int, name: str) -> dict[str, Any]:
    """``cycles`` connections against a real ``acp-relay serve``; what the relay holds after.

    Each cycle opens a socket with a fresh ticket, carries a message both ways through
    ``cat`` and ends it: a clean close, a TCP abort, or (every 10th) a refused ticket.
    Fds, RSS, tasks (the relay's "relay state" debug line) and child processes are measured
    once the relay is idle after a warm-up, and again at the end; zombies are also looked
    for every 50 cycles.
    """
    async with relay_process(audit, "--log-level", "debug") as relay:

        async def cycle(n: int) -> None:
            if n % 10 == 9:
                answer = await exchange(relay.port, upgrade_request("/acp?ticket=bad.ticket.x"))
                assert status_of(answer) == 401
                return
            ws = await connect(relay.ticket_url(audit.ticket()))
            await ws.send(f'{{"n":{n}}}')
            async with asyncio.timeout(5):
                assert await ws.recv() == f'{{"n":{n}}}'
            if n % 4 == 3:
                ws.transport.abort()
            else:
                await ws.close()

        async def tasks() -> int:
            """The relay's tasks at the end of a clean session: the least of three, so that
            the handlers of other connections (e.g. GET /busy) still finishing do not count."""
            counts = []
            for _ in range(3):
                logged = len(relay.events("relay state"))
                await cycle(0)
                states = await relay.wait_event("relay state", logged + 1)
                counts.append(int(states[-1]["tasks"]))
            return min(counts)

        for n in range(20):  # warm-up: lazily created resources, allocator pools
            await cycle(n)
        await relay.until_idle()
        before = {"tasks": await tasks(), "fds": fd_count(relay.pid), "rss_kib": rss_kib(relay.pid)}
        seen_zombies = 0
        started = time.monotonic()
        for n in range(cycles):
            await cycle(n)
            if n % 50 == 49:
                seen_zombies = max(seen_zombies, len(zombies(relay.pid)))
        took = time.monotonic() - started
        await relay.until_idle()
        # closed transports give their fds back a moment later
        await until(lambda: fd_count(relay.pid) <= before["fds"], seconds=5, what="fds back")
        after = {"tasks": await tasks(), "fds": fd_count(relay.pid), "rss_kib": rss_kib(relay.pid)}
        figures = {
            "cycles": cycles,
            "cycles_per_s": round(cycles / took, 1),
            "fds_before": before["fds"],
            "fds_after": after["fds"],
            "rss_kib_before": before["rss_kib"],
            "rss_kib_after": after["rss_kib"],
            "rss_growth_kib": after["rss_kib"] - before["rss_kib"],
            "tasks_before": before["tasks"],
            "tasks_after": after["tasks"],
            "zombies_seen_during": seen_zombies,
            "zombies_after": len(zombies(relay.pid)),
            "children_after": len(relay.agent_states()),
        }
    record(name, **figures)
    return figures


def assert_no_leak(figures: dict[str, Any], rss_bound_kib: int = 4096) -> None:
    """The relay holds after the cycles what it held before them, RSS within a small bound."""
    assert figures["zombies_after"] == 0
    assert figures["children_after"] == 0
    assert figures["fds_after"] == figures["fds_before"]
    assert figures["tasks_after"] == figures["tasks_before"] > 0
    assert figures["rss_growth_kib"] < rss_bound_kib
