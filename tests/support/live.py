"""A relay in this event loop on 127.0.0.1:0, and the tickets the tests sign for it."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from relay.commands.ticket import fresh_ticket
from relay.config.defaults import (
    MAX_CONNECTIONS,
    MAX_MESSAGE_BYTES,
    OPEN_TIMEOUT,
    PING_INTERVAL,
    PING_TIMEOUT,
    TICKET_TTL,
)
from relay.core.admission import Policy
from relay.server.serving import Relay, RelayConfig
from tests.support.agents import ECHO_AGENT
from tests.support.waiting import until

SECRET = "test-secret-0123456789abcdef-0123456789"  # 39 bytes: no short-secret warning


def make_ticket(
    secret: str = SECRET,
    *,
    subject: str = "tester",
    audience: str | None = None,
    now: float | None = None,
    ttl: float | None = None,
    watch: str | None = None,
    may_answer: bool = False,
) -> str:
    """A fresh ticket signed with ``secret`` (a watcher's, with ``watch``)."""
    return fresh_ticket(
        secret,
        now=now,
        subject=subject,
        audience=audience,
        ttl=ttl,
        watch=watch,
        may_answer=may_answer,
    )


def relay_config(agent: Sequence[str] = ECHO_AGENT, **changes: Any) -> RelayConfig:
    """A RelayConfig for tests: loopback, port 0, short grace; ``changes`` override fields."""
    policy_fields = {"secrets", "ticket_ttl", "audience", "allow_origins", "max_connections"}
    policy = Policy(
        secrets=(SECRET,),
        ticket_ttl=TICKET_TTL,
        audience=None,
        allow_origins=(),
        max_connections=MAX_CONNECTIONS,
    )
    policy = replace(policy, **{k: v for k, v in changes.items() if k in policy_fields})
    config = RelayConfig(
        host="127.0.0.1",
        port=0,
        path="/acp",
        agent_argv=tuple(agent),
        workspace=os.getcwd(),
        agent_env=dict(os.environ),
        policy=policy,
        max_message_bytes=MAX_MESSAGE_BYTES,
        ping_interval=PING_INTERVAL,
        ping_timeout=PING_TIMEOUT,
        kill_grace=1.0,
        open_timeout=OPEN_TIMEOUT,
    )
    return replace(config, **{k: v for k, v in changes.items() if k not in policy_fields})


@dataclass
class LiveRelay:
    """A relay listening on 127.0.0.1 with its URL."""

    relay: Relay
    base: str

    def url(self, ticket: str | None = None, path: str = "/acp") -> str:
        """The WebSocket URL, with ``?ticket=`` when a ticket is given."""
        return f"{self.base}{path}" + (f"?ticket={ticket}" if ticket else "")

    def ticket_url(self, **kwargs: Any) -> str:
        return self.url(make_ticket(**kwargs))


@asynccontextmanager
async def live_relay(
    agent: Sequence[str] = ECHO_AGENT,
    clock: Callable[[], float] = time.time,
    **changes: Any,
) -> AsyncIterator[LiveRelay]:
    """Run a relay in this event loop for the duration of the block, then shut it down."""
    relay = Relay(relay_config(agent, **changes), clock=clock)
    await relay.start()
    try:
        yield LiveRelay(relay, f"ws://127.0.0.1:{relay.port}")
    finally:
        await relay.shutdown()


async def until_idle(relay: Relay, seconds: float = 5) -> bool:
    """Until ``relay`` holds no connection, for at most ``seconds``."""
    return await until(
        lambda: not relay.connections,
        seconds=seconds,
        what=lambda: f"no connections (still {len(relay.connections)})",
    )


async def until_detached(live: LiveRelay, count: int = 1, seconds: float = 10) -> bool:
    """Until ``count`` connections of ``live`` wait detached for a resume."""
    return await until(
        lambda: live.relay.busy_report()["detached"] == count,
        seconds=seconds,
        what=lambda: f"{count} detached in {live.relay.busy_report()}",
    )
