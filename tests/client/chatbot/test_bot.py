"""The bot end to end: a real Synapse, a relay with the demo agent, the bot as a subprocess,
people as client-library sessions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.agents import DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import chat_bot
from tests.support.live import live_relay, until_idle
from tests.support.matrix import Seen, person
from tests.support.synapse import Homeserver

pytestmark = pytest.mark.timeout(120)


def has(thread: list[Seen], *texts: str) -> bool:
    """Every text is in some message of the thread."""
    return all(any(text in seen.body for seen in thread) for text in texts)


async def test_a_mention_opens_a_thread_where_the_team_answers_the_agent(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A mention opens a thread (one connection, one session); the turn shows a tool call and a
    permission request; a non-approver's reaction is ignored (said once); the approver's
    answers; the tool completes, the turn ends; a reply is the next prompt; !end ends it."""
    bot, alice, bob = (homeserver.register(name) for name in ("bot", "alice", "bob"))
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as other,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id])
        await other.join(room)
        async with chat_bot(homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
                            approvers=[alice.user_id]) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            thread = await lead.until_thread(room, root, lambda t: has(t, "Permission requested"))
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            assert "\n1️⃣ Allow (allow_once)\n2️⃣ Reject (reject_once)\n" in request.body
            await lead.until_thread(room, root, lambda t: all(
                s.reactions.get(k) == {bot.user_id} for s in t if s.event_id == request.event_id
                for k in ("1️⃣", "2️⃣")))  # fmt: skip
            await other.react(room, request.event_id, "1️⃣")
            await other.react(room, request.event_id, "2️⃣")
            await lead.until_thread(room, root, lambda t: has(t, "your reaction was not counted"))
            await lead.react(room, request.event_id, "1️⃣")
            done = await lead.until_thread(
                room, root, lambda t: has(t, "permission: allow", "End of turn: end_turn",
                                          "edit · ✅ completed", "chosen by"))  # fmt: skip
            decided = next(seen for seen in done if seen.event_id == request.event_id)
            assert (
                f"✅ Allow (allow_once): chosen by {alice.user_id} in the chat at" in decided.body
            )
            refusals = [s for s in done if "your reaction was not counted" in s.body]
            assert len(refusals) == 1
            assert refusals[0].body.startswith(bob.user_id)
            await lead.say(room, "hello team", thread=root)
            await lead.until_thread(room, root, lambda t: any(
                s.body == "hello team" and s.sender == bot.user_id for s in t))  # fmt: skip
            await lead.say(room, "!end", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "Session ended by"))
            assert await until_idle(live.relay)
            assert all(s.sender in (bot.user_id, alice.user_id) for s in lead.thread(room, root))
            assert await running.stop() == 0
    assert not any(bot.token in line for line in running.lines)
