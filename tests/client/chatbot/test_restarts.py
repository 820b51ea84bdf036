"""The bot killed and started again: its threads resumed through the resume profile, the
pending request answered once, no Matrix event handled twice, ended connections said so."""

from __future__ import annotations

import shlex
import signal
import sqlite3
import stat
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.agents import DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import Args
from tests.support.live import SECRET, live_relay, until_detached
from tests.support.matrix import Seen, has, person
from tests.support.netcut import NetCut
from tests.support.synapse import Homeserver
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)


def count(thread: list[Seen], text: str) -> int:
    return sum(seen.body.count(text) for seen in thread)


async def test_killed_with_a_request_pending_then_restarted_the_request_is_answered_once(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """SIGKILL while a permission request waits; the approver answers while the bot is down;
    the restarted bot resumes the connection within the grace, takes the answer once, and
    the turn goes on in the same thread; the mention is not handled a second time."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    state = tmp_path / "chat.sqlite"
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id], state)
        async with args.start() as first:
            audit.watch(first.lines)
            await first.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            thread = await lead.until_thread(room, root, lambda t: any(
                len(s.reactions) == 2 for s in t if "Permission requested" in s.body))  # fmt: skip
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            await first.logged("thread opened")
            assert stat.S_IMODE(state.stat().st_mode) == 0o600
            with closing(sqlite3.connect(state)) as db:
                [(secret,)] = db.execute("SELECT secret FROM threads").fetchall()
            audit.secret(secret)  # the resume secret: in the state file, in no log line
            assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
        assert await until_detached(live)
        await lead.react(room, request.event_id, "1️⃣")
        async with args.start() as second:
            audit.watch(second.lines)
            await second.logged("connection resumed after a restart")
            done = await lead.until_thread(
                room, root, lambda t: has(t, "permission: allow", "End of turn: end_turn")
            )
            assert count(done, "permission: allow") == 1
            assert count(done, "Permission requested") == 0  # edited: decided
            assert count(done, "chosen by") == 1
            assert await second.stop() == 0
        assert second.events("thread opened") == []
        assert len(second.events("permission request answered")) == 1
        assert len(live.relay.connections) == 1  # kept for a third start to resume


async def test_a_connection_that_ended_while_the_bot_was_down_gets_a_closing_line(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """The relay's grace ran out while the bot was down: the restarted bot says, in the
    thread, that the connection could not be resumed, and keeps no thread."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    state = tmp_path / "chat.sqlite"
    async with live_relay(DEMO_AGENT, resume_grace=0.5) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id], state)
        async with args.start() as first:
            audit.watch(first.lines)
            await first.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} hello")
            await lead.until_thread(room, root, lambda t: has(t, "End of turn"))
            await first.stop(signal.SIGKILL)
        await until(lambda: not live.relay.connections, what="the detached connection expired")
        async with args.start() as second:
            audit.watch(second.lines)
            await lead.until_thread(room, root, lambda t: has(t, "could not be resumed"))
            await second.stop()


