"""The ``serve --dev`` banner (relay/commands/devbanner.py), read from a real ``acp-relay serve
--dev`` as a person would: its URL, its "More tickets" command, what it names."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from relay.core.tickets import verify
from tests.support.chatbot import token_file
from tests.support.cli import RelayRun, dev_banner, dev_workspace, run_async, serve
from tests.support.clients import ChunkClient
from tests.support.connect import Editor, launched
from tests.support.env import clean_env
from tests.support.live import SECRET
from tests.support.matrix import has, person
from tests.support.netcut import NetCut
from tests.support.sockets import refused
from tests.support.synapse import Homeserver
from tests.support.waiting import until


@pytest.mark.slow
async def test_dev_banner_url_works_once_with_the_acp_sdk() -> None:
    """--dev prints a ws:// URL with a ticket that drives the demo agent once, then gets 401."""
    import acp
    from acp.ws.client import create_websocket_stream

    client = ChunkClient()
    updates = client.chunks

    async with serve("--dev", env=clean_env()) as relay:
        url, _ = await dev_banner(relay)
        assert url.startswith(f"ws://127.0.0.1:{relay.port}/acp?ticket=")
        transport = await create_websocket_stream(url)
        conn = acp.connect_to_agent(client, transport)  # type: ignore[arg-type]
        try:
            async with asyncio.timeout(20):
                init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
                session = await conn.new_session(cwd="/tmp", mcp_servers=[])
                reply = await conn.prompt(
                    session_id=session.session_id, prompt=[acp.text_block("hello from the cli")]
                )
        finally:
            await conn.close()
        status, body, _ = await refused(url)
    assert init.agent_info is not None
    assert init.agent_info.name == "acp-relay-demo"
    assert reply.stop_reason == "end_turn"
    assert "".join(u for u in updates if not u.startswith("session started")) == (
        "hello from the cli"
    )
    assert status == 401
    assert "already used" in body


@pytest.mark.slow
async def test_dev_banner_more_tickets_command_mints_working_tickets() -> None:
    """The banner's "More tickets" command, run as printed, prints a URL that connects."""
    async with serve("--dev", env=clean_env()) as relay:
        banner_url, more = await dev_banner(relay)
        setting, *argv = shlex.split(more)
        assert setting == "ACP_RELAY_TICKET_TTL=28800"  # the --dev relay's, for `ticket`
        assert argv[:4] == [sys.executable, "-m", "relay", "ticket"]  # how it was started
        assert argv[argv.index("--url") + 1] == relay.url
        secret_file = Path(argv[argv.index("--secret-file") + 1])
        dev_secret = read_secret(secret_file)
        status, out, err = await run_async(argv, env=clean_env(ACP_RELAY_TICKET_TTL="28800"))
        assert (status, err) == (0, "")
        url = out.strip()
        assert url.startswith(f"{relay.url}?ticket=")
        async with connect(url) as ws:
            await ws.send(
                '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'
            )
            async with asyncio.timeout(10):
                reply = json.loads(await ws.recv())
        assert reply["id"] == 1
        assert reply["result"]["agentInfo"]["name"] == "acp-relay-demo"
        assert await relay.stop() == 0
    claims = verify(url.partition("ticket=")[2], [dev_secret], now=time.time(), max_age=28800)
    assert claims.exp is not None
    assert claims.exp > time.time() + 28000  # lives as long as the --dev relay accepts it
    assert not secret_file.parent.exists()  # the throwaway secret goes with the relay
    stderr = "\n".join(relay.stderr)
    for needle in (dev_secret, banner_url.partition("ticket=")[2], url.partition("ticket=")[2]):
        assert needle not in stderr


