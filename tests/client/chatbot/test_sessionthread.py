"""A thread's session as a whole ACP client, end to end: a real Synapse, a relay with an SDK
agent that offers modes, options, commands and usage (tests/agents/controls.py), the bot
as a subprocess, people as client-library sessions."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from tests.support.agents import CONTROLS
from tests.support.audit import LogAudit
from tests.support.chatbot import Args
from tests.support.geminiapi import gemini_api
from tests.support.live import live_relay
from tests.support.matrix import has, person
from tests.support.npmagents import GEMINI_CLI, installed
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


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40  # bytes as a client uploads them


async def test_an_image_and_a_text_file_join_the_next_prompt_and_an_oversized_one_is_refused(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """An image posted in the thread reaches the agent as an image block whose bytes are the
    posted file's; a text file as an embedded resource with its text; a file over
    --max-attachment-bytes is refused with the reason and reaches nobody; a binary file is
    refused as not text."""
    bot, bob = homeserver.register("bot"), homeserver.register("bob")
    audit.secret(bot.token)
    store = tmp_path / "sessions"
    store.mkdir()
    notes = "# notes\nfix the test ✓\n".encode()
    async with live_relay((*CONTROLS, str(store))) as live, person(homeserver, bob) as lead:
        room = await lead.create_room([bot.user_id])
        limit = ["--max-attachment-bytes", "64KiB"]
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [bob.user_id],
                    tmp_path / "chat.sqlite", extra=limit)  # fmt: skip
        async with args.start() as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} hello")
            await lead.until_thread(room, root, lambda t: has(t, "End of turn"))
            await lead.send_file(room, PNG, mimetype="image/png", name="shot.png",
                                 msgtype="m.image", thread=root)  # fmt: skip
            await lead.send_file(room, notes, mimetype="text/markdown", name="notes.md",
                                 msgtype="m.file", thread=root)  # fmt: skip
            await lead.send_file(room, b"x" * 70_000, mimetype="text/plain", name="big.txt",
                                 msgtype="m.file", thread=root)  # fmt: skip
            await lead.send_file(room, b"\x00\x01", mimetype="application/octet-stream",
                                 name="a.bin", msgtype="m.file", thread=root)  # fmt: skip
            await lead.until_thread(room, root, lambda t: has(
                t, "📎 shot.png joins the next prompt.", "📎 notes.md joins the next prompt.",
                "Not attached: big.txt: 70,000 bytes, over --max-attachment-bytes (65,536)",
                "Not attached: a.bin: only text files join a prompt"))  # fmt: skip
            await lead.say(room, "what is this?", thread=root)
            image = f"image image/png {len(PNG)} sha256:{hashlib.sha256(PNG).hexdigest()}"
            done = await lead.until_thread(room, root, lambda t: has(t, image))
            answer = next(s for s in done if image in s.body)
            assert answer.body.splitlines()[:3] == [
                "text: what is this?",
                image,
                f"resource attachment:notes.md text/markdown {len(notes)} "
                f"sha256:{hashlib.sha256(notes).hexdigest()}",
            ]
            assert "mxc://" not in "".join(s.body for s in done if s.sender == bot.user_id)
            assert await running.stop() == 0


async def test_sessions_lists_resume_brings_one_back_and_reopen_brings_back_an_ended_thread(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A session ended in its thread is listed by `sessions` with its title; `resume ID`
    opens a new thread showing its history (session/load replays it) and prompts go on in
    it; `!reopen` in the ended thread brings the session back there."""
    bot, bob = homeserver.register("bot"), homeserver.register("bob")
    audit.secret(bot.token)
    store = tmp_path / "sessions"
    store.mkdir()
    agent = (*CONTROLS, str(store), "--no-resume")
    async with live_relay(agent) as live, person(homeserver, bob) as lead:
        room = await lead.create_room([bot.user_id])
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [bob.user_id],
                    tmp_path / "chat.sqlite")  # fmt: skip
        async with args.start() as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            first = await lead.say(room, f"{bot.user_id} remember 42")
            await lead.until_thread(room, first, lambda t: has(t, "End of turn"))
            await lead.say(room, "!end", thread=first)
            await lead.until_thread(room, first, lambda t: has(t, "Session ended by"))
            asked = await lead.say(room, f"{bot.user_id} sessions")
            listing = await lead.until_thread(room, asked, lambda t: has(t, "🗂"))
            [session] = [w for w in listing[-1].body.split() if w.startswith("sess-")]
            assert f"• {session} — remember 42 (" in listing[-1].body
            second = await lead.say(room, f"{bot.user_id} resume {session}")
            back = await lead.until_thread(room, second, lambda t: has(
                t, f"↩ Session {session} is back, its history above."))  # fmt: skip
            bodies = [s.body for s in back]
            said = bodies.index("🗨 remember 42")
            assert bodies[said + 1].startswith("text: remember 42\nsettings:")
            await lead.say(room, "and now?", thread=second)
            await lead.until_thread(room, second, lambda t: has(t, "text: and now?"))
            await lead.say(room, "!reopen", thread=first)
            again = await lead.until_thread(room, first, lambda t: has(
                t, f"↩ Session {session} is back"))  # fmt: skip
            assert sum(s.body == "🗨 and now?" for s in again) == 1
            assert await running.stop() == 0
        assert len(running.events("a session brought back")) == 2


