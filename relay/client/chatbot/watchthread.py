"""A thread that follows an editor's connection as its watcher (``share``), where the team
answers the agent's permission requests beside the editor.

Dials the relay as ``watch`` does (:mod:`relay.client.link.dialing`, offering the watch
profile), with
a watcher's ticket from ``--watch-ticket-command`` (given the connection id as its last
argument, and the Matrix id of the person who asked for the share in
``$ACP_RELAY_CHAT_REQUESTER``, so that a control plane may refuse: it then exits non-zero,
and the thread says the share was refused while its words stay in the log; each attach
needs a fresh one). Frames go to :class:`relay.chat.watched.Watched`,
requests to the thread's :class:`relay.client.chatbot.showing.Showing`. An approver's
keycap sends the answer as a watcher; the relay takes the first answer, the editor's or
the team's, and its notice decides what the request's message finally says.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from dataclasses import replace
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay.acp.refusals import id_key
from relay.chat.permissions import outcome_option, request_of
from relay.chat.text import safe_line
from relay.chat.watched import Taken, Watched, WatchStep
from relay.client.chatbot.showing import Bot, Pending, Showing, now_text
from relay.client.link.dialing import WATCHING, DialConfig, close_failure, dial, ticket_for
from relay.client.link.ticketsource import TicketSource
from relay.core import strictjson
from relay.core.editorerrors import Failure
from relay.core.subprotocols import SocketKind
from relay.core.watchprofile import HEADER_ROOM, read_frame
from relay.observe import logs
from relay.observe.logs import Logger

REQUESTER_ENV = "ACP_RELAY_CHAT_REQUESTER"  # who asked for the share, for the ticket command


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
        requester: str = "",
    ) -> None:
        ticket = TicketSource(command=(*command, connection), env=((REQUESTER_ENV, requester),))
        self.dial = replace(
            dial, ticket=ticket, max_message_bytes=dial.max_message_bytes + HEADER_ROOM
        )
        self.bot = bot
        self.room = room
        self.root = root
        self.connection = connection
        self.requester = requester
        self.watched = watched
        self.showing = Showing(bot, room, root, watched.view)
        self.showing.answer_agent = self.answer
        self.showing.checkpoint = self.checkpoint
        self.log: Logger = bot.log.bind(thread=root, watching=connection)
        self.ended = asyncio.Event()
        self.ws: ClientConnection | None = None
        self.ticket: str | None = None
        self.asked: dict[object, str] = {}  # the requests shown, by id key: their message
        self.answered: dict[object, str] = {}  # the requests the chat answered: who, when
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.showing.start()
        self._task = asyncio.create_task(self._life())

    async def _life(self) -> None:
        """Attach, follow until the socket closes, then end (a restart's cancel ends nothing)."""
        if await self._attach():
            await self._follow()
        await self.showing.no_longer_pending("the watch ended")
        await self.showing.round()
        self.bot.state.end_thread(self.root)
        self.ended.set()
        await self.showing.stop()

    def restore(self, pending: list[tuple[str, dict[str, Any]]]) -> None:
        """The requests shown before a restart: answerable again, then attach again."""
        for event_id, record in pending:
            request = request_of(record)
            self.asked[id_key(request.request_id)] = event_id
            self.showing.watch_request(request, event_id)
        self.start()

    async def _attach(self) -> bool:
        ticket = await ticket_for(self.dial)
        if isinstance(ticket, Failure):  # the command's words are the operator's: the log's
            self.log.warning("watch ticket refused", reason=ticket.message, by=self.requester)
            self.showing.say("⚠️ share was refused: --watch-ticket-command gave no watcher's "
                             "ticket for this connection (the bot's log says why).")  # fmt: skip
            return False
        self.ticket = ticket
        logs.redactor().add_ticket(ticket)
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
            await self.showing.ask(request)
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
        if taken.by == "watcher" and ours is not None:
            words = f"{ours}: the chat's answer was taken"
        elif taken.by == "watcher":
            words = f"✅ {what}: another watcher's answer was taken ({now_text()})"
        else:
            late = f"\n(too late: {ours})" if ours is not None else ""
            words = f"✅ {what}: answered in the editor at {now_text()}, and taken{late}"
        self.bot.state.decide(event_id, words)  # an answer from the editor decides it too
        self.showing.forget_request(event_id)
        await self.showing.decided(Pending(taken.request, event_id), words)

    def checkpoint(self) -> None:
        kept = {**self.watched.snapshot(), "requester": self.requester}
        self.bot.state.checkpoint(self.root, 0, 0, 0, kept)

    async def stop_for_restart(self) -> None:
        self.checkpoint()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.ws is not None:
            self.ws.transport.abort()

    def end(self, by: str) -> None:
        self.showing.say(f"⏏️ Watch ended by {by}.")
        if self.ws is not None:
            asyncio.get_running_loop().create_task(self.ws.close(CloseCode.NORMAL_CLOSURE))
