"""The lifecycle's steps carried out for a connection: each step type has its case.

I/O for :class:`relay.core.lifecycle.Lifecycle`'s steps, pulled from its one list: those
about the watchers, the log and sockets other than the controller are carried out as their
event is told (:meth:`CarriesSteps._now`); those about the agent and the controlling
socket in order, each once the one before it is done (:meth:`CarriesSteps._carry`). Both
are exhaustive matches over the step types, so that a new step type without its case
fails the type check rather than being dropped. Mixed into
:class:`relay.server.connections.connection.Connection`, whose state it acts on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import assert_never

from relay.config.resolved import RelayConfig
from relay.core.connectionevents import (
    AdmitWatcher,
    AgentStopped,
    CloseSocket,
    CloseWatchers,
    Detach,
    End,
    Event,
    FenceSocket,
    Flushed,
    FlushOutput,
    GraceExpired,
    KeptRunning,
    RefuseSocket,
    RefuseWatcher,
    Resumed,
    ShutdownWatchers,
    Step,
    StopAgent,
    StopChildren,
)
from relay.core.exits import Exit
from relay.core.lifecycle import Lifecycle
from relay.core.lifecyclestate import GOING_AWAY, SHUTTING_DOWN
from relay.core.watchprofile import DETACHED, RESUMED
from relay.observe.observer import ConnectionObserver
from relay.server.agents.process import AgentProcess
from relay.server.connections.attachments import Attachment
from relay.server.connections.carriers import Carrier
from relay.server.connections.sharing import Watchers
from relay.server.connections.waits import IdleClock, output_flushed

Answer = AdmitWatcher | RefuseWatcher | RefuseSocket
"""The lifecycle's answer to a socket arriving: a watcher, or a resume as the end came."""


class CarriesSteps:
    """What a connection does for each step (its state is the connection's)."""

    config: RelayConfig
    lifecycle: Lifecycle
    observer: ConnectionObserver
    watching: Watchers
    carrier: Carrier
    stdout_done: asyncio.Event
    agent_stdout: IdleClock

    # The connection's own, which the steps call.
    @property
    def controller(self) -> Attachment | None:
        raise NotImplementedError

    @property
    def exit(self) -> Exit | None:
        raise NotImplementedError

    def tell(self, event: Event) -> None:
        raise NotImplementedError

    def _answered(self, answer: Answer) -> None:
        raise NotImplementedError

    def _fence(self, socket: int) -> None:
        raise NotImplementedError

    def _spawn(self, work: Awaitable[None]) -> None:
        raise NotImplementedError

    async def _close(self, step: CloseSocket) -> None:
        raise NotImplementedError

    def _now(self, step: Step) -> None:
        match step:
            case Detach(why=why, grace=grace):
                self.observer.detached(why, grace)
                self.watching.notify(DETACHED, {"reason": why, "grace": grace})
            case Resumed():
                self.watching.notify(RESUMED, {})
            case ShutdownWatchers():
                self._spawn(self.watching.close_all(GOING_AWAY, SHUTTING_DOWN))
            case FenceSocket(socket=socket):
                self._fence(socket)
            case AdmitWatcher() | RefuseWatcher() | RefuseSocket():
                self._answered(step)  # for the arriving socket's own call: see attach(), watch()
            case _:
                raise AssertionError(f"{type(step).__name__} is not a step carried out at once")

    async def _carry(
        self, step: Step, agent: AgentProcess | None, children: asyncio.Task[None] | None
    ) -> None:
        """One step of the agent and the controlling socket, in order; every step type has
        its case (a new one that had none would fail the type check, not be dropped)."""
        match step:
            case StopAgent(eof_first=eof_first):
                assert agent is not None
                self.tell(
                    AgentStopped(await agent.stop(self.config.kill_grace, eof_first=eof_first))
                )
            case FlushOutput():
                assert children is not None
                await self._flush(children)
            case CloseSocket():
                await self._close(step)
            case CloseWatchers():
                await self.watching.close_all(*self.lifecycle.watchers_close())
            case KeptRunning():
                self.observer.stdout_closed()
            case GraceExpired(grace=grace):
                self.observer.expired(grace)
            case StopChildren():
                pass  # started as it came: see _carry_out
            case (
                Detach()
                | Resumed()
                | ShutdownWatchers()
                | AdmitWatcher()
                | RefuseWatcher()
                | FenceSocket()
                | RefuseSocket()
            ):
                raise AssertionError(f"{type(step).__name__} is carried out at once, in tell()")
            case End():
                raise AssertionError("End is the last step: _carry_out returns on it")
            case _:
                assert_never(step)

    async def _flush(self, children: asyncio.Task[None]) -> None:
        """The agent's last output to the controller, then the lifecycle told."""
        if self.controller is not None:
            await output_flushed(
                self.controller.ws,
                self.stdout_done,
                children,
                self.agent_stdout,
                grace=self.config.kill_grace,
                carrier=self.carrier,
                observer=self.observer,
            )
        self.tell(Flushed())
