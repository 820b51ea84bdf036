"""relay.client.chatbot.watchthread: the team answers an editor's session. ``@bot share
CONNECTION_ID`` follows a connection that ``acp-relay connect`` drives, and the relay's
first answer wins between the two."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest

from tests.support.agents import DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import chat_bot
from tests.support.connect import (
    TICKET_COMMAND,
    WATCH_TICKETS,
    answer_to,
    editor,
    log_records,
    permission_request,
    request,
)
from tests.support.env import clean_env
from tests.support.live import live_relay
from tests.support.matrix import has, person
from tests.support.synapse import Homeserver
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)


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
        connection = await until(
            lambda: next(
                (
                    r["connection_id"]
                    for r in log_records(bytes(ed.stderr))
                    if r.get("connection_id")
                ),
                None,
            )
        )
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
            thread = await lead.until_thread(
                room,
                root,
                lambda t: any(len(s.reactions) == 2 for s in t if "Permission requested" in s.body),
            )
            first = next(seen for seen in thread if "Permission requested" in seen.body)
            await lead.react(room, first.event_id, "1️⃣")
            told = await answer_to(ed, 3)
            assert {"by": "watcher", "id": asked["id"]}.items() <= next(
                m["params"] for m in told if m.get("method") == "_acp-relay/answered"
            ).items()
            await lead.until_thread(
                room,
                root,
                lambda t: has(
                    t,
                    f"chosen by {alice.user_id} in the chat",
                    "the chat's answer was taken",
                    "permission: allow",
                ),
            )
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
            done = await lead.until_thread(
                room, root, lambda t: has(t, "Reject (reject_once): answered in the editor at")
            )
            assert has(done, "The editor's prompt: /ask")
            await ed.close_stdin()
            final = await lead.until_thread(
                room, root, lambda t: has(t, "The editor's connection ended")
            )
            assert final[-1].body.startswith("⏹ The editor's connection ended")
            assert sum("The editor's prompt: /ask" in seen.body for seen in final) == 2
            await again.stop()


async def test_share_never_sends_a_ticket_to_a_url_from_the_chat(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A share naming a URL (the prompter's own server) is refused in the thread: the
    watcher's ticket command never runs and her server receives no connection."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    knocks: list[str] = []

    async def trap(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        knocks.append("connected")
        writer.close()

    server = await asyncio.start_server(trap, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ran = tmp_path / "ticket-command-ran"
    command = shlex.join([sys.executable, "-c", f"open({str(ran)!r}, 'w').write('x')"])
    async with server, live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver,
            bot,
            live.url(),
            folder=tmp_path,
            rooms=[room],
            approvers=[alice.user_id],
            extra=["--watch-ticket-command", command, "--share-by", "prompters"],
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} share 6f1c2a7e ws://127.0.0.1:{port}/acp")
            await lead.until_thread(room, root, lambda t: has(t, "share takes a connection id"))
            await running.stop()
    assert knocks == []
    assert not ran.exists()


async def test_only_approvers_share_and_the_control_plane_is_told_who_asks(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A prompter who is not an approver may not share; an approver's share runs the
    ticket command with the requester's id and the room in its environment; a command
    that refuses (its stderr the operator's) leaves the room a generic line, the log why."""
    bot, alice, dev = (homeserver.register(name) for name in ("bot", "alice", "dev"))
    audit.secret(bot.token)
    seen = tmp_path / "requester"
    refusing = shlex.join(
        [
            sys.executable,
            "-c",
            (
                "import os, sys; env = os.environ; open(sys.argv[1], 'w').write("
                "env['ACP_RELAY_CHAT_REQUESTER'] + ' ' + env['ACP_RELAY_CHAT_ROOM']); "
                "sys.exit('policy: internal-host-7 may not be shared')"
            ),
            str(seen),
        ]
    )
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id, dev.user_id])
        async with person(homeserver, dev) as prompter:
            await prompter.join(room)
            async with chat_bot(
                homeserver,
                bot,
                live.url(),
                folder=tmp_path,
                rooms=[room],
                approvers=[alice.user_id],
                extra=[
                    "--watch-ticket-command",
                    refusing,
                    "--prompter",
                    dev.user_id,
                    "--prompter",
                    alice.user_id,
                ],
            ) as running:
                audit.watch(running.lines)
                await running.logged("invited to a served room: joining")
                theirs = await prompter.say(room, f"{bot.user_id} share 6f1c2a7e")
                await lead.until_thread(room, theirs, lambda t: has(t, "only approvers may"))
                assert not seen.exists()
                ours = await lead.say(room, f"{bot.user_id} share 6f1c2a7e")
                thread = await lead.until_thread(
                    room, ours, lambda t: has(t, "gave no watcher's ticket")
                )
                assert not has(thread, "internal-host-7")
                [logged] = await running.logged("no watcher's ticket: share refused or failed")
                assert "internal-host-7 may not be shared" in logged["reason"]
                assert seen.read_text() == f"{alice.user_id} {room}"
                await running.stop()