@pytest.mark.slow
async def test_dev_banner_names_the_given_secret_file_and_agent(tmp_path: Path) -> None:
    """With --secret-file and --agent, the --dev banner names both, its More tickets command
    uses that file, and the console address carries a token that is never logged."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    args = ("--dev", "--secret-file", str(secret_file), "--agent", "cat")
    async with serve(*args, env=clean_env()) as relay:
        _, more = await dev_banner(relay)
        text = "\n".join(relay.stdout)
        assert f"Secret: the first line of {secret_file} (--secret-file)" in text
        assert "Agent: cat (--agent)" in text
        assert f"--secret-file {secret_file} " in more
        token = re.search(r"http://127\.0\.0\.1:\d+/\?token=(\S+)\n", text)
        assert token, text
        assert await relay.stop() == 0
    assert token[1] not in "\n".join(relay.stderr)


async def test_dev_banner_says_the_secret_is_throwaway() -> None:
    """Without --secret-file the --dev banner says the secret is new at each start and how to
    keep one, and that the agent is the demo agent."""
    async with serve("--dev", env=clean_env()) as relay:
        await dev_banner(relay)
        text = "\n".join(relay.stdout)
    assert "Secret: a throwaway one, new at each start (--secret-file FILE keeps one)" in text
    assert "Agent: the built-in demo agent" in text


def read_secret(path: Path) -> str:
    """The only line of a --dev secret file, which only its owner may read."""
    assert path.stat().st_mode & 0o777 == 0o600
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    assert len(lines[0]) >= 32
    return lines[0]


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}


def banner_entry(relay: RelayRun, title: str) -> str:
    """The line under ``title`` in the banner (printed once it listens)."""
    text = "\n".join(relay.stdout)
    found = re.search(rf"  {re.escape(title)}[^\n]*:\n +(.+)\n", text)
    assert found, text
    return found[1]


async def initialized(editor: Editor) -> None:
    """The editor's initialize is answered by the demo agent."""
    await editor.send(INITIALIZE)
    reply = await editor.receive()
    assert reply["result"]["agentInfo"]["name"] == "acp-relay-demo", reply


@pytest.mark.slow
async def test_dev_banner_editor_command_launches_again_and_again_and_resumes() -> None:
    """The editor command, run as printed, connects each time it is launched (a fresh
    ticket each), and resumes the same connection after a network cut."""
    async with serve("--dev", env=clean_env()) as relay:
        await dev_banner(relay)
        line = banner_entry(relay, "Editor command")
        for _ in range(2):  # as pasted into a shell, twice
            async with launched(["sh", "-c", line], env=clean_env()) as editor:
                await initialized(editor)
                await editor.close_stdin()
                assert await editor.exit_status() == 0
        argv = shlex.split(line)  # as an editor's settings give it: no shell, no variable
        assert argv[:4] == [sys.executable, "-m", "relay", "connect"]
        assert "ticket=" not in line
        async with NetCut(relay.port) as cut:
            through = [cut.url() if word == relay.url else word for word in argv]
            assert through != argv
            async with launched(through, env=clean_env()) as editor:
                await initialized(editor)
                cut.reset()
                await editor.send(
                    {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "session/new",
                        "params": {"cwd": "/", "mcpServers": []},
                    }
                )
                reply = await editor.receive()
                assert "sessionId" in reply["result"], reply
                [resumed] = await relay.wait_event("connection resumed")
                await editor.close_stdin()
                assert await editor.exit_status() == 0
        assert await relay.stop() == 0
    opened = relay.events("connection opened")
    assert len(opened) == 3
    assert resumed["connection_id"] == opened[-1]["connection_id"]


