"""relay.server.connections.steps: every step type has its one place, at once or in order."""

from __future__ import annotations

from typing import get_args

import pytest

from relay.core.connectionevents import (
    AT_ONCE,
    AdmitWatcher,
    CloseSocket,
    Detach,
    End,
    FenceSocket,
    GraceExpired,
    RefuseSocket,
    RefuseWatcher,
    Step,
    StopAgent,
)
from relay.server.connections.steps import CarriesSteps

SAMPLES: dict[type, Step] = {
    Detach: Detach("lost", 30.0),
    GraceExpired: GraceExpired(30.0),
    RefuseWatcher: RefuseWatcher(1013, "too many watchers"),
    StopAgent: StopAgent(),
    CloseSocket: CloseSocket(1000, "bye"),
    AdmitWatcher: AdmitWatcher(),
    FenceSocket: FenceSocket(1),
    RefuseSocket: RefuseSocket(4404, "this relay no longer has the connection"),
}


def sample(kind: type) -> Step:
    return SAMPLES.get(kind) or kind()


@pytest.mark.parametrize("kind", get_args(Step), ids=lambda kind: kind.__name__)
async def test_each_step_type_has_one_place(kind: type) -> None:
    """A step the lifecycle carries out at once is refused by the in-order carrier, and
    every other (End aside, which ends the carrying) is refused by the at-once one: no
    type falls through unhandled, nor is handled twice."""
    bare = CarriesSteps()
    if issubclass(kind, AT_ONCE) or kind is End:
        with pytest.raises(AssertionError):
            await bare._carry(sample(kind), None, None)
    else:
        with pytest.raises(AssertionError, match="is not a step carried out at once"):
            bare._now(sample(kind))
