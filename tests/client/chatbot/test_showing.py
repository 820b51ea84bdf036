"""What a thread shows, as a person's client renders it: a picture of a real thread.

The chatty agent's turn through the relay and the bot into Synapse, answered by an
approver; the thread's events as the approver's client received them, rendered as a
client's thread panel (:mod:`tests.support.threadpage`) and screenshotted with Chromium.
``docs/chat-thread.png`` is written when missing or with ``ACP_RELAY_UPDATE_SCREENSHOTS=1``;
the screenshot always goes to tests/artifacts/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.agents import CHATTY
from tests.support.audit import LogAudit
from tests.support.browser import ROOT, browser, require_chromium, save_artifact
from tests.support.chatbot import chat_bot
from tests.support.live import live_relay
from tests.support.matrix import person
from tests.support.synapse import Homeserver
from tests.support.threadpage import render
from tests.system import require_packages

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
DOC_SHOT = ROOT / "docs" / "chat-thread.png"


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
