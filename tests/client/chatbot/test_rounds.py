"""A thread's rounds in the room: a post interrupted by a kill is not posted twice, and the
thread as a person's client renders it.

In-process against the real Synapse: a thread's round posts a slot, then the state file
is left as a kill between the post and its record leaves it (the transaction id kept, the
event not); a restarted thread's round posts the same transaction again, which the
homeserver answers with the first event, and edits it to the words it has now.

The picture: the chatty agent's turn through the relay and the bot into Synapse, answered
by an approver; the thread's events as the approver's client received them, rendered as a
client's thread panel (:mod:`tests.support.threadpage`) and screenshotted with Chromium.
``docs/chat-thread.png`` is written when missing or with ``ACP_RELAY_UPDATE_SCREENSHOTS=1``;
the screenshot always goes to tests/artifacts/.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from relay.chat.access import Access
from relay.chat.rules import Policy
from relay.chat.turns import TurnView
from relay.client.chatbot.matrix import MatrixSession
from relay.client.chatbot.rounds import Answerable, Showing
from relay.client.chatbot.store import State, ThreadKind
from relay.observe import logs
from relay.observe.logs import Logger
from tests.support.agents import CHATTY
from tests.support.audit import LogAudit
from tests.support.browser import ROOT, browser, require_chromium, save_artifact
from tests.support.chatbot import chat_bot
from tests.support.live import live_relay
from tests.support.matrix import person
from tests.support.synapse import Homeserver
from tests.support.threadpage import render
from tests.system import require_packages

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


DOC_SHOT = ROOT / "docs" / "chat-thread.png"


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_picture_of_a_thread_as_the_approver_sees_it(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """The thread renders with its plan, thought, tool line, decided request with the
    approver's keycap among the bot's, words and end; the picture is taken."""
    chromium = require_chromium()
    require_packages("fonts-noto-color-emoji")  # the keycaps and marks, in colour
    bot, alice = homeserver.register("relay-bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(CHATTY) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
                            approvers=[alice.user_id]) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} run the tests and fix what fails")
            thread = await lead.until_thread(room, root, lambda t: any(
                len(s.reactions) == 2 for s in t if "Permission requested" in s.body))  # fmt: skip
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            await lead.react(room, request.event_id, "1️⃣")
            thread = await lead.until_thread(
                room, root, lambda t: any("End of turn" in s.body for s in t)
            )
            await running.stop()
    names = {bot.user_id: "relay-bot", alice.user_id: "Alice"}
    page = render(lead.event(room, root), thread, alice.user_id, names)
    async with browser(chromium, tmp_path / "profile") as context:
        tab = await context.new_page()
        await tab.set_content(page)
        shown = await tab.inner_text(".panel")
        png = await tab.screenshot(full_page=True)
    for text in ("☑ test", "💭 Thinking", "Run pytest -q · execute", "chosen by",
                 "I ran the tests: <b>42 passed</b> @room", "End of turn: end_turn"):  # fmt: skip
        assert text in shown
    save_artifact(png, "chat-thread.png")
    if not DOC_SHOT.exists() or os.environ.get("ACP_RELAY_UPDATE_SCREENSHOTS") == "1":
        DOC_SHOT.write_bytes(png)
