"""relay.client.chatbot.watchthread: the team answers an editor's session. ``@bot share
CONNECTION_ID`` follows a connection that ``acp-relay connect`` drives, and the relay's
first answer wins between the two."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import chat_bot
from tests.support.connect import TICKET_COMMAND, Editor, editor, log_records, request
from tests.support.env import clean_env
from tests.support.live import live_relay
from tests.support.matrix import has, person
from tests.support.synapse import Homeserver
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)
WATCH_TICKETS = shlex.join([sys.executable, "-m", "relay", "ticket", "--may-answer", "--watch"])


async def answer_to(ed: Editor, request_id: int) -> list[dict[str, Any]]:
    """What the editor read until the answer to ``request_id``, that answer last."""
    seen = []
    while True:
        message = await ed.receive()
        seen.append(message)
        if message.get("id") == request_id and "method" not in message:
            return seen


async def permission_request(ed: Editor) -> dict[str, Any]:
    while True:
        message = await ed.receive()
        if message.get("method") == "session/request_permission":
            return message


async def test_the_team_answers_an_editors_session_and_the_first_answer_wins(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """The thread shows the editor's prompts and the agent's turns; an approver's keycap
    answers first once (the thread says the chat's answer was taken, the editor is told);
    the bot killed and started again follows on (nothing shown twice); the editor answers
    first the next time (the thread says so); the connection's end is said."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        editor(live.url(), "--ticket-command", TICKET_COMMAND, env=clean_env()) as ed,
    ):
        await ed.send(request(1, "initialize", protocolVersion=1))
        await answer_to(ed, 1)
        await ed.send(request(2, "session/new", cwd=os.getcwd(), mcpServers=[]))
        session = (await answer_to(ed, 2))[-1]["result"]["sessionId"]
        connection = await until(lambda: next((r["connection_id"] for r in
                                               log_records(bytes(ed.stderr))
                                               if r.get("connection_id")), None))  # fmt: skip
        room = await lead.create_room([bot.user_id])
        sharing = ["--watch-ticket-command", WATCH_TICKETS]
        async with chat_bot(
            homeserver,
            bot,
            live.url(),
            folder=tmp_path,
            rooms=[room],
            approvers=[alice.user_id],
            extra=sharing,
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} share {connection}")
            await lead.until_thread(room, root, lambda t: has(t, "Following the editor's"))
            prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "/ask"}]}
            await ed.send(request(3, "session/prompt", **prompt))
            asked = await permission_request(ed)
            thread = await lead.until_thread(room, root, lambda t: any(
                len(s.reactions) == 2 for s in t if "Permission requested" in s.body))  # fmt: skip
            first = next(seen for seen in thread if "Permission requested" in seen.body)
            await lead.react(room, first.event_id, "1️⃣")
            told = await answer_to(ed, 3)
            assert {"by": "watcher", "id": asked["id"]}.items() <= next(
                m["params"] for m in told if m.get("method") == "_acp-relay/answered"
            ).items()
            await lead.until_thread(room, root, lambda t: has(
                t, f"chosen by {alice.user_id} in the chat", "the chat's answer was taken",
                "permission: allow"))  # fmt: skip
            await running.stop(signal.SIGKILL)
        async with chat_bot(
            homeserver,
            bot,
            live.url(),
            folder=tmp_path,
            rooms=[room],
            approvers=[alice.user_id],
            extra=sharing,
        ) as again:
            audit.watch(again.lines)
            await again.logged("watch thread restored")
            await ed.send(request(4, "session/prompt", **prompt))
            asked = await permission_request(ed)
            reject = {"outcome": {"outcome": "selected", "optionId": "reject"}}
            await ed.send({"jsonrpc": "2.0", "id": asked["id"], "result": reject})
            await answer_to(ed, 4)
            done = await lead.until_thread(room, root, lambda t: has(
                t, "Reject (reject_once): answered in the editor at"))  # fmt: skip
            assert has(done, "The editor's prompt: /ask")
            await ed.close_stdin()
            final = await lead.until_thread(
                room, root, lambda t: has(t, "The editor's connection ended")
            )
            assert final[-1].body.startswith("⏹ The editor's connection ended")
            assert sum("The editor's prompt: /ask" in seen.body for seen in final) == 2
            await again.stop()


async def test_share_naming_a_url_is_refused_and_no_ticket_leaves(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """``share ID URL`` (the prompter's own server on 127.0.0.1) gets a reply saying why it is
    refused; her server receives no connection at all, and no watcher's ticket is minted."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    dialled: list[str] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dialled.append((await reader.read(4096)).decode("latin-1"))
        writer.close()

    trap = await asyncio.start_server(accepted, "127.0.0.1", 0)
    port = trap.sockets[0].getsockname()[1]
    async with trap, live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
            approvers=[alice.user_id], extra=["--watch-ticket-command", WATCH_TICKETS],
        ) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} share {uuid.uuid4()} "
                                        f"ws://127.0.0.1:{port}/acp")  # fmt: skip
            await lead.until_thread(room, root, lambda t: has(t, "share takes only a connection"))
            await running.logged("share naming a URL refused")
            assert await running.stop() == 0
        assert not running.events("share opened")
    assert dialled == []


async def test_only_approvers_share_and_the_control_plane_hears_who_asks(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A prompter who is not an approver is told only approvers may share (the ticket command
    never runs for her); an approver's share runs it with her id in
    $ACP_RELAY_CHAT_REQUESTER; its refusal (exit 3) is said in the thread in general words,
    its stderr kept to the bot's log."""
    bot, alice, bob = (homeserver.register(name) for name in ("bot", "alice", "bob"))
    audit.secret(bot.token)
    refuse = tmp_path / "refuse.py"
    refuse.write_text("import os, sys\nprint('control plane: ' + os.environ.get("
                      "'ACP_RELAY_CHAT_REQUESTER', '?') + ' may not watch ' + sys.argv[1] "
                      "+ ' (rule 7f3a)', file=sys.stderr)\nsys.exit(3)\n")  # fmt: skip
    connection = str(uuid.uuid4())
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as other,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id])
        await other.join(room)
        extra = ["--watch-ticket-command", shlex.join([sys.executable, str(refuse)]),
                 "--prompter", alice.user_id, "--prompter", bob.user_id]  # fmt: skip
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
            approvers=[alice.user_id], extra=extra,
        ) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            asked = await other.say(room, f"{bot.user_id} share {connection}")
            await lead.until_thread(room, asked, lambda t: has(t, "only approvers may share"))
            root = await lead.say(room, f"{bot.user_id} share {connection}")
            await lead.until_thread(room, root, lambda t: has(t, "share was refused"))
            refused = await running.logged("watch ticket refused")
            assert f"{alice.user_id} may not watch {connection} (rule 7f3a)" in str(refused)
            assert await running.stop() == 0
    assert not any(bob.user_id in line and "may not watch" in line for line in running.lines)
    assert not any("7f3a" in e["content"].get("body", "") for e in lead.room_messages(room))


async def test_share_is_refused_where_each_thread_has_a_box_of_its_own(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """With --connect-command there is no relay of the bot's to follow a connection on: a
    share gets a reply saying so, and no watcher's ticket is minted."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        extra = ["--connect-command", "false", "--watch-ticket-command", WATCH_TICKETS]
        async with chat_bot(
            homeserver, bot, None, folder=tmp_path, rooms=[room], approvers=[alice.user_id],
            extra=extra,
        ) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} share {uuid.uuid4()}")
            await lead.until_thread(room, root, lambda t: has(t, "a box of its own"))
            assert await running.stop() == 0
        assert not running.events("share opened")
