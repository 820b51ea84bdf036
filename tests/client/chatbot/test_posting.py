"""A thread's post interrupted by a kill is not posted twice: its transaction id was kept.

In-process against the real Synapse: a thread's round posts a slot, then the state file
is left as a kill between the post and its record leaves it (the transaction id kept, the
event not); a restarted thread's round posts the same transaction again, which the
homeserver answers with the first event, and edits it to the words it has now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from relay.chat.access import Access
from relay.chat.rules import Policy
from relay.chat.turns import TurnView
from relay.client.chatbot.matrix import MatrixSession
from relay.client.chatbot.showing import Answerable, Showing
from relay.client.chatbot.state import State, ThreadKind
from relay.observe import logs
from relay.observe.logs import Logger
from tests.support.matrix import person
from tests.support.synapse import Homeserver

pytestmark = pytest.mark.timeout(60)


@dataclass
class ThreadsBot:
    """What a thread needs of the bot, and no more."""

    matrix: MatrixSession
    state: State
    access: Access
    log: Logger
    policy: Policy = field(default_factory=Policy)
    edit_interval: float = 0.05

    def owns_request(self, event_id: str, owner: Answerable | None) -> None:
        """No reactions are routed in this test."""

    async def levels(self, room: str) -> dict[str, Any] | None:
        """No power levels are read in this test."""
        return None


def words(*chunks: str) -> TurnView:
    view = TurnView()
    view.start_turn()
    for chunk in chunks:
        view.update(
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": chunk}}
        )
    return view


async def test_a_post_sent_before_a_kill_is_not_posted_again(
    homeserver: Homeserver, tmp_path: Path
) -> None:
    """The slot's post, its event not kept, is sent again as the same transaction: the
    thread has one message for it, edited to the words the restarted thread has."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    state = State(str(tmp_path / "chat.sqlite"))
    log = logs.get_logger("test")
    async with (
        person(homeserver, alice) as lead,
        MatrixSession(homeserver.url, bot.user_id, bot.token, log) as matrix,
    ):
        room = await lead.create_room([bot.user_id])
        await matrix.join(room)
        root = await lead.say(room, "the thread's root")
        state.add_thread(root, room, ThreadKind.SESSION, "ws://x/acp", 1.0)
        first = Showing(ThreadsBot(matrix, state, Access(), log), room, root, words("Hello"))
        await first.round()
        [(slot, event_id)] = state.slots(root).items()
        state.db.execute("UPDATE slots SET event_id = '' WHERE slot = ?", (slot,))  # the kill
        again = Showing(
            ThreadsBot(matrix, state, Access(), log), room, root, words("Hello", " again")
        )
        await again.round()
        assert state.slots(root) == {slot: event_id}
        thread = await lead.until_thread(
            room, root, lambda t: any("Hello again" in s.body for s in t)
        )
        assert [s.body for s in thread if "Hello" in s.body] == ["Hello again"]
        assert [s.event_id for s in thread if "Hello" in s.body] == [event_id]
    state.close()