@pytest.mark.slow
@pytest.mark.timeout(420)  # an npm install at most once, then the agent
async def test_gemini_clis_modes_and_models_are_changed_from_the_thread(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A real agent (gemini-cli from the pinned npm package, against a loopback model API):
    its modes and its older `models` field show in the settings line; a mode it refuses is
    said with its reason; !mode and !model reach it (session/set_mode, session/set_model)
    and the next turn's model call goes to the model chosen."""
    gemini = await asyncio.to_thread(installed, GEMINI_CLI)
    bot, bob = homeserver.register("bot"), homeserver.register("bob")
    audit.secret(bot.token)
    home = tmp_path / "home"
    home.mkdir()
    async with gemini_api() as api:
        agent = ("env", f"HOME={home}", "GEMINI_API_KEY=test-key",
                 f"GOOGLE_GEMINI_BASE_URL={api.url}", str(gemini), "--acp",
                 "--model", "gemini-2.5-flash")  # fmt: skip
        async with live_relay(agent) as live, person(homeserver, bob) as lead:
            room = await lead.create_room([bot.user_id])
            args = Args(homeserver, bot, live.url(), tmp_path, [room], [bob.user_id],
                        tmp_path / "chat.sqlite", extra=["--open-timeout", "30"])  # fmt: skip
            async with args.start() as running:
                audit.watch(running.lines)
                await running.logged("invited to a served room: joining")
                root = await lead.say(room, f"{bot.user_id} !mode yolo !mode plan hi")
                thread = await lead.until_thread(room, root, lambda t: has(
                    t, "⚙️ Mode → Plan", "End of turn"), seconds=60)  # fmt: skip
                # the agent's reason, from its error's data, where "Internal error" says nothing
                untrusted = "Cannot enable privileged approval modes in an untrusted folder"
                assert has(thread, "The agent refused Mode → YOLO (by ", untrusted)
                line = next(s for s in thread if s.body.startswith(SETTINGS))
                assert "!model VALUE" in line.body
                await lead.say(room, "!model ?", thread=root)
                told = await lead.until_thread(room, root, lambda t: has(t, "its values: "))
                values = next(s.body for s in told if "its values: " in s.body)
                choices = values.split("its values: ")[1].split(", ")
                model = next(value for value in choices if "pro" in value)
                await lead.say(room, f"!model {model}", thread=root)
                await lead.until_thread(room, root, lambda t: has(t, "⚙️ Model → "))
                await lead.say(room, "again", thread=root)
                await lead.until_thread(room, root, lambda t: sum(
                    "End of turn" in s.body for s in t) == 2, seconds=60)  # fmt: skip
                assert await running.stop() == 0
    assert f"/models/{model}:" in api.calls[-1].target
