"""The bot's start against a real Synapse and against what is not one: a first contact
bounded by --open-timeout and said in one line, a stop signal heard while starting, the
served rooms checked and joined before anything else."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.support.agents import DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import BotRun, chat_bot
from tests.support.live import live_relay
from tests.support.matrix import has, person
from tests.support.sockets import free_port
from tests.support.synapse import Homeserver

pytestmark = pytest.mark.timeout(120)


async def exit_status(running: BotRun, seconds: float = 15) -> int:
    """The bot's exit status, once it has exited by itself (within ``seconds``)."""
    async with asyncio.timeout(seconds):
        status = await running.proc.wait()
        await running.reader
    return status


def said(running: BotRun) -> list[str]:
    """What the bot wrote on stderr besides its (JSON) log."""
    return [line for line in running.lines if not line.startswith("{")]


@asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    """An http:// URL whose server takes connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_homeserver_that_cannot_be_reached_fails_the_start_in_one_line(
    homeserver: Homeserver, tmp_path: Path
) -> None:
    """Nothing listening at --homeserver: exit 2 within --open-timeout, one line naming the
    URL and what happened, no traceback."""
    bot = homeserver.register("bot")
    nowhere = f"http://127.0.0.1:{free_port()}"
    async with chat_bot(
        homeserver,
        bot,
        "ws://127.0.0.1:1/acp",
        folder=tmp_path,
        rooms=["!r:t"],
        approvers=["@a:t"],
        extra=["--homeserver", nowhere, "--open-timeout", "3"],
    ) as running:
        assert await exit_status(running) == 2
    [line] = said(running)
    assert line.startswith(f"acp-relay: cannot use the homeserver {nowhere}: ")


async def test_a_silent_homeserver_is_bounded_by_open_timeout_and_a_stop_signal_is_heard(
    homeserver: Homeserver, tmp_path: Path
) -> None:
    """A server that never answers: exit 2 after --open-timeout with one line; with a long
    --open-timeout, SIGTERM during the start ends the bot at once."""
    bot = homeserver.register("bot")
    async with silent_server() as url:
        async with chat_bot(
            homeserver,
            bot,
            "ws://127.0.0.1:1/acp",
            folder=tmp_path,
            rooms=["!r:t"],
            approvers=["@a:t"],
            extra=["--homeserver", url, "--open-timeout", "1"],
        ) as running:
            assert await exit_status(running) == 2
        assert said(running) == [
            f"acp-relay: the homeserver {url} did not answer within 1 s (--open-timeout)"
        ]
        async with chat_bot(
            homeserver,
            bot,
            "ws://127.0.0.1:1/acp",
            folder=tmp_path,
            rooms=["!r:t"],
            approvers=["@a:t"],
            extra=["--homeserver", url, "--open-timeout", "600"],
        ) as running:
            await running.logged("contacting the homeserver")
            assert await running.stop(signal.SIGTERM, seconds=10) == 0


async def test_a_homeserver_url_that_is_not_matrix_is_said_so(
    homeserver: Homeserver, tmp_path: Path
) -> None:
    """--homeserver naming the relay's own port: said not to be a Matrix homeserver (its
    HTTP status), not blamed on the token; exit 2."""
    bot = homeserver.register("bot")
    async with live_relay(DEMO_AGENT) as live:
        url = live.base.replace("ws://", "http://")
        async with chat_bot(
            homeserver,
            bot,
            live.url(),
            folder=tmp_path,
            rooms=["!r:t"],
            approvers=["@a:t"],
            extra=["--homeserver", url],
        ) as running:
            assert await exit_status(running) == 2
    [line] = said(running)
    assert f"{url}/_matrix/client/versions answered HTTP 404" in line
    assert "not a Matrix homeserver" in line
    assert "token" not in line


async def test_a_room_the_bot_is_not_in_and_cannot_join_stops_the_start(
    homeserver: Homeserver, tmp_path: Path
) -> None:
    """A --room the bot is not in and not invited to (or a typo) cannot be served: exit 2,
    one line naming it and the fix, and an error in the log."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    async with person(homeserver, alice) as lead:
        room = await lead.create_room([])
        async with chat_bot(homeserver, bot, "ws://127.0.0.1:1/acp", folder=tmp_path,
                            rooms=[room], approvers=[alice.user_id]) as running:  # fmt: skip
            assert await exit_status(running) == 2
    [line] = said(running)
    assert line.startswith(f"acp-relay: --room {room}: the bot is not in this room and cannot ")
    assert f"invite {bot.user_id} to it first, or check the room id" in line
    assert [r["room"] for r in running.events("a served room cannot be joined")] == [room]


async def test_an_invitation_ignored_by_an_earlier_run_is_accepted_once_its_room_is_served(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A run that does not serve a room ignores its invitation; the next start, the room
    added to --room, joins it and serves it (the bot under Synapse's default rate limits)."""
    bot, alice = homeserver.register("bot", unlimited=False), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        served, later = await lead.create_room([bot.user_id]), await lead.create_room([bot.user_id])
        async with chat_bot(homeserver, bot, live.url(), folder=tmp_path, rooms=[served],
                            approvers=[alice.user_id]) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invitation to a room not served: ignored")
            await running.logged("first start: acting on what comes from now on")
            assert await running.stop() == 0
        async with chat_bot(homeserver, bot, live.url(), folder=tmp_path, rooms=[served, later],
                            approvers=[alice.user_id]) as running:  # fmt: skip
            audit.watch(running.lines)
            [joined] = await running.logged("joined a served room at start")
            assert joined["room"] == later
            root = await lead.say(later, f"{bot.user_id} hello")
            await lead.until_thread(later, root, lambda t: has(t, "End of turn"))
            assert await running.stop() == 0