async def test_with_connect_command_each_thread_gets_its_box_and_resumes_there(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """--connect-command prints a URL and a ticket for a new thread; after a SIGKILL the
    thread is resumed on that URL with a ticket the command gives for it."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    state = tmp_path / "chat.sqlite"
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        script = tmp_path / "boxes.py"
        script.write_text(
            "import sys\nfrom relay.commands.ticket import fresh_ticket\n"
            f"ticket = fresh_ticket({SECRET!r}, subject='fleet')\n"
            f"url = {live.url()!r}\n"
            "print(ticket if sys.argv[1:] == [url] else url + ' ' + ticket)\n"
        )
        room = await lead.create_room([bot.user_id])
        boxes = ["--connect-command", f"{sys.executable} {script}"]
        args = Args(homeserver, bot, None, tmp_path, [room], [alice.user_id], state, boxes)
        async with args.start() as first:
            audit.watch(first.lines)
            await first.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            await lead.until_thread(room, root, lambda t: any(
                len(s.reactions) == 2 for s in t if "Permission requested" in s.body))  # fmt: skip
            await first.stop(signal.SIGKILL)
        async with args.start() as second:
            audit.watch(second.lines)
            await second.logged("connection resumed after a restart")
            request = next(s for s in lead.thread(room, root) if "Permission requested" in s.body)
            await lead.react(room, request.event_id, "2️⃣")
            await lead.until_thread(room, root, lambda t: has(t, "permission: reject"))
            await second.stop()


async def test_a_thread_survives_restarts_and_network_drops_in_any_order(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """The relay gives a new resume secret at every welcome: a network drop the link resumes
    by itself, then two SIGKILLs in a row, each with an answer given while the bot is
    down; every start resumes the same connection and each request is answered once."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    state = tmp_path / "chat.sqlite"
    async with (
        live_relay(DEMO_AGENT) as live,
        NetCut(live.relay.port) as cut,
        person(homeserver, alice) as lead,
    ):
        room = await lead.create_room([bot.user_id])
        args = Args(homeserver, bot, cut.url(), tmp_path, [room], [alice.user_id], state)
        async with args.start() as run:
            audit.watch(run.lines)
            await run.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            await lead.until_thread(room, root, lambda t: pending(t) is not None)
            cut.reset()  # the link resumes by itself: the relay welcomes it with a new secret
            await run.logged("resumed")
            await run.stop(signal.SIGKILL)
        for start in range(2):
            await lead.react(room, pending_id(lead.thread(room, root)), "1️⃣")
            async with args.start() as run:
                audit.watch(run.lines)
                await run.logged("connection resumed after a restart")
                await lead.until_thread(room, root, turns_ended(start + 1))
                await lead.say(room, "/ask", thread=root)
                await lead.until_thread(room, root, lambda t: pending(t) is not None)
                await run.stop(signal.SIGKILL)
            assert run.events("relay connection ended") == [], run.lines[-20:]
        async with args.start() as last:
            audit.watch(last.lines)
            await last.logged("connection resumed after a restart")
            await lead.react(room, pending_id(lead.thread(room, root)), "2️⃣")
            done = await lead.until_thread(room, root, turns_ended(3))
            assert count(done, "permission: allow") == 2
            assert count(done, "permission: reject") == 1
            assert count(done, "chosen by") == 3
            assert await last.stop() == 0
        with closing(sqlite3.connect(state)) as db:
            [(secret,)] = db.execute("SELECT secret FROM threads").fetchall()
        audit.secret(secret)
        assert len(live.relay.connections) == 1


def pending(thread: list[Seen]) -> Seen | None:
    """The thread's permission request still waiting, with its keycaps, if any."""
    return next(
        (s for s in thread if "Permission requested" in s.body and len(s.reactions) == 2), None
    )


def turns_ended(ended: int) -> Callable[[list[Seen]], bool]:
    """Whether a thread shows ``ended`` ends of turns."""
    return lambda thread: count(thread, "End of turn") == ended


def pending_id(thread: list[Seen]) -> str:
    found = pending(thread)
    assert found is not None, [s.body for s in thread]
    return found.event_id


def slow_tickets(folder: Path) -> tuple[str, Path]:
    """A ticket command that waits while its marker file exists, then mints as usual."""
    marker = folder / "tickets-are-slow"
    script = folder / "slow_tickets.py"
    script.write_text(
        "import os, sys, time\n"
        f"while os.path.exists({str(marker)!r}):\n    time.sleep(0.05)\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'relay', 'ticket'])\n"
    )
    return shlex.join([sys.executable, str(script)]), marker


async def test_a_prompt_sent_while_the_thread_resumes_is_carried_out_after_it(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """The restarted bot's thread waits for its ticket to resume; a prompt and its answer
    written meanwhile are not lost: the turn runs once the link is back."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    command, marker = slow_tickets(tmp_path)
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        args = Args(
            homeserver,
            bot,
            live.url(),
            tmp_path,
            [room],
            [alice.user_id],
            tmp_path / "chat.sqlite",
            ticket_command=command,
        )
        async with args.start() as first:
            audit.watch(first.lines)
            await first.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} hello")
            await lead.until_thread(room, root, turns_ended(1))
            await first.stop(signal.SIGKILL)
        marker.write_text("slow")
        async with args.start() as second:
            audit.watch(second.lines)
            await second.logged("thread restored")
            await lead.say(room, "hello again", thread=root)
            await second.logged("message handled", seconds=20)
            marker.unlink()
            await second.logged("connection resumed after a restart")
            await lead.until_thread(room, root, turns_ended(2))
            await second.stop()


async def test_a_thread_accepted_just_before_a_kill_is_opened_on_restart(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """Killed while a new thread waits for its ticket (recorded, not connected): the next
    start opens it with its first prompt and says why, instead of ending it silently."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    command, marker = slow_tickets(tmp_path)
    marker.write_text("slow")
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        args = Args(
            homeserver,
            bot,
            live.url(),
            tmp_path,
            [room],
            [alice.user_id],
            tmp_path / "chat.sqlite",
            ticket_command=command,
        )
        async with args.start() as first:
            audit.watch(first.lines)
            await first.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} hello")
            await first.logged("thread opened")
            first.proc.send_signal(signal.SIGKILL)
            marker.unlink()  # its ticket command, orphaned, ends and lets go of the bot's stderr
            assert await first.stop() == -signal.SIGKILL
        async with args.start() as second:
            audit.watch(second.lines)
            done = await lead.until_thread(room, root, turns_ended(1))
            assert has(done, "restarted before this session opened")
            await second.stop()
        assert len(live.relay.connections) == 1
