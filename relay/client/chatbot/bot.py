"""``acp-relay chat``: the bot. Syncs with the homeserver and runs a thread per session.

It serves the rooms it is given and ignores every other room and invitation. A member
who may prompt opens a thread by mentioning the bot; each thread is one relay
connection and one ACP session (:mod:`relay.client.chatbot.sessionthread`). Reactions on a
permission request go to its thread. Each timeline event is handled once: its id is
noted in the state file before it is acted on, and the sync position is kept after each
batch; on the first start only what comes after it is acted on. An encrypted room is
said to be unsupported, in the room and in the log. On a restart, every thread whose
connection was live is resumed (:meth:`SessionThread.restore`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from mautrix.errors import MatrixRequestError

from relay import __version__
from relay.chat.access import Access
from relay.chat.commands import Cancel, End, Ignore, Open, Prompt, Share, meaning
from relay.chat.events import Encryption, Message, Reaction, in_thread, message, read_event
from relay.chat.permissions import request_of
from relay.chat.session import ChatSession
from relay.chat.text import safe_line
from relay.chat.turns import Thoughts
from relay.chat.watched import Watched
from relay.client.chatbot.matrix import MatrixSession
from relay.client.chatbot.sessionthread import SessionThread
from relay.client.chatbot.showing import Showing
from relay.client.chatbot.state import State, ThreadKind, ThreadRow
from relay.client.chatbot.watchthread import WatchThread
from relay.client.link.dialing import DialConfig
from relay.client.link.ticketsource import TicketSource
from relay.observe.logs import Logger
from relay.observe.tasks import Tasks

PRUNE_EVERY = 500  # sync batches between two prunings of the handled events' ids
MAX_EARLY = 256  # events with reactions that no request owns (yet), remembered
CONNECTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,99}")
SHARE_NO_URL = (
    "share takes a connection id only: the bot follows connections on the relay its "
    "operator configured (or the one its control plane names), never at a URL given here, "
    "which would receive a ticket that can answer the editor's requests."
)
ENCRYPTED_WORDS = (
    "🔒 This room is end-to-end encrypted: acp-relay chat does not support encrypted rooms "
    "(it cannot read what is said here). Use a room without encryption."
)


@dataclass(frozen=True)
class ChatConfig:
    """What the bot needs, resolved (the token read from its file or the environment)."""

    homeserver: str
    user: str
    token: str
    rooms: frozenset[str]
    access: Access
    dial: DialConfig
    cwd: str
    state: str
    thoughts: Thoughts = "folded"
    approval_timeout: float | None = None
    edit_interval: float = 1.0
    watch_ticket_command: tuple[str, ...] | None = None  # given a connection id: a watcher's ticket
    connect_command: tuple[str, ...] | None = None  # prints "URL TICKET" for each new thread


class ChatBot:
    """The bot: its Matrix session, its state file, its threads."""

    def __init__(self, config: ChatConfig, matrix: MatrixSession, state: State, log: Logger):
        self.config = config
        self.matrix = matrix
        self.state = state
        self.log = log
        self.access = config.access
        self.approval_timeout = config.approval_timeout
        self.edit_interval = config.edit_interval
        self.threads: dict[str, SessionThread | WatchThread] = {}
        self.request_owners: dict[str, Showing] = {}
        self.power: dict[str, dict[str, Any] | None] = {}
        # Reactions on an event no request owns yet: the sync can bring a reaction on a
        # request's message before the send that posted it has returned. Bounded.
        self.early: OrderedDict[str, list[tuple[str, Reaction]]] = OrderedDict()
        self.encrypted: set[str] = set()
        self.tasks = Tasks(log)
        self.first_start = 0  # ms since the epoch: nothing older is acted on

    def owns_request(self, event_id: str, showing: Showing | None) -> None:
        if showing is None:
            self.request_owners.pop(event_id, None)
            return
        self.request_owners[event_id] = showing
        for early in self.early.pop(event_id, []):  # reactions synced before the request was kept
            self.tasks.spawn(self._reaction(showing, *early), "a reaction that came early")

    # -- running -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, started_ms: int | None = None) -> None:
        """Sync and act until ``stop``; the threads' connections are then kept for a restart.
        ``started_ms``: when the process started (before it joined any room), in ms."""
        self.restore_threads()
        since = self.state.sync_token()
        first = since is None
        now = started_ms if started_ms is not None else int(time.time() * 1000)
        self.first_start = self.state.first_start(now if first else None)
        batches = 0
        try:
            while not stop.is_set():
                answer = await unless(self.matrix.sync(since, 0 if first else None), stop)
                if answer is None:
                    break
                # The first sync too: what it brings from before the first start (its events'
                # origin_server_ts) or from before the bot joined is not acted on, whatever
                # position the homeserver answered it from.
                await self.handle(answer, act=True)
                since = (
                    answer.get("next_batch") if isinstance(answer.get("next_batch"), str) else since
                )
                # Our own sync loop rather than mautrix's Client.start(): the position is kept
                # only once the whole batch is handled (each event id noted before it is acted
                # on), so a kill mid-batch sees the batch again and loses none of it, where the
                # library's sync store may keep the position before its handlers have run.
                if since is not None:
                    self.state.save_sync_token(since)
                if first:
                    self.log.info("first start: acting on what comes from now on")
                first = False
                batches += 1
                if batches % PRUNE_EVERY == 0:
                    self.state.forget_old_events()
        finally:
            for thread in list(self.threads.values()):
                await thread.stop_for_restart()
            await self.tasks.stop()
            self.state.forget_old_events()

    def restore_threads(self) -> None:
        for row in self.state.live_threads():
            if row.kind is ThreadKind.WATCH and row.connection is not None:
                self._restore_watch(row)
                continue
            if row.kind is not ThreadKind.SESSION or row.connection is None or row.secret is None:
                self.state.end_thread(row.root)
                continue
            thread = self._thread(row.room, row.root, row.url)
            if row.view is not None:
                thread.session.restore(row.view)
            for event_id, record in self.state.pending_requests(row.root):
                thread.showing.watch_request(request_of(record), event_id)
            thread.restore(row)
            self.log.info("thread restored", thread=row.root, connection=row.connection)

    def _restore_watch(self, row: ThreadRow) -> None:
        assert row.connection is not None
        watch = self._watch(row.room, row.root, row.connection, row.opened_by)
        if watch is None:
            self.state.end_thread(row.root)
            return
        if row.view is not None:
            watch.watched.restore(row.view)
        watch.restore(self.state.pending_requests(row.root))
        self.log.info("watch thread restored", thread=row.root, connection=row.connection)

    def _watch(
        self, room: str, root: str, connection: str, requester: str | None
    ) -> WatchThread | None:
        command = self.config.watch_ticket_command
        if command is None:
            return None
        watched = Watched(self.config.thoughts)
        watch = WatchThread(
            self, self.config.dial, command, room, root, connection, watched, requester
        )
        self.threads[root] = watch
        self.tasks.spawn(self._forget_when_over(watch), "forget the watch once over")
        return watch

    def _thread(self, room: str, root: str, url: str | None = None) -> SessionThread:
        session = ChatSession(self.config.cwd, version=__version__, thoughts=self.config.thoughts)
        dial = self.config.dial
        if self.config.connect_command is not None and url is not None:  # a box's, resumed
            dial = replace(
                dial, url=url, ticket=TicketSource(command=(*self.config.connect_command, url))
            )
        thread = SessionThread(self, dial, room, root, session, self.config.connect_command)
        self.threads[root] = thread
        self.tasks.spawn(self._forget_when_over(thread), "forget the thread once over")
        return thread

    async def _forget_when_over(self, thread: SessionThread | WatchThread) -> None:
        await thread.ended.wait()
        self.threads.pop(thread.root, None)

    # -- a sync's answer -------------------------------------------------------------------------

    async def handle(self, answer: dict[str, Any], *, act: bool) -> None:
        rooms = answer.get("rooms")
        rooms = rooms if isinstance(rooms, dict) else {}
        for room in _keys(rooms.get("invite")):
            if room in self.config.rooms:
                try:
                    await self.matrix.join(room)
                except MatrixRequestError as exc:
                    self.matrix.refused("could not join a served room", exc, room=room)
                    continue
                # Said once joined: what was said before the join is not acted on.
                self.log.info("invited to a served room: joining", room=room)
            else:
                self.log.info("invitation to a room not served: ignored", room=room)
        joined = rooms.get("join")
        for room, data in joined.items() if isinstance(joined, dict) else []:
            if room in self.config.rooms and isinstance(data, dict):
                await self._room(room, data, act=act)

    async def _room(self, room: str, data: dict[str, Any], *, act: bool) -> None:
        """One room's part of a batch, in the homeserver's order: the state block (the state
        before the timeline), then each timeline event at its place, a power-level change
        taking effect for what follows it only."""
        for event in _events(data.get("state")):
            await self._state_event(room, event)
        timeline = _events(data.get("timeline"))
        joined_at = _own_join(timeline, self.config.user)
        for place, event in enumerate(timeline):
            await self._state_event(room, event)
            if not act or place <= joined_at:
                continue  # the first sync, or what was said before the bot joined
            if room not in self.power and isinstance(event.get("event_id"), str):
                # Not known yet (a restart): the levels at this event, not the latest ones,
                # which may come from a change made after it.
                self.power[room] = await self.matrix.power_levels(room, at=event["event_id"])
            try:
                await self._timeline_event(room, event)
            except MatrixRequestError as exc:  # costs this event, never the bot
                self.matrix.refused("the homeserver refused a request", exc, room=room)

    async def _state_event(self, room: str, event: dict[str, Any]) -> None:
        if event.get("type") == "m.room.power_levels" and event.get("state_key") == "":
            content = event.get("content")
            self.power[room] = content if isinstance(content, dict) else None
        elif event.get("type") == "m.room.encryption":
            await self._encrypted(room)

    async def _encrypted(self, room: str) -> None:
        if room in self.encrypted:
            return
        self.encrypted.add(room)
        self.log.warning("served room is encrypted: not supported", room=room)
        await self.matrix.send_or_log(
            room, "m.room.message", message(ENCRYPTED_WORDS), f"encrypted-{int(time.time())}"
        )

    async def _timeline_event(self, room: str, event: dict[str, Any]) -> None:
        event_id = event.get("event_id")
        if not isinstance(event_id, str) or event.get("sender") == self.config.user:
            return
        stamp = event.get("origin_server_ts")
        if not isinstance(stamp, int) or stamp < self.first_start:
            self.log.debug("event from before the first start: not acted on", event_id=event_id)
            return
        if not self.state.first_handling(event_id, int(time.time() * 1000)):
            return  # handled before a restart
        incoming = read_event(event)
        if isinstance(incoming, Message):
            await self._message(room, incoming)
        elif isinstance(incoming, Reaction):
            owner = self.request_owners.get(incoming.target)
            if owner is not None:
                await self._reaction(owner, room, incoming)
            else:
                self.early.setdefault(incoming.target, []).append((room, incoming))
                while len(self.early) > MAX_EARLY:
                    self.early.popitem(last=False)
        elif isinstance(incoming, Encryption):
            await self._encrypted(room)

    async def _reaction(self, owner: Showing, room: str, reaction: Reaction) -> None:
        power = await self._power(room)
        await owner.reacted(reaction.sender, reaction.target, reaction.key, power)

    async def _power(self, room: str) -> dict[str, Any] | None:
        if room not in self.power:
            self.power[room] = await self.matrix.power_levels(room)
        return self.power[room]

    async def _message(self, room: str, said: Message) -> None:
        known = said.thread is not None and said.thread in self.threads
        what = meaning(said, bot=self.config.user, thread_known=known)
        if isinstance(what, Ignore):
            return
        if not self.access.may_prompt(said.sender, await self._power(room)):
            await self._refuse(room, said)
            return
        if isinstance(what, Share):
            await self._share(room, said, what)
            return
        if isinstance(what, Open):
            url = self.config.dial.url
            self.state.add_thread(said.event_id, room, ThreadKind.SESSION, url, time.time())
            opened = self._thread(room, said.event_id)
            self.log.info("thread opened", thread=said.event_id, by=said.sender)
            opened.open(what.prompt)
            return
        assert said.thread is not None
        thread = self.threads[said.thread]
        if isinstance(thread, WatchThread):
            if isinstance(what, End):
                thread.end(safe_line(said.sender))
            else:
                thread.showing.say("This thread follows the editor's session: prompt there.")
            return
        if isinstance(what, Prompt):
            await thread._carry_out(thread.session.prompt(what.text))
        elif isinstance(what, Cancel):
            await thread._carry_out(thread.session.cancel())
        elif isinstance(what, End):
            thread.end(safe_line(said.sender))

    async def _share(self, room: str, said: Message, share: Share) -> None:
        """Follow an editor's connection in a new thread rooted at ``said``: on the relay the
        operator configured (or the one --watch-ticket-command names), never at a URL from
        the chat, which would receive the watcher's ticket."""
        if not self.access.may_share(said.sender, await self._power(room)):
            who = "approvers" if self.access.share_by == "approvers" else "prompters"
            await self._reply(room, said, f"share: only {who} may attach this room to an "
                                          "editor's connection.")  # fmt: skip
            return
        if share.url is not None:
            await self._reply(room, said, SHARE_NO_URL)
            return
        if self.config.watch_ticket_command is None:
            await self._reply(room, said, "share needs the bot started with "
                                          "--watch-ticket-command")  # fmt: skip
            return
        if not CONNECTION_ID.fullmatch(share.connection):
            await self._reply(room, said, "share: expected a connection id (letters, digits "
                                          "and dashes, as the relay's logs show it)")  # fmt: skip
            return
        url = self.config.dial.url
        self.state.add_thread(said.event_id, room, ThreadKind.WATCH, url, time.time(), said.sender)
        self.state.connected(said.event_id, share.connection, "", 0.0)
        watch = self._watch(room, said.event_id, share.connection, said.sender)
        assert watch is not None
        self.log.info("share opened", thread=said.event_id, by=said.sender,
                      connection=share.connection)  # fmt: skip
        watch.start()

    async def _reply(self, room: str, said: Message, words: str) -> None:
        content = in_thread(message(words), said.thread or said.event_id, said.event_id)
        await self.matrix.send_or_log(room, "m.room.message", content, f"reply-{said.event_id}")

    async def _refuse(self, room: str, said: Message) -> None:
        """Someone not allowed to prompt: a reply saying so, in the thread it was in."""
        root = said.thread or said.event_id
        words = (
            f"{safe_line(said.sender)}: you may not prompt the agent here; ask an "
            "approver to add you with --prompter."
        )
        self.log.info("prompt from someone not allowed to prompt", user=said.sender, room=room)
        await self.matrix.send_or_log(
            room,
            "m.room.message",
            in_thread(message(words), root, said.event_id),
            f"refused-{said.event_id}",
        )


async def unless(call: Any, stop: asyncio.Event) -> Any:
    """Await ``call`` unless ``stop`` comes first (None then)."""
    task = asyncio.ensure_future(call)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


def _keys(value: Any) -> list[str]:
    return [key for key in value if isinstance(key, str)] if isinstance(value, dict) else []


def _events(value: Any) -> list[dict[str, Any]]:
    events = value.get("events") if isinstance(value, dict) else None
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


def _own_join(timeline: list[dict[str, Any]], user: str) -> int:
    """The place of the bot's own join in ``timeline`` (-1 if it is not there): what comes
    before it was said before the bot was in the room."""
    for place in range(len(timeline) - 1, -1, -1):
        event = timeline[place]
        content = event.get("content")
        if (
            event.get("type") == "m.room.member"
            and event.get("state_key") == user
            and isinstance(content, dict)
            and content.get("membership") == "join"
        ):
            return place
    return -1
