"""One thread's relay connection: a ResumingLink with the thread as its client side.

Dials the relay as ``connect`` does (:mod:`relay.client.link.dialing`, a ticket per socket
from :mod:`relay.client.link.ticketsource`) and carries the resume profile with
:class:`relay.client.link.resuming.ResumingLink`, this thread being its
:class:`relay.client.link.resuming.EditorSide`: the agent's lines go to the thread's ACP
client (:class:`relay.chat.session.ChatSession`), what it asks goes back over the link.

What a restart needs is kept as it goes (:mod:`relay.client.chatbot.state`): the
connection and its resume secret once welcomed, each line to the agent before it is
sent, and at each round of edits where the link stands and what the thread shows. The
relay is told a record was received only once that is kept (:class:`Kept`), so a bot
killed at any moment resumes from what it kept and the relay still has the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from contextlib import suppress
from dataclasses import replace
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.frames import CloseCode

from relay.chat.session import ChatSession, Step
from relay.client.chatbot.showing import Bot, Showing
from relay.client.chatbot.state import ThreadRow
from relay.client.link.dialing import DialConfig, close_failure, connect_failure, open_socket
from relay.client.link.resuming import SUBPROTOCOLS, ResumingLink, start_profile
from relay.client.link.ticketsource import (
    TicketSource,
    TicketUnavailable,
    fetch_ticket,
    run_ticket_command,
)
from relay.core.editorerrors import Failure, cannot_connect
from relay.core.resumeprofile import PROFILE, ProfileError, ack_frame
from relay.core.windows import Received
from relay.observe import logs
from relay.observe.logs import Logger
from relay.observe.observer import Counters, PumpObserver


class Kept(Received):
    """The records received, acknowledged only up to the last one the state file keeps."""

    def __init__(self, kept: int = 0) -> None:
        super().__init__()
        self.last = self.acked = self.kept = kept

    def due(self) -> bool:
        return self.kept - self.acked >= self.ack_every

    def ack(self) -> int | None:
        if self.kept <= self.acked:
            return None
        self.acked = self.kept
        return self.kept


class SessionThread:
    """A thread that runs one ACP session over one relay connection."""

    def __init__(
        self,
        bot: Bot,
        dial: DialConfig,
        room: str,
        root: str,
        session: ChatSession,
        connect_command: tuple[str, ...] | None = None,
    ) -> None:
        self.bot = bot
        self.dial = dial
        self.connect_command = connect_command
        self.room = room
        self.root = root
        self.session = session
        self.showing = Showing(bot, room, root, session.view)
        self.showing.answer_agent = self.to_agent
        self.showing.checkpoint = self.checkpoint
        self.log: Logger = bot.log.bind(thread=root)
        self.observer = PumpObserver(self.log, Counters(), Counters())
        self.link: ResumingLink | None = None
        self.ended = asyncio.Event()  # the thread is over: the connection closes with 1000
        self.ready = asyncio.Event()  # the link is up, or will never be
        self.ticket: str | None = None
        self._sending = asyncio.Lock()
        self._in_record = False  # an agent line is being carried out
        self._checkpoint_due = False
        self._task: asyncio.Task[None] | None = None

    @property
    def config(self) -> DialConfig:
        return self.dial

    # -- the thread's life ---------------------------------------------------------------

    def open(self, first_prompt: str) -> None:
        """A new connection and session, ``first_prompt`` as its first prompt."""
        self.session.prompt(first_prompt)
        self._start(self._opened())

    def restore(self, row: ThreadRow) -> None:
        """The connection of a thread the bot ran before it restarted: resumed."""
        self._start(self._resumed(row))

    def _start(self, opening: Coroutine[Any, Any, ResumingLink | None]) -> None:
        self.showing.start()
        self._task = asyncio.create_task(self._life(opening))

    async def _life(self, opening: Coroutine[Any, Any, ResumingLink | None]) -> None:
        try:
            link = await opening
        finally:
            self.ready.set()
        if link is not None:
            upstream = asyncio.create_task(self._until_ended())
            try:
                await link.run(upstream, self.ended)
            finally:
                upstream.cancel()
        await self.showing.no_longer_pending("the connection ended")
        self.ended.set()
        await self.showing.round()
        self.bot.state.end_thread(self.root)
        await self.showing.stop()

    async def stop_for_restart(self) -> None:
        """The bot stops: keep everything, drop the socket without closing the connection
        (the relay keeps it for its grace, to be resumed by the next start)."""
        self.checkpoint()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.link is not None:
            self.link.ws.transport.abort()
        await self.showing.stop()

    def end(self, by: str) -> None:
        """End the session (``!end``): the connection is closed, the agent goes."""
        self.showing.say(f"⏏️ Session ended by {by}.")
        self.ended.set()

    async def _until_ended(self) -> None:
        await self.ended.wait()

    # -- opening and resuming ----------------------------------------------------------------

    async def _opened(self) -> ResumingLink | None:
        ticket = None
        if self.connect_command is not None:
            ticket = await self._box()
            if ticket is None:
                return None
        ws = await self._dial(ticket)
        if ws is None:
            return None
        try:
            async with asyncio.timeout(self.dial.open_timeout):
                welcome = await start_profile(ws, {"type": "open"})
        except (ConnectionClosed, ProfileError, TimeoutError) as exc:
            await self.fail(cannot_connect(self.dial.url, "handshake", str(exc) or "no welcome"))
            ws.transport.abort()
            return None
        logs.redactor().add_secret(welcome.secret)
        self.bot.state.connected(self.root, welcome.connection, welcome.secret, welcome.grace)
        self.log.info("connection opened", connection=welcome.connection, grace=welcome.grace)
        link = self.link = ResumingLink(self, ws, welcome)
        link.received = Kept()
        asyncio.get_running_loop().create_task(self._carry_out(self.session.start()))
        return link

    async def _resumed(self, row: ThreadRow) -> ResumingLink | None:
        assert row.connection is not None
        assert row.secret is not None
        logs.redactor().add_secret(row.secret)
        ws = await self._dial()
        if ws is None:
            return None
        first = {"type": "resume", "connection": row.connection, "secret": row.secret,
                 "ack": row.received, "sent": row.sent}  # fmt: skip
        try:
            async with asyncio.timeout(self.dial.open_timeout):
                welcome = await start_profile(ws, first)
        except ConnectionClosed as exc:
            why = exc.rcvd.reason if exc.rcvd is not None else "the socket closed"
            await self.fail(Failure(f"the connection could not be resumed: {why}", {}))
            return None
        except (ProfileError, TimeoutError) as exc:
            await self.fail(cannot_connect(self.dial.url, "handshake", str(exc) or "no welcome"))
            ws.transport.abort()
            return None
        self.log.info(
            "connection resumed after a restart",
            connection=row.connection,
            relay_received=welcome.received,
            resent_after=row.sent,
        )
        link = self.link = ResumingLink(self, ws, welcome)
        link.received = Kept(row.received)
        link.sent.last = welcome.received
        again = self.bot.state.unacknowledged(self.root, welcome.received)
        if again:
            asyncio.get_running_loop().create_task(self._send([line for _, line in again]))
        return link

    async def _box(self) -> str | None:
        """--connect-command: this thread's relay URL and first ticket (later tickets from the
        command given the URL); None when it failed (the thread told why)."""
        assert self.connect_command is not None
        try:
            words = (await run_ticket_command(self.connect_command)).split()
        except TicketUnavailable as exc:
            why = str(exc).replace("--ticket-command", "--connect-command")
            await self.fail(cannot_connect(self.dial.url, "ticket", why))
            return None
        if len(words) != 2 or not words[0].startswith(("ws://", "wss://")):
            why = "--connect-command must print one line: a ws:// or wss:// URL and a ticket"
            await self.fail(cannot_connect(self.dial.url, "ticket", why))
            return None
        url, ticket = words
        self.dial = replace(
            self.dial, url=url, ticket=TicketSource(command=(*self.connect_command, url))
        )
        self.bot.state.set_url(self.root, url)
        return ticket

    async def _dial(self, ticket: str | None = None) -> ClientConnection | None:
        try:
            self.ticket = ticket or await fetch_ticket(self.dial.ticket)
        except TicketUnavailable as exc:
            await self.fail(cannot_connect(self.dial.url, "ticket", str(exc)))
            return None
        self.ticket_fetched(self.ticket)
        try:
            ws = await open_socket(self.dial, self.ticket, SUBPROTOCOLS)
        except (InvalidHandshake, OSError) as exc:
            await self.fail(connect_failure(exc, self.dial))
            return None
        if ws.subprotocol != PROFILE:
            await ws.close(CloseCode.NORMAL_CLOSURE)
            await self.fail(
                cannot_connect(
                    self.dial.url,
                    "handshake",
                    "the relay does not offer resuming, which acp-relay chat needs",
                )
            )
            return None
        return ws

    # -- lines to the agent ---------------------------------------------------------------------

    async def to_agent(self, line: bytes, request: str, decision: str) -> bool:
        """The answer to a permission request, kept with its decision, then sent; False when
        the request was decided already."""
        await self.ready.wait()
        link = self.link
        if link is None:
            return self.bot.state.decide(request, decision)
        async with self._sending:
            seq = link.sent.last + 1
            if not self.bot.state.decide(request, decision, (seq, line)):
                return False
            await link.send_lines([line])
        return True

    async def _send(self, lines: list[bytes]) -> None:
        """Keep each line in the state file, then send it (numbered as the link numbers it)."""
        link = self.link
        if link is None:
            return
        async with self._sending:
            for line in lines:
                self.bot.state.outgoing(self.root, link.sent.last + 1, line)
                await link.send_lines([line])

    async def _carry_out(self, step: Step) -> None:
        if step.send:
            await self._send(step.send)
        for request in step.requests:
            await self.showing.ask(request)
        if step.failed is not None:
            self.showing.say(f"⚠️ {step.failed}")
            self.ended.set()
        self.showing.wake()

    def checkpoint(self) -> None:
        """Keep where the link stands and what the thread shows; then acknowledge that."""
        link = self.link
        if link is None or not isinstance(link.received, Kept):
            return
        if self._in_record:
            self._checkpoint_due = True  # after the record: the snapshot must include it whole
            return
        self._checkpoint_due = False
        received = link.received
        acked_by_relay = link.sent.last - len(link.sent)
        self.bot.state.checkpoint(
            self.root, link.sent.last, received.last, acked_by_relay, self.session.snapshot()
        )
        received.kept = received.last
        ack = received.ack()
        if ack is not None and link.attached.is_set():
            asyncio.get_running_loop().create_task(self._ack(link, ack))

    async def _ack(self, link: ResumingLink, ack: int) -> None:
        with suppress(ConnectionClosed):
            await link.frames.send_frames([ack_frame(ack)])

    # -- EditorSide: what the resuming link needs -----------------------------------------

    def lines_out(self) -> SessionThread:
        return self

    async def write(self, line: bytes) -> bool:
        """An agent line: to the session; what it asks is carried out; then, if a round
        wanted to keep the thread meanwhile, it is kept (a record is kept whole or not)."""
        self._in_record = True
        try:
            was_running = self.session.turn_running
            step = self.session.agent_line(line)
            await self._carry_out(step)
            if was_running and not self.session.turn_running:
                await self.showing.no_longer_pending("the turn ended")
        finally:
            self._in_record = False
        if self._checkpoint_due or step.requests:
            self.checkpoint()
        return True

    def flush(self) -> None:
        """Nothing is held back."""

    def note_request(self, line: bytes) -> None:
        """Lines to the agent are kept in the state file instead."""

    def ticket_fetched(self, ticket: str) -> None:
        self.ticket = ticket
        logs.redactor().add_ticket(ticket)

    async def carry(
        self,
        ws: ClientConnection,
        downstream: Coroutine[Any, Any, bool],
        upstream: asyncio.Task[None],
        stop: asyncio.Event,
    ) -> Failure | None:
        """Receive until the socket is lost (why) or the thread ends (None: closed, 1000)."""
        receiving = asyncio.create_task(downstream)
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({receiving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if receiving.done():
                return close_failure(ws, self.dial)
            await ws.close(CloseCode.NORMAL_CLOSURE)
            return None
        finally:
            for task in (receiving, stopping):
                task.cancel()
            await asyncio.gather(receiving, stopping, return_exceptions=True)

    async def fail(self, failure: Failure) -> None:
        failure = failure.redacted(self.ticket)
        self.log.warning("relay connection ended", **failure.log_fields())
        self.showing.say(f"⚠️ {failure.message}")

    async def editor_gone(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> str:
        await stop.wait()
        return "the thread ended"

    async def answer_owed(self, why: str) -> None:
        """No request of the chat is owed an answer by the relay."""
