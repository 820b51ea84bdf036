"""The bot's Matrix session against a real Synapse: its rate limits honoured, its outages
waited out with backoff and said in the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.agents import CHATTY
from tests.support.audit import LogAudit
from tests.support.chatbot import chat_bot
from tests.support.live import live_relay
from tests.support.matrix import has, person
from tests.support.synapse import Homeserver

pytestmark = pytest.mark.timeout(120)


async def test_the_homeservers_rate_limit_answers_are_honoured_and_nothing_is_lost(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A bot limited to 2 messages a second (burst 3) gets real 429 M_LIMIT_EXCEEDED answers
    while showing a turn: it waits retry_after_ms, logs it, and the thread ends complete."""
    bot = homeserver.register("bot", limits=(2, 3))
    alice = homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(CHATTY) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room], approvers=[alice.user_id]
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} run the tests")
            thread = await lead.until_thread(
                room,
                root,
                lambda t: any(len(s.reactions) == 2 for s in t if "Permission requested" in s.body),
                seconds=40,
            )
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            await lead.react(room, request.event_id, "1️⃣")
            await lead.until_thread(
                room,
                root,
                lambda t: has(t, "End of turn: end_turn", "☑ test", "✅ completed", "42 passed"),
                seconds=60,
            )
            limited = await running.logged("rate-limited by the homeserver")
            assert all(r["retry_after_ms"] > 0 for r in limited)
            await running.stop()


async def test_a_homeserver_down_and_back_is_waited_for_with_backoff(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """Synapse stopped under the bot: the log says it is unreachable and that the bot retries
    with backoff, then that it is back; the bot then serves the room as before."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(CHATTY) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room], approvers=[alice.user_id]
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            homeserver.stop()
            try:
                [down] = await running.logged("homeserver unreachable: retrying with backoff")
            finally:
                homeserver.start()
            assert down["homeserver"] == homeserver.url
            await running.logged("homeserver reachable again", seconds=40)
            root = await lead.say(room, f"{bot.user_id} run the tests")
            await lead.until_thread(room, root, lambda t: has(t, "Permission requested"))
            await running.stop()
