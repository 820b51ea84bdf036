"""``acp-relay chat`` as a subprocess, as an operator runs it, and what a test needs around it.

:func:`chat_bot` starts ``python -m relay chat URL`` against the session's Synapse with a
token file (0600), a ticket command that mints with the tests' secret, and a state file;
it keeps every line the bot logged (JSON) for the log audit and for waits.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.acp.changes import Option
from relay.chat.audit import asked
from relay.chat.permissions import Request, request_state
from relay.chat.rules import Tally, tally_state
from relay.client.chatbot.store import State
from tests.support.env import secret_env
from tests.support.matrix import Person, Seen
from tests.support.synapse import Account, Homeserver
from tests.support.waiting import until

TICKET_COMMAND = shlex.join([sys.executable, "-m", "relay", "ticket"])


@dataclass
class BotRun:
    """A running bot and what it logged so far."""

    proc: asyncio.subprocess.Process
    lines: list[str]
    reader: asyncio.Task[None]

    def records(self) -> list[dict[str, Any]]:
        found = []
        for line in self.lines:
            with suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    found.append(record)
        return found

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("event") == name]

    async def logged(self, name: str, count: int = 1, seconds: float = 20) -> list[dict[str, Any]]:
        """Until the bot logged ``count`` records named ``name``."""

        def found() -> bool:
            if self.proc.returncode is not None and self.reader.done():
                raise AssertionError(f"the bot exited before {name!r}: {self.lines[-20:]}")
            return len(self.events(name)) >= count

        await until(found, seconds=seconds, what=lambda: f"{count} x {name!r}: {self.lines[-20:]}")
        return self.events(name)

    async def stop(self, sig: signal.Signals = signal.SIGTERM, seconds: float = 20) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        async with asyncio.timeout(seconds):
            status = await self.proc.wait()
            await self.reader
        return status


async def _collect(stream: asyncio.StreamReader, into: list[str]) -> None:
    async for raw in stream:
        into.append(raw.decode("utf-8", "replace").rstrip("\n"))


def token_file(folder: Path, account: Account) -> Path:
    path = folder / f"{account.localpart}.token"
    path.write_text(account.token + "\n")
    path.chmod(0o600)
    return path


@asynccontextmanager
async def chat_bot(
    server: Homeserver,
    bot: Account,
    url: str | None,
    *,
    folder: Path,
    rooms: Sequence[str],
    approvers: Sequence[str],
    extra: Sequence[str] = (),
    state: Path | None = None,
    ticket_command: str = TICKET_COMMAND,
) -> AsyncIterator[BotRun]:
    """``acp-relay chat URL`` for the block (killed at the end if still running); without a
    URL, ``extra`` says where threads connect (``--connect-command``)."""
    argv = [
        sys.executable, "-m", "relay", "chat", *([url] if url else []),
        "--homeserver", server.url, "--user", bot.user_id,
        "--token-file", str(token_file(folder, bot)),
        *(["--ticket-command", ticket_command] if url else []),
        "--state", str(state or folder / "chat.sqlite"),
        "--log-format", "json", "--log-level", "debug",
        *[arg for room in rooms for arg in ("--room", room)],
        *[arg for user in approvers for arg in ("--approver", user)],
        *extra,
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        *argv, env=secret_env(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, limit=1 << 20,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    run = BotRun(proc, lines, asyncio.create_task(_collect(proc.stderr, lines)))
    try:
        yield run
    finally:
        if proc.returncode is None:
            proc.kill()
        with suppress(TimeoutError):
            async with asyncio.timeout(10):
                await proc.wait()
                await run.reader


@dataclass
class Args:
    """What every start of the bot in one test is given."""

    homeserver: Homeserver
    bot: Account
    url: str | None
    folder: Path
    rooms: list[str]
    approvers: list[str]
    state: Path
    extra: Sequence[str] = ()
    ticket_command: str = TICKET_COMMAND

    def start(self) -> AbstractAsyncContextManager[BotRun]:
        """``acp-relay chat`` with these arguments, for the block."""
        return chat_bot(
            self.homeserver,
            self.bot,
            self.url,
            folder=self.folder,
            rooms=self.rooms,
            approvers=self.approvers,
            state=self.state,
            extra=self.extra,
            ticket_command=self.ticket_command,
        )


async def request_in(who: Person, room: str, root: str, nth: int, seconds: float = 30) -> Seen:
    """The thread's ``nth`` permission request (1-based; pending or decided), once the bot's
    keycaps are under it."""

    def asked(thread: list[Seen]) -> list[Seen]:
        return [s for s in thread if s.body.startswith("🔐")]

    await who.until_thread(room, root, lambda t: len(asked(t)) >= nth and len(
        asked(t)[nth - 1].reactions) >= 2, seconds=seconds)  # fmt: skip
    return asked(who.thread(room, root))[nth - 1]


def keep_request(state: State, root: str, event_id: str, at: float) -> None:
    """A permission request kept in ``state`` as a thread shows it (its tally and audit
    record too), asked at ``at``."""
    request = Request(f"r-{event_id}", "Run", "execute", "", (Option("a", "Allow", "allow_once"),))
    tally = tally_state(Tally(None, "@alice:t"))
    state.request_shown(root, event_id, request_state(request), tally,
                        asked(request, "!r", root, event_id, at))  # fmt: skip