@pytest.mark.slow
async def test_dev_banner_watch_command_watches_the_connection_the_log_names() -> None:
    """The banner's watch command, with CONNECTION_ID replaced by the connection_id the log
    shows for a connection, attaches to it as a watcher and follows it to its end."""
    async with serve("--dev", "--agent", "cat", env=clean_env()) as relay:
        url, _ = await dev_banner(relay)
        line = banner_entry(relay, "Watch a connection")
        assert line.endswith("--watch CONNECTION_ID'"), line
        async with connect(url) as controller:
            [opened] = await relay.wait_event("connection opened")
            command = line.replace("CONNECTION_ID", opened["connection_id"])
            async with launched(["sh", "-c", command], env=clean_env()) as watcher:
                await relay.wait_event("watcher attached")
                await controller.close()
                assert await watcher.exit_status() == 0
                shown = (await watcher.rest_of_stdout()).decode()
        assert await relay.stop() == 0
    assert shown.startswith("-- watching connection "), shown


@pytest.mark.parametrize("given", [False, True], ids=["fresh", "given"])
async def test_dev_agents_run_in_a_fresh_workspace_unless_one_is_given(
    tmp_path: Path, given: bool
) -> None:
    """Without --workspace, --dev agents run in a new empty folder inside the run's folder
    (not the directory the relay was started from), which the banner names and the relay
    removes; with it, there."""
    mine = tmp_path / "mine"
    mine.mkdir()
    where = ("--workspace", str(mine)) if given else ()
    cwd_reporter = f"{sys.executable} -c {shlex.quote(CWD_REPORTER)}"
    async with serve("--dev", "--agent", cwd_reporter, *where, env=clean_env()) as relay:
        url, _ = await dev_banner(relay)
        async with connect(url) as ws, asyncio.timeout(10):
            report = json.loads(await ws.recv())
        assert report["cwd"] != os.getcwd()  # where the relay was started: this checkout
        assert report["listing"] == []
        shown = await dev_workspace(relay)
        assert report["cwd"] == shown
        assert await relay.stop() == 0
    if given:
        assert shown == str(mine)
        assert is_folder(str(mine))
    else:
        assert Path(shown).name == "workspace"
        assert Path(shown).parent.name.startswith("acp-relay-dev-")
        assert not is_folder(shown)


def is_folder(path: str) -> bool:
    return os.path.isdir(path)


CWD_REPORTER = (
    "import json, os, sys\n"
    "print(json.dumps({'cwd': os.getcwd(), 'listing': os.listdir('.')}), flush=True)\n"
    "sys.stdin.read()\n"
)


async def test_dev_banner_chat_line_runs_a_bot_whose_thread_reaches_the_dev_relay(
    homeserver: Homeserver, tmp_path: Path
) -> None:
    """The banner's team chat line, run as printed with only the Matrix side filled in (no
    PATH, no secret of one's own): a mention opens a thread that the dev relay's demo
    agent answers, the ticket minted by the line's --ticket-command."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    async with serve("--dev", env=clean_env()) as relay, person(homeserver, alice) as lead:
        await dev_banner(relay)
        argv = shlex.split(banner_entry(relay, "Team chat"))
        assert argv[:5] == [sys.executable, "-m", "relay", "chat", relay.url]
        room = await lead.create_room([bot.user_id])
        given = {"--homeserver": homeserver.url, "--user": bot.user_id, "--room": room,
                 "--token-file": str(token_file(tmp_path, bot)), "--approver": alice.user_id,
                 "--state": str(tmp_path / "chat.sqlite")}  # fmt: skip
        for flag, value in given.items():
            argv[argv.index(flag) + 1] = value
        async with launched(argv, env=clean_env()) as chat:
            await until(lambda: any(e.get("type") == "m.room.member" and e.get("state_key") ==
                                    bot.user_id and e.get("content", {}).get("membership") ==
                                    "join" for e in lead.events.get(room, [])),
                        seconds=20, what="the bot joined")  # fmt: skip
            root = await lead.say(room, f"{bot.user_id} hello from the banner")
            await lead.until_thread(room, root, lambda t: has(t, "End of turn: end_turn"))
            assert has(lead.thread(room, root), "hello from the banner")
            chat.proc.terminate()
        assert await relay.stop() == 0
    assert len(relay.events("connection opened")) == 1
