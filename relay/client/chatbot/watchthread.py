"""A thread that follows an editor's connection as its watcher (``share``), where the team
answers the agent's permission requests beside the editor.

Dials the relay as ``watch`` does (:mod:`relay.client.link.dialing`, offering the watch
profile), with
a watcher's ticket from ``--watch-ticket-command`` (given the connection id as its last
argument, and the Matrix id of the person who asked for the share in
``$ACP_RELAY_CHAT_REQUESTER``, so that a control plane may refuse: it then exits non-zero,
and the thread says the share was refused while its words stay in the log; each attach
needs a fresh one). Frames go to :class:`relay.chat.watched.Watched`,
requests to the thread's :class:`relay.client.chatbot.rounds.Showing`. An approver's
keycap sends the answer as a watcher; the relay takes the first answer, the editor's or
the team's, and its notice decides what the request's message finally says.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from dataclasses import replace

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay.acp.refusals import id_key
from relay.chat.permissions import outcome_option, request_of
from relay.chat.text import safe_line
from relay.chat.watched import Taken, Watched, WatchStep
from relay.client.chatbot.asking import Asking, Pending
from relay.client.chatbot.rounds import Bot, Showing, now_text
from relay.client.chatbot.store import KeptRequest
from relay.client.link.dialing import WATCHING, DialConfig, close_failure, dial
from relay.client.link.editorerrors import Failure
from relay.client.link.ticketsource import (
    TicketUnavailable,
    checked_ticket,
    run_ticket_command,
)
from relay.config.chatoptions import BOXES_URL
from relay.core import strictjson
from relay.core.subprotocols import SocketKind
from relay.core.watchprofile import HEADER_ROOM, read_frame
from relay.observe import logs
from relay.observe.logs import Logger
from relay.observe.tasks import Tasks

REQUESTER_ENV = "ACP_RELAY_CHAT_REQUESTER"  # who asked to share, for the control plane
ROOM_ENV = "ACP_RELAY_CHAT_ROOM"  # the room the connection would be shared into
WATCH_TICKET_OUTPUT = (
    "--watch-ticket-command must print a watcher's ticket, or 'URL TICKET' (the URL is "
    "required when the bot runs with --connect-command)"
)


class WatchThread:
    """A thread showing a connection it did not open, answering as one of its watchers."""

    def __init__(
        self,
        bot: Bot,
        dial: DialConfig,
        command: tuple[str, ...],
        room: str,
        root: str,
        connection: str,
        watched: Watched,
        requester: str | None = None,
    ) -> None:
        self.command = (*command, connection)
        self.env = {REQUESTER_ENV: requester or "", ROOM_ENV: room}
        self.dial = replace(dial, max_message_bytes=dial.max_message_bytes + HEADER_ROOM)
        self.bot = bot
        self.room = room
        self.root = root
        self.connection = connection
        self.watched = watched
        self.showing = Showing(bot, room, root, watched.view)
        self.asking = Asking(bot, self.showing)
        self.asking.answer_agent = self.answer
        self.showing.checkpoint = self.checkpoint
        # The editor's turns: the person who shared counts as their prompter (self-approval).
        self.asking.prompter = lambda: requester
        self.asking.decides_here = False  # the relay's notice says whose answer was taken
        self.log: Logger = bot.log.bind(thread=root, watching=connection)
        self.ended = asyncio.Event()
        self.ws: ClientConnection | None = None
        self.ticket: str | None = None
        self.asked: dict[object, str] = {}  # the requests shown, by id key: their message
        self.answered: dict[object, str] = {}  # the requests the chat answered: who, when
        self.tasks = Tasks(self.log)
        self._task: asyncio.Task[object] | None = None

    def start(self) -> None:
        self.showing.start()
        self._task = self.tasks.spawn(self._life(), "the watch")

    async def _life(self) -> None:
        """Attach, follow until the socket closes, then end (a restart's cancel ends nothing)."""
        if await self._attach():
            await self._follow()
        await self.asking.no_longer_pending("the watch ended")
        await self.showing.round()
        self.bot.state.end_thread(self.root)
        self.ended.set()
        self.asking.stop()
        await self.showing.stop()

    def restore(self, pending: list[KeptRequest]) -> None:
        """The requests shown before a restart: answerable again, then attach again."""
        for kept in pending:
            request = request_of(kept.record)
            self.asked[id_key(request.request_id)] = kept.event_id
            self.asking.restore_request(kept)
        self.start()

    async def _attach(self) -> bool:
        given = await self._watch_ticket()
        if given is None:
            return False
        url, ticket = given
        self.dial = replace(self.dial, url=url)
        dialed = await dial(self.dial, ticket, WATCHING)
        if isinstance(dialed, Failure):
            self._said_failure(dialed.message)
            return False
        self.ws = dialed.ws
        if dialed.kind is not SocketKind.WATCHER:
            await dialed.ws.close(CloseCode.NORMAL_CLOSURE)
            self._said_failure(f"the relay at {self.dial.url} does not offer watching")
            return False
        self.log.info("watching a connection", connection=self.connection)
        return True

    async def _watch_ticket(self) -> tuple[str, str] | None:
        """The relay and a watcher's ticket for this connection, as --watch-ticket-command
        prints them (``TICKET``: on the bot's relay; ``URL TICKET``: on the one the control
        plane names), told who asks and from where; None when it gives none (the thread says
        so, the log says why: the command's words are the operator's, not the room's)."""
        try:
            words = (await run_ticket_command(self.command, self.env)).split()
            if len(words) == 2 and words[0].startswith(("ws://", "wss://")):
                url, ticket = words
            elif len(words) == 1 and self.dial.url != BOXES_URL:
                url, ticket = self.dial.url, words[0]
            else:
                raise TicketUnavailable(WATCH_TICKET_OUTPUT)
            ticket = checked_ticket(ticket, "--watch-ticket-command's output")
        except TicketUnavailable as exc:
            why = str(exc).replace("--ticket-command", "--watch-ticket-command")
            self.log.warning("no watcher's ticket: share refused or failed", reason=why)
            self.showing.say(
                "⚠️ share: the control plane gave no watcher's ticket for this connection "
                "(it refused, or it failed: the bot's log says why)."
            )
            return None
        self.ticket = ticket
        logs.redactor().add_ticket(ticket)
        return url, ticket

    async def _follow(self) -> None:
        ws = self.ws
        assert ws is not None
        with suppress(ConnectionClosed):
            while True:
                frame = await ws.recv(decode=False)
                await self._carry_out(self.watched.frame(read_frame(frame)))
        received = ws.protocol.close_rcvd
        if received is not None:
            why = received.reason or f"close code {int(received.code)}"
            self.showing.say(f"⏹ The editor's connection ended: {safe_line(why)}.")
        else:
            self._said_failure(close_failure(ws, self.dial).message)

    def _said_failure(self, message: str) -> None:
        if self.ticket:
            message = message.replace(self.ticket, "[ticket]")
        self.log.warning("watch failed", reason=message)
        self.showing.say(f"⚠️ {safe_line(message, 400)}")

    async def _carry_out(self, step: WatchStep) -> None:
        for request in step.requests:
            await self.asking.ask(request)
            request_id = strictjson.dumps(request.request_id).decode()
            event_id = self.bot.state.shown_request(self.root, request_id)
            if event_id is not None:
                self.asked[id_key(request.request_id)] = event_id
        for taken in step.taken:
            await self._taken(taken)
        self.showing.wake()
        self.checkpoint()

    async def answer(self, line: bytes, event_id: str, words: str) -> bool:
        """An approver's keycap: sent as this watcher's answer; the relay's notice will say
        whose answer was taken."""
        if not self.watched.may_answer or self.ws is None:
            self.showing.say("This watch's ticket may not answer: answer in the editor.")
            return False
        sent = f"{words} — sent; the first answer, the editor's or the chat's, is taken"
        if not self.bot.state.decide(event_id, sent):
            return False
        key = next((k for k, e in self.asked.items() if e == event_id), None)
        self.answered[key] = words
        pending = self.asking.requests.get(event_id)
        if pending is not None:  # said before the answer goes: the relay's notice comes after
            await self.asking.decided(pending, sent)
        with suppress(ConnectionClosed):
            await self.ws.send(line.decode())
        return True

    async def _taken(self, taken: Taken) -> None:
        key = id_key(taken.request.request_id)
        event_id = self.asked.pop(key, None)
        if event_id is None:
            return
        option = outcome_option(taken.request, taken.result)
        what = f"{safe_line(option.name)} ({safe_line(option.kind, 40)})" if option else "cancelled"
        ours = self.answered.pop(key, None)
        chosen = self.asking.chosen.pop(event_id, None)
        outcome = "selected" if option is not None else "cancelled"
        if taken.by == "watcher" and ours is not None:
            words = f"{ours}: the chat's answer was taken"
            by, source, outcome = chosen or ("", "chat", outcome)
        elif taken.by == "watcher":
            words = f"✅ {what}: another watcher's answer was taken ({now_text()})"
            by, source = "another watcher", "watcher"
        else:
            late = f"\n(too late: {ours})" if ours is not None else ""
            words = f"✅ {what}: answered in the editor at {now_text()}, and taken{late}"
            by, source = "the editor", "editor"
        self.asking.audit_decided(event_id, outcome, option, by, source)
        self.bot.state.decide(event_id, words)  # an answer from the editor decides it too
        self.asking.forget_request(event_id)
        await self.asking.decided(Pending(taken.request, event_id), words)

    def checkpoint(self) -> None:
        self.bot.state.checkpoint(self.root, 0, 0, 0, self.watched.snapshot())

    async def stop_for_restart(self) -> None:
        self.checkpoint()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.ws is not None:
            self.ws.transport.abort()
        self.asking.stop()
        await self.showing.stop()
        await self.tasks.stop()

    def end(self, by: str) -> None:
        self.showing.say(f"⏏️ Watch ended by {by}.")
        if self.ws is not None:
            self.tasks.spawn(self.ws.close(CloseCode.NORMAL_CLOSURE), "close the watch")
