"""One thread's relay connection: a ResumingLink with the thread as its client side.

Dials the relay as ``connect`` does (:mod:`relay.client.link.dialing`, a ticket per socket
from :mod:`relay.client.link.ticketsource`), needing the resume profile
(:func:`relay.client.link.opening.resumable_socket`), and carries it with
:class:`relay.client.link.resuming.ResumingLink`, this thread being its
:class:`relay.client.link.ends.ClientSide`: the agent's lines go to the thread's ACP
client (:class:`relay.chat.session.ChatSession`), what it asks goes back over the link.

What a restart needs is kept as it goes (:mod:`relay.client.chatbot.store`): the
connection and its resume secret once welcomed, and through the thread's
:class:`relay.client.chatbot.keptlink.KeptLink` each line to the agent before it is sent,
and at each round of edits where the link stands and what the thread shows. Until the
link is open, and if it never is, the thread's link is
:class:`relay.client.chatbot.keptlink.Unlinked`: answers are kept, nothing is sent.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import replace
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from relay.chat.attachments import Attachment, block_of, media_of
from relay.chat.controls import Asked
from relay.chat.session import WAIT_FOR_THE_TURN, ChatSession, Step
from relay.client.chatbot.asking import Asking
from relay.client.chatbot.keptlink import Kept, KeptLink, Unlinked
from relay.client.chatbot.matrix import MediaRefused, opened_file
from relay.client.chatbot.rounds import Bot, Showing, now_text
from relay.client.chatbot.store import ThreadRow
from relay.client.link.dialing import DialConfig, close_failure, ticket_for
from relay.client.link.editorerrors import Failure, cannot_connect
from relay.client.link.opening import OPEN, resumable_socket, welcomed
from relay.client.link.resuming import ResumingLink, start_profile
from relay.client.link.ticketsource import TicketSource, TicketUnavailable, run_ticket_command
from relay.core.resumeprofile import ProfileError, Welcome
from relay.observe import logs
from relay.observe.logs import Logger
from relay.observe.observer import Counters, PumpObserver
from relay.observe.tasks import Tasks


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
        max_attachment_bytes: int = 8 << 20,
    ) -> None:
        self.bot = bot
        self.max_attachment_bytes = max_attachment_bytes
        self.dial = dial
        self.connect_command = connect_command
        self.room = room
        self.root = root
        self.session = session
        self.showing = Showing(bot, room, root, session.view)
        self.asking = Asking(bot, self.showing)
        self.asking.answer_agent = self.to_agent
        self.showing.checkpoint = self.checkpoint
        self.asking.prompter = lambda: self.session.turn_by
        self.log: Logger = bot.log.bind(thread=root)
        self.observer = PumpObserver(self.log, Counters(), Counters())
        self.link: KeptLink | Unlinked = Unlinked(bot.state)
        self.ended = asyncio.Event()  # the thread is over: the connection closes with 1000
        self.ready = asyncio.Event()  # the link is up, or will never be
        self.ticket: str | None = None
        self._in_record = False  # an agent line is being carried out
        self._checkpoint_due = False
        self.tasks = Tasks(self.log)
        self._asking = asyncio.Lock()
        self._task: asyncio.Task[object] | None = None
        self._session: str | None = None

    @property
    def config(self) -> DialConfig:
        return self.dial

    # -- the thread's life ---------------------------------------------------------------

    def open(
        self, first_prompt: str, by: str | None = None, settings: Sequence[Asked] = ()
    ) -> None:
        """A new connection and session: ``settings`` made once it opens (``by``'s, an
        approver's), then ``first_prompt`` (none: '') as its first prompt."""
        for asked in settings:
            self.session.change(asked, by or "")
        if first_prompt:
            self.session.prompt(first_prompt, by)
        self._start(self._opened())

    def restore(self, row: ThreadRow) -> None:
        """The connection of a thread the bot ran before it restarted: resumed."""
        self._start(self._resumed(row))

    def _start(self, opening: Coroutine[Any, Any, None]) -> None:
        self.showing.start()
        self._task = self.tasks.spawn(self._life(opening), "the thread's connection")

    async def _life(self, opening: Coroutine[Any, Any, None]) -> None:
        try:
            await opening
        finally:
            self.ready.set()
        upstream = asyncio.create_task(self._until_ended())
        try:
            await self.link.run(upstream, self.ended)
        finally:
            upstream.cancel()
        await self.asking.no_longer_pending("the connection ended")
        self.ended.set()
        await self.showing.round()
        self.bot.state.end_thread(self.root)
        self.asking.stop()
        await self.showing.stop()

    async def stop_for_restart(self) -> None:
        """The bot stops: keep everything, drop the socket without closing the connection
        (the relay keeps it for its grace, to be resumed by the next start)."""
        self.checkpoint()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.link.drop()
        self.asking.stop()
        await self.showing.stop()
        await self.tasks.stop()

    def prompt(self, text: str, by: str | None = None) -> None:
        """``by``'s prompt, carried out once the link is up (a restored thread resumes
        first), in the order prompts and cancels came; with the files attached since the
        last one, fetched first (a prompt is never sent without one of them)."""
        self.tasks.spawn(self._once_linked(lambda: self._prompted(text, by)), "a prompt")

    def attach(self, attachment: Attachment) -> None:
        """An image or file sent in the thread: it joins the next prompt (or is refused)."""

        def attached() -> Step:
            self.session.attach(attachment, self.max_attachment_bytes)
            return Step()

        self.tasks.spawn(self._once_linked(attached), "an attachment")

    async def _prompted(self, text: str, by: str | None) -> Step:
        """The prompt, with the files attached since the last one if any."""
        if self.session.attached:
            return await self._with_files(text, by)
        return self.session.prompt(text, by)

    async def _with_files(self, text: str, by: str | None) -> Step:
        """The prompt with its files fetched and made blocks; nothing when it cannot be sent
        (the thread says why: a turn runs, or a file could not be had)."""
        if not self.session.idle:
            self.session.view.note(WAIT_FOR_THE_TURN)
            return Step()
        blocks = []
        for attachment in self.session.take_attached():
            media = media_of(attachment.url)
            assert media is not None  # checked when it was attached
            try:
                data = await self.bot.matrix.download(*media, self.max_attachment_bytes)
                if attachment.sealed is not None:
                    data = await opened_file(data, attachment.sealed)
            except MediaRefused as exc:
                return self._not_sent(f"{attachment.name}: {exc}")
            block = block_of(attachment, data, self.max_attachment_bytes)
            if isinstance(block, str):
                return self._not_sent(block)
            blocks.append(block)
        return self.session.prompt(text, by, blocks)

    def _not_sent(self, why: str) -> Step:
        self.session.view.note(
            f"⚠️ The prompt was not sent: {why}. Send the files that can go, then the prompt again."
        )
        self.log.info("a prompt's file could not join it", reason=why)
        return Step()

    def set_control(self, asked: Asked, by: str) -> None:
        """``!mode``, ``!model`` or ``!set`` by ``by`` (an approver), carried out once the link
        is up, in order with the prompts (queued during a turn)."""
        self.tasks.spawn(self._once_linked(lambda: self.session.change(asked, by)), "a change")

    def cancel(self, by: str) -> None:
        """``!cancel`` by ``by``, carried out once the link is up, in order with the prompts:
        the turn's pending permission requests are answered ``cancelled`` as ACP asks, their
        messages saying so."""
        self.tasks.spawn(self._once_linked(self.session.cancel, by), "a cancel")

    async def _once_linked(
        self, step: Callable[[], Step | Awaitable[Step]], cancelled_by: str = ""
    ) -> None:
        await self.ready.wait()
        async with self._asking:  # tasks woken in the order they waited: prompts in order
            if self.ended.is_set():
                return
            made = step()  # a prompt's files are fetched here, in order with the rest
            done = await made if inspect.isawaitable(made) else made
            await self._carry_out(done)
            self.checkpoint()  # a prompt's effect on the session, kept with its line
            if done.cancelled:
                words = f"⏹ Cancelled with the turn by {cancelled_by} at {now_text()}"
                await self.asking.cancelled(done.cancelled, words, cancelled_by)

    def end(self, by: str) -> None:
        """End the session (``!end``): the connection is closed, the agent goes."""
        self.showing.say(f"⏏️ Session ended by {by}.")
        self.ended.set()

    async def _until_ended(self) -> None:
        await self.ended.wait()

    # -- opening and resuming ----------------------------------------------------------------

    async def _opened(self) -> None:
        ticket = await self._box() if self.connect_command is not None else await self._ticket()
        ws = None if ticket is None else await self._resumable(ticket)
        if ws is None:
            return
        welcome = await welcomed(ws, OPEN, self.dial)
        if isinstance(welcome, Failure):
            await self.fail(welcome)
            return
        logs.redactor().add_secret(welcome.secret)
        self.bot.state.connected(self.root, welcome.connection, welcome.secret, welcome.grace)
        self.log.info("connection opened", connection=welcome.connection, grace=welcome.grace)
        self._linked(ws, welcome, Kept())
        self.tasks.spawn(self._carry_out(self.session.start()), "initialize the session")

    async def _resumed(self, row: ThreadRow) -> None:
        assert row.connection is not None
        assert row.secret is not None
        logs.redactor().add_secret(row.secret)
        ticket = await self._ticket()
        ws = None if ticket is None else await self._resumable(ticket)
        if ws is None:
            return
        first = {
            "type": "resume",
            "connection": row.connection,
            "secret": row.secret,
            "ack": row.received,
            "sent": row.sent,
        }
        welcome = await self._welcome_back(ws, first)
        if welcome is None:
            return
        self.log.info(
            "connection resumed after a restart",
            connection=row.connection,
            relay_received=welcome.received,
            resent_after=row.sent,
        )
        self.welcomed(welcome)
        link = self._linked(ws, welcome, Kept(row.received))
        link.sent.last = welcome.received  # what the relay has: later lines are numbered after
        keeping = self.link
        assert isinstance(keeping, KeptLink)
        keeping.replayed = [
            line for _, line in self.bot.state.unacknowledged(self.root, row.checkpointed)
        ]
        again = [line for _, line in self.bot.state.unacknowledged(self.root, welcome.received)]
        if again:
            self.tasks.spawn(keeping.resend(again), "send again what the relay lacks")

    async def _welcome_back(self, ws: ClientConnection, first: dict[str, Any]) -> Welcome | None:
        """The relay's welcome to the resume of a connection kept over a restart; None when
        it has none (the thread told why)."""
        try:
            async with asyncio.timeout(self.dial.open_timeout):
                return await start_profile(ws, first)
        except ConnectionClosed as exc:
            why = exc.rcvd.reason if exc.rcvd is not None else "the socket closed"
            await self.fail(Failure(f"the connection could not be resumed: {why}", {}))
        except (ProfileError, TimeoutError) as exc:
            await self.fail(cannot_connect(self.dial.url, "handshake", str(exc) or "no welcome"))
            ws.transport.abort()
        return None

    def _linked(self, ws: ClientConnection, welcome: Welcome, received: Kept) -> ResumingLink:
        """The link over ``ws``, welcomed, from now on this thread's (kept in the state file)."""
        link = ResumingLink(self, ws, welcome, received)
        self.link = KeptLink(link, received, self.bot.state, self.root, self.tasks)
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
        self.ticket_fetched(ticket)
        return ticket

    async def _ticket(self) -> str | None:
        """A ticket for the next socket; None when there is none (the thread told why)."""
        ticket = await ticket_for(self.dial)
        if isinstance(ticket, Failure):
            await self.fail(ticket)
            return None
        self.ticket_fetched(ticket)
        return ticket

    async def _resumable(self, ticket: str) -> ClientConnection | None:
        """A resumable socket to the relay; None when there is none (the thread told why)."""
        ws = await resumable_socket(self.dial, ticket, "acp-relay chat")
        if isinstance(ws, Failure):
            await self.fail(ws)
            return None
        return ws

    # -- lines to the agent ---------------------------------------------------------------------

    async def to_agent(self, line: bytes, request: str, decision: str) -> bool:
        """The answer to a permission request, kept with its decision, then sent (once the
        link is open, if it opens); False when the request was decided already."""
        await self.ready.wait()
        return await self.link.answer(line, request, decision)

    async def _carry_out(self, step: Step) -> None:
        if self.session.session_id is not None and self.session.session_id != self._session:
            self._session = self.session.session_id  # kept past the thread's end: !reopen
            self.bot.state.set_session(self.root, self._session)
        if step.send:
            await self.link.send(step.send)
        for request in step.requests:
            await self.asking.ask(request)
        if step.failed is not None:
            self.showing.say(f"⚠️ {step.failed}")
            self.ended.set()
        self.showing.wake()

    def checkpoint(self) -> None:
        """Keep where the link stands and what the thread shows; then acknowledge that."""
        if self._in_record:
            self._checkpoint_due = True  # after the record: the snapshot must include it whole
            return
        self._checkpoint_due = False
        self.link.checkpoint(self.session.snapshot())

    # -- ClientSide: what the resuming link needs -----------------------------------------

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
                await self.asking.no_longer_pending("the turn ended")
        finally:
            self._in_record = False
        if self._checkpoint_due or step.requests:
            self.checkpoint()
        return True

    def flush(self) -> None:
        """Nothing is held back."""

    def note_request(self, line: bytes) -> None:
        """Lines to the agent are kept in the state file instead."""

    async def unsent(self, lines: Sequence[bytes]) -> None:
        """The link failed: the thread ends, and so does what it would have sent."""

    def welcomed(self, welcome: Welcome) -> None:
        """A resume welcomed (after a network drop, or a restart): the next one, after a
        restart too, presents this welcome's secret."""
        self.bot.state.welcomed(self.root, welcome.secret, welcome.grace)

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

    async def client_gone(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> str:
        await stop.wait()
        return "the thread ended"

    async def answer_owed(self, why: str) -> None:
        """No request of the chat is owed an answer by the relay."""
