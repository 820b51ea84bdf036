"""The bot in an end-to-end encrypted room, against the real Synapse: people whose clients
encrypt (mautrix's crypto, as the bot's), and Synapse's own database read afterwards."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.agents import CONTROLS, DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import Args, request_in
from tests.support.connect import (
    TICKET_COMMAND,
    WATCH_TICKETS,
    answer_to,
    editor,
    log_records,
    request,
)
from tests.support.env import clean_env
from tests.support.live import live_relay, until_detached
from tests.support.matrix import has, person
from tests.support.synapse import Homeserver
from tests.support.waiting import until

pytest.importorskip("olm", reason="the chat-e2ee extra is not installed")
pytestmark = pytest.mark.timeout(180)


def pickle_key(folder: Path) -> list[str]:
    path = folder / "pickle.key"
    path.write_text("a long random pickle key for the tests\n")
    path.chmod(0o600)
    return ["--pickle-key-file", str(path)]


def stored_json(homeserver: Homeserver, room: str) -> str:
    """Every event of ``room`` as Synapse's database holds it (the homeserver is the test
    session's: other tests' rooms hold these words in plaintext)."""
    with closing(sqlite3.connect(homeserver.folder / "homeserver.db")) as db:
        rows = db.execute("SELECT json FROM event_json WHERE room_id = ?", (room,))
        return "\n".join(json for (json,) in rows)


async def test_an_encrypted_room_is_served_and_synapse_keeps_no_plaintext(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """In an encrypted room: a prompt → the agent's words, a tool call and a permission
    request, all encrypted; a non-approver's tap is ignored; the approver's tap answers
    (unencrypted, then encrypted); the bot killed while a request waits answers it once
    after its restart and reads new messages; Synapse's database holds none of the texts."""
    bot, alice, bob = (homeserver.register(n) for n in ("bot", "alice", "bob"))
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice, keys=tmp_path / "alice.keys") as lead,
        person(homeserver, bob, keys=tmp_path / "bob.keys") as other,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id], encrypted=True)
        await other.join(room)
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id],
                    tmp_path / "chat.sqlite", extra=pickle_key(tmp_path))  # fmt: skip
        async with args.start() as first:
            audit.watch(first.lines)
            await first.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            request = await request_in(lead, room, root, 1)
            await other.react(room, request.event_id, "1️⃣")
            await lead.until_thread(room, root, lambda t: has(t, "may answer this request"))
            await lead.react(room, request.event_id, "1️⃣")
            await lead.until_thread(room, root, lambda t: has(t, "permission: allow"))
            await lead.say(room, "/ask", thread=root)
            again = await request_in(lead, room, root, 2)
            await lead.react(room, again.event_id, "2️⃣", encrypted=True)
            await lead.until_thread(room, root, lambda t: has(t, "permission: reject"))
            await lead.say(room, "/ask", thread=root)
            pending = await request_in(lead, room, root, 3)
            assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
        assert await until_detached(live)
        async with args.start() as second:
            audit.watch(second.lines)
            await second.logged("connection resumed after a restart")
            await lead.react(room, pending.event_id, "1️⃣", encrypted=True)
            await lead.until_thread(room, root, lambda t: sum(
                "permission: allow" in s.body for s in t) == 2)  # fmt: skip
            await lead.say(room, "after the restart", thread=root)
            done = await lead.until_thread(room, root, lambda t: any(
                s.body == "after the restart" and s.sender == bot.user_id for s in t))  # fmt: skip
            assert await second.stop() == 0
        assert len(second.events("permission request answered")) == 1
    assert sum("chosen by" in s.body for s in done) == 3
    raw = [e for e in lead.raw_events(room) if e["sender"] == bot.user_id]
    assert raw
    assert {e["type"] for e in raw} <= {"m.room.encrypted", "m.reaction", "m.room.member"}
    stored = stored_json(homeserver, room)
    assert stored.count('"type":"m.room.encrypted"') >= 10
    for secret in ("Write notes.md", "permission: allow", "after the restart", "/ask"):
        assert secret not in stored


