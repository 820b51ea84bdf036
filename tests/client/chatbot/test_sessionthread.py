"""A thread's session as a whole ACP client, end to end: a real Synapse, a relay with an SDK
agent that offers modes, options, commands and usage (tests/agents/controls.py), the bot
as a subprocess, people as client-library sessions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.client.chatbot.test_restarts import Args
from tests.support.agents import CONTROLS
from tests.support.audit import LogAudit
from tests.support.live import live_relay
from tests.support.matrix import has, person
from tests.support.synapse import Homeserver

pytestmark = pytest.mark.timeout(120)
SETTINGS = "⚙️ Mode:"


async def test_modes_and_models_reach_the_agent_and_the_line_follows_it(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """@bot !model deep PROMPT sets the model before the first prompt; !mode plan sends
    session/set_mode and the settings line follows the agent's update; a prompter who is
    not an approver cannot change the mode; a /command reaches the agent as written; the
    end of a turn and !usage show what the session used."""
    bot, bob, carol = (homeserver.register(n) for n in ("bot", "bob", "carol"))
    audit.secret(bot.token)
    store = tmp_path / "sessions"
    store.mkdir()
    async with (
        live_relay((*CONTROLS, str(store))) as live,
        person(homeserver, bob) as lead,
        person(homeserver, carol) as other,
    ):
        room = await lead.create_room([bot.user_id, carol.user_id])
        await other.join(room)
        prompters = ["--prompter", bob.user_id, "--prompter", carol.user_id]
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [bob.user_id],
                    tmp_path / "chat.sqlite", extra=prompters)  # fmt: skip
        async with args.start() as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} !model deep hello")
            thread = await lead.until_thread(room, root, lambda t: has(
                t, "settings: mode=default model=deep effort=low", "End of turn"))  # fmt: skip
            assert has(thread, "⚙️ Model → Deep (by ", "text: hello")
            assert has(thread, "The agent's commands (send one as a prompt):\n/review — Review")
            line = next(s for s in thread if s.body.startswith(SETTINGS))
            assert line.body.startswith("⚙️ Mode: Default · Model: Deep · Effort: Low")
            end = next(s for s in thread if "End of turn" in s.body)
            assert end.body == "⏹ End of turn: end_turn · Context: 1,234 of 200,000 tokens " \
                               "(0 %); cost so far 0.01 USD"  # fmt: skip
            await lead.say(room, "!mode plan", thread=root)
            await lead.until_thread(room, root, lambda t: any(
                s.body.startswith("⚙️ Mode: Plan") for s in t))  # fmt: skip
            await other.say(room, "!mode yolo", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "Only approvers change"))
            await other.say(room, "/review the diff", thread=root)
            done = await lead.until_thread(room, root, lambda t: has(
                t, "text: /review the diff\nsettings: mode=plan model=deep"))  # fmt: skip
            assert not has(done, "mode=yolo")
            await lead.say(room, "!usage", thread=root)
            await lead.until_thread(room, root, lambda t: any(
                s.body.startswith("Context: 2,468 of 200,000 tokens") for s in t))  # fmt: skip
            assert sum(s.body.startswith(SETTINGS) for s in lead.thread(room, root)) == 1
            assert await running.stop() == 0
