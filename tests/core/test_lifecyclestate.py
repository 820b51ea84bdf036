"""relay.core.lifecyclestate: the rules of a connection's state, each broken by one state."""

from __future__ import annotations

import dataclasses

import pytest

from relay.core.connectionevents import SocketGone
from relay.core.exits import Exit
from relay.core.lifecyclestate import Agent, Phase, State

LOST = SocketGone(1, clean=False, why="lost (no close frame)", now=10.0)
EXITED = Exit(0)


@pytest.mark.parametrize(
    ("state", "broken"),
    [
        (State(), []),
        (State(phase=Phase.DETACHED, lost=LOST), []),
        (State(phase=Phase.FLUSHING, agent=Agent.EXITED, exit=EXITED, controller=1), []),
        (State(agent=Agent.QUIET), ["quiet_since is set while the agent is quiet, and only then"]),
        (State(quiet_since=1.0), ["quiet_since is set while the agent is quiet, and only then"]),
        (State(phase=Phase.DETACHED),
         ["lost is set while detached or flushing to a lost socket, only then"]),
        (State(phase=Phase.FLUSHING, lost=LOST),
         ["lost is set while detached or flushing to a lost socket, only then"]),
        (State(phase=Phase.FLUSHING_LOST, lost=LOST, controller=1),
         ["no controller after the controlling socket was lost"]),
        (State(phase=Phase.FLUSHING, agent=Agent.EXITED), ["an agent that exited has its exit"]),
        (State(phase=Phase.ATTACHED, agent=Agent.EXITED, exit=EXITED),
         ["an agent's exit ends the attached phase"]),
        (State(watchers=-1), ["watchers are counted from 0"]),
    ],
)  # fmt: skip
def test_each_rule_of_the_state(state: State, broken: list[str]) -> None:
    """Each field is set only in the phases where it means something; check names the rule."""
    assert state.check() == broken


def test_the_grace_counts_from_the_loss_while_detached_alone() -> None:
    """The loss a flush keeps for later starts no grace until the flush's end detaches."""
    assert State(phase=Phase.DETACHED, lost=LOST).detached_at == 10.0
    assert State(phase=Phase.FLUSHING_LOST, lost=LOST).detached_at is None
    assert State().detached_at is None


@pytest.mark.parametrize(
    ("controller", "last", "closing"), [(2, 2, 2), (None, 1, 1), (None, None, None)]
)
def test_the_close_line_names_the_controller_or_the_last_one(
    controller: int | None, last: int | None, closing: int | None
) -> None:
    """The connection's last line names the controlling socket, else the last that was."""
    assert State(controller=controller, last=last).closing_socket == closing


def test_the_state_is_replaced_never_changed() -> None:
    """A state is frozen: a transition makes a new one."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        State().watchers = 1  # type: ignore[misc]