async def test_keys_kept_for_another_device_are_said_lost_and_keys_lost_stop_the_start(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A new login (a new device) with the old crypto file: the room is told once that
    what came before cannot be read, and new messages are read; the crypto file lost while
    the device's keys are on the homeserver: exit 2, saying to log in again."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    state = tmp_path / "chat.sqlite"
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice, keys=tmp_path / "alice.keys") as lead,
    ):
        room = await lead.create_room([bot.user_id], encrypted=True)
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id], state,
                    extra=pickle_key(tmp_path))  # fmt: skip
        async with args.start() as first:
            await first.logged("chat bot started")
            assert await first.stop() == 0
        again = homeserver.new_device(bot)
        audit.secret(again.token)
        args.bot = again
        async with args.start() as second:
            audit.watch(second.lines)
            await second.logged("keys lost: what was said before this start is unreadable")
            root = await lead.say(room, f"{bot.user_id} hello")
            await lead.until_thread(room, root, lambda t: has(t, "hello"), seconds=30)
            assert await second.stop() == 0
        said = [e for e in lead.room_messages(room) if "encryption keys were lost" in
                e["content"].get("body", "")]  # fmt: skip
        assert len(said) == 1
        (tmp_path / "chat.sqlite-crypto").unlink()
        async with args.start() as third:
            async with asyncio.timeout(30):
                assert await third.proc.wait() == 2
                await third.reader
        assert any("holds no keys for the device" in line for line in third.lines)


async def test_an_encrypted_rooms_image_reaches_the_agent_as_the_bytes_posted(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """An image sent in an encrypted room is uploaded encrypted (the event's `file`, its key
    inside the encrypted event): the bot fetches and opens it, and the agent gets the
    posted bytes."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    store = tmp_path / "sessions"
    store.mkdir()
    picture = b"\\x89PNG\\r\\n\\x1a\\n" + bytes(range(256)) * 8
    async with (
        live_relay((*CONTROLS, str(store))) as live,
        person(homeserver, alice, keys=tmp_path / "alice.keys") as lead,
    ):
        room = await lead.create_room([bot.user_id], encrypted=True)
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id],
                    tmp_path / "chat.sqlite", extra=pickle_key(tmp_path))  # fmt: skip
        async with args.start() as running:
            audit.watch(running.lines)
            await running.logged("chat bot started")
            root = await lead.say(room, f"{bot.user_id} hello")
            await lead.until_thread(room, root, lambda t: has(t, "End of turn"), seconds=30)
            await lead.send_file(room, picture, mimetype="image/png", name="shot.png",
                                 msgtype="m.image", thread=root)  # fmt: skip
            await lead.until_thread(room, root, lambda t: has(t, "📎 shot.png joins"))
            await lead.say(room, "and this?", thread=root)
            digest = hashlib.sha256(picture).hexdigest()
            await lead.until_thread(room, root, lambda t: has(
                t, f"image image/png {len(picture)} sha256:{digest}"))  # fmt: skip
            assert await running.stop() == 0


async def test_an_editors_session_shared_in_an_encrypted_room_is_answered_there(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """share in an encrypted room: the editor's turn is shown encrypted, an encrypted tap
    answers the editor's request, and the thread says the chat's answer was taken."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice, keys=tmp_path / "alice.keys") as lead,
        editor(live.url(), "--ticket-command", TICKET_COMMAND, env=clean_env()) as ed,
    ):
        await ed.send(request(1, "initialize", protocolVersion=1))
        await answer_to(ed, 1)
        await ed.send(request(2, "session/new", cwd=os.getcwd(), mcpServers=[]))
        session = (await answer_to(ed, 2))[-1]["result"]["sessionId"]
        connection = await until(lambda: next(
            (r["connection_id"] for r in log_records(bytes(ed.stderr)) if r.get("connection_id")),
            None))  # fmt: skip
        room = await lead.create_room([bot.user_id], encrypted=True)
        extra = [*pickle_key(tmp_path), "--watch-ticket-command", WATCH_TICKETS]
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id],
                    tmp_path / "chat.sqlite", extra=extra)  # fmt: skip
        async with args.start() as running:
            audit.watch(running.lines)
            await running.logged("chat bot started")
            root = await lead.say(room, f"{bot.user_id} share {connection}")
            await lead.until_thread(room, root, lambda t: has(t, "Following the editor's"),
                                    seconds=30)  # fmt: skip
            prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "/ask"}]}
            await ed.send(request(3, "session/prompt", **prompt))
            asked = await request_in(lead, room, root, 1)
            await lead.react(room, asked.event_id, "1️⃣", encrypted=True)
            await answer_to(ed, 3)
            await lead.until_thread(room, root, lambda t: has(
                t, "the chat's answer was taken", "permission: allow"))  # fmt: skip
            assert await running.stop() == 0
    stored = stored_json(homeserver, room)
    assert "Write notes.md" not in stored
    assert "/ask" not in stored
