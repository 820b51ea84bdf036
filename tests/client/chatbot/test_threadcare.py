"""relay.client.chatbot.threadcare: an idle session thread ended from the bot, against the
real Synapse (!answer N is in test_bot's commands test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.agents import DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import chat_bot
from tests.support.live import live_relay
from tests.support.matrix import has, person
from tests.support.synapse import Homeserver

pytestmark = pytest.mark.timeout(120)
IDLE = "no prompt and no agent activity for 2 s (--idle-timeout)"


async def test_an_idle_thread_is_ended_saying_so_and_a_running_turn_is_not_idle(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """--idle-timeout 2: a thread whose turn ended is ended after 2 s, its thread saying
    why; one whose turn runs all that while is not, until its turn is cancelled."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
            approvers=[alice.user_id], extra=["--idle-timeout", "2"],
        ) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            busy = await lead.say(room, f"{bot.user_id} /hang")
            await lead.until_thread(room, busy, lambda t: has(t, "waiting for session/cancel"))
            quiet = await lead.say(room, f"{bot.user_id} hello")
            await lead.until_thread(room, quiet, lambda t: has(t, "End of turn: end_turn"))
            await lead.until_thread(
                room, quiet, lambda t: has(t, f"Session ended by the bot: {IDLE}")
            )
            await running.logged("thread over")
            assert not has(lead.thread(room, busy), "Session ended")
            await lead.say(room, "!cancel", thread=busy)
            await lead.until_thread(room, busy, lambda t: has(t, "End of turn: cancelled", IDLE))
            await running.logged("thread over", count=2)
            await running.stop()
