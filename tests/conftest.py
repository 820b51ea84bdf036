"""Shared test helpers: misbehaving agents, process checks, a live relay on 127.0.0.1:0."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import uvloop

from relay import logs
from relay.admission import Policy
from relay.defaults import (
    MAX_CONNECTIONS,
    MAX_MESSAGE_BYTES,
    OPEN_TIMEOUT,
    PING_INTERVAL,
    PING_TIMEOUT,
    TICKET_TTL,
)
from relay.server import Relay, RelayConfig, fresh_ticket

AGENTS = Path(__file__).parent / "agents"
SECRET = "test-secret-0123456789abcdef"
DEMO_AGENT = (sys.executable, "-m", "relay.demo_agent")
ECHO_AGENT = (sys.executable, str(AGENTS / "echo.py"))

SOAK_ENV = "ACP_RELAY_SOAK"

logs.configure("debug", "json")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--soak`` runs the long reliability tests of tests/test_soak.py."""
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help=f"run the soak tests (tests/test_soak.py), also with {SOAK_ENV}=1",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"soak: long reliability test, skipped unless --soak or {SOAK_ENV}=1"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the soak tests unless asked for, saying how to run them."""
    if config.getoption("--soak") or os.environ.get(SOAK_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"soak test: run with `pytest --soak` or {SOAK_ENV}=1")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def child_states(pid: int) -> dict[int, str]:
    """Every child of ``pid`` (zombies included) and its state letter."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == pid:
            found[int(entry.name)] = stat[0]
    return found


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) child pids of ``pid``."""
    return [child for child, state in child_states(pid).items() if state not in ("Z", "X")]


class ChunkClient:
    """An ACP SDK client that keeps the text of the agent's ``agent_message_chunk``s."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    async def session_update(self, session_id: str, update: object, **_: object) -> None:
        content = getattr(update, "content", None)
        if getattr(update, "session_update", "") == "agent_message_chunk" and content:
            self.chunks.append(getattr(content, "text", ""))

    def __getattr__(self, name: str) -> object:
        raise AttributeError(name)


def make_ticket(
    secret: str = SECRET,
    *,
    subject: str = "tester",
    audience: str | None = None,
    now: float | None = None,
    ttl: float | None = None,
) -> str:
    """A fresh ticket signed with ``secret``."""
    return fresh_ticket(secret, now=now, subject=subject, audience=audience, ttl=ttl)


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


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Run every async test on uvloop, the loop the relay runs on in production."""
    return {"uvloop": uvloop.new_event_loop}
