"""The bot's Matrix session against a real Synapse: its rate limits honoured, its outages
waited out with backoff and said in the log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.agents import CHATTY, DEMO_AGENT
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


async def test_a_refused_edit_costs_its_thread_a_log_line_never_the_bot(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A moderator sets the bot's power level to -1 while a request waits: the approver's
    tap still answers the agent, the edit's M_FORBIDDEN is logged, the bot runs on; once
    allowed again, the thread's next prompt is answered."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room], approvers=[alice.user_id]
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            thread = await lead.until_thread(
                room,
                root,
                lambda t: any(len(s.reactions) == 2 for s in t if "Permission requested" in s.body),
            )
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            await lead.set_power(room, bot.user_id, -1)
            await lead.react(room, request.event_id, "1️⃣")
            await running.logged("permission request answered")
            refused = await running.logged("the homeserver refused a message")
            assert refused[0]["errcode"] == "M_FORBIDDEN"
            await lead.set_power(room, bot.user_id, 0)
            await lead.say(room, "hello", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "End of turn"))
            assert running.proc.returncode is None
            assert await running.stop() == 0
        assert not any("Traceback" in line for line in running.lines)


async def test_a_revoked_token_ends_the_bot_with_one_line(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """The bot's token logged out while it runs: it stops with exit 1 and one line saying
    the token is no longer accepted and what to do, no traceback; its threads are kept."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room], approvers=[alice.user_id]
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} hello")
            await lead.until_thread(room, root, lambda t: has(t, "End of turn"))
            homeserver.logout(bot.token)
            async with asyncio.timeout(60):
                status = await running.proc.wait()
                await running.reader
        assert status == 1
        said = [line for line in running.lines if not line.startswith("{")]
        assert said == [
            "acp-relay: the homeserver no longer accepts the bot's access token "
            "(M_UNKNOWN_TOKEN): log the bot in again and put the new token in --token-file "
            "(or $ACP_RELAY_MATRIX_TOKEN)"
        ]
        assert len(live.relay.connections) == 1  # kept for the next start to resume
