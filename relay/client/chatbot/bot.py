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
import time
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mautrix.errors import MatrixRequestError

from relay import __version__
from relay.chat.attachments import Attachment
from relay.chat.events import (
    Encryption,
    Message,
    Reaction,
    events_of,
    message,
    read_event,
    rooms_of,
)
from relay.chat.limits import Idleness
from relay.chat.session import ChatSession
from relay.chat.watched import Watched
from relay.client.chatbot.botconfig import ChatConfig
from relay.client.chatbot.matrix import Later, MatrixSession
from relay.client.chatbot.messages import on_attachment, on_message
from relay.client.chatbot.rounds import Answerable
from relay.client.chatbot.sessionthread import SessionThread
from relay.client.chatbot.store import State, ThreadKind, ThreadRow
from relay.client.chatbot.threadcare import end_idle_threads
from relay.client.chatbot.watchthread import WatchThread
from relay.client.link.ticketsource import TicketSource
from relay.observe.logs import Logger
from relay.observe.tasks import Tasks

if TYPE_CHECKING:
    from relay.client.chatbot.crypto import RoomCrypto

PRUNE_EVERY = 500  # sync batches between two prunings of the handled events' ids
MAX_EARLY = 256  # events with reactions that no request owns (yet), remembered
RESTARTED_BEFORE_OPENING = (
    "↻ The bot restarted before this session opened: opening it now, with the first prompt."
)
ENCRYPTED_WORDS = (
    "🔒 This room is end-to-end encrypted, and this bot was started without encryption: it "
    "cannot read what is said here. Its operator can install acp-relay[chat-e2ee] and give "
    "it a --pickle-key-file, or use a room without encryption."
)
LOST_KEYS_WORDS = (
    "🔐 This bot's encryption keys were lost (a new device): it cannot read what was said "
    "here before this start, and reads what is said from now on."
)


class ChatBot:
    """The bot: its Matrix session, its state file, its threads."""

    def __init__(self, config: ChatConfig, matrix: MatrixSession, state: State, log: Logger):
        self.config = config
        self.matrix = matrix
        self.state = state
        self.log = log
        self.access = config.access
        self.policy = config.policy
        self.edit_interval = config.edit_interval
        self.threads: dict[str, SessionThread | WatchThread] = {}
        self.request_owners: dict[str, Answerable] = {}
        self.power: dict[str, dict[str, Any] | None] = {}
        # Reactions on an event no request owns yet: the sync can bring a reaction on a
        # request's message before the send that posted it has returned. Bounded.
        self.early: OrderedDict[str, list[tuple[str, Reaction]]] = OrderedDict()
        self.encrypted: set[str] = set()
        self.tasks = Tasks(log)
        self.over: OrderedDict[str, None] = OrderedDict()  # threads ended in this run, bounded
        self.opened_by: dict[str, str] = {}  # live threads opened in this run: by whom
        self.idleness = Idleness(config.limits.idle_timeout)
        self._idle_check: asyncio.Task[object] | None = None
        self.first_start = 0  # ms since the epoch: nothing older is acted on
        self.crypto: RoomCrypto | None = None  # encrypted rooms served (a pickle key given)
        self.listing: asyncio.Task[object] | None = None  # `@bot sessions`, one at a time
        self.lost_keys = False
        self.awaiting_keys = 0  # encrypted events waiting for their room key, bounded

    def owns_request(self, event_id: str, owner: Answerable | None) -> None:
        if owner is None:
            self.request_owners.pop(event_id, None)
            return
        self.request_owners[event_id] = owner
        for early in self.early.pop(event_id, []):  # reactions synced before the request was kept
            self.tasks.spawn(self._reaction(owner, *early), "a reaction that came early")

    # -- running -------------------------------------------------------------------------------

    async def run(
        self, stop: asyncio.Event, started_ms: int | None = None, *, lost_keys: bool = False
    ) -> None:
        """Sync and act until ``stop``; the threads' connections are then kept for a restart.
        ``started_ms``: when the process started (before it joined any room), in ms;
        ``lost_keys``: the crypto state was lost (each encrypted room is told once)."""
        self.lost_keys = lost_keys
        self.forget_what_is_old()
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
                if self.crypto is not None:  # the batch's room keys, before its timeline
                    await self.crypto.sync(answer)
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
                    self.forget_what_is_old()
        finally:
            for thread in list(self.threads.values()):
                await thread.stop_for_restart()
            await self.tasks.stop()
            self.forget_what_is_old()

    def forget_what_is_old(self) -> None:
        """The handled events' ids past their bound, ended threads and decided requests past
        --keep-ended, and audit records past --audit-retention."""
        self.state.forget_old_events()
        days = self.config.keep_ended_days
        forgotten = self.state.prune(time.time() - days * 86_400)
        if forgotten:
            self.log.info("ended threads forgotten", threads=forgotten, keep_ended_days=days)
        kept = self.config.audit_retention_days
        audited = self.state.audit.prune(time.time() - kept * 86_400)
        if audited:
            self.log.info("audit records forgotten", records=audited, audit_retention_days=kept)

    def restore_threads(self) -> None:
        for row in self.state.live_threads():
            if row.opened_by is not None:  # counted toward its opener's cap after a restart too
                self.opened_by[row.root] = row.opened_by
            if row.kind is ThreadKind.WATCH and row.connection is not None:
                self._restore_watch(row)
                continue
            if row.kind is ThreadKind.SESSION and row.connection is None and row.first_prompt:
                self._reopen(row, row.first_prompt)
                continue
            if row.kind is not ThreadKind.SESSION or row.connection is None or row.secret is None:
                self.state.end_thread(row.root)
                continue
            thread = self.open_thread(row.room, row.root, row.url)
            if row.view is not None:
                thread.session.restore(row.view)
            for kept in self.state.pending_requests(row.root):
                thread.asking.restore_request(kept)
            thread.restore(row)
            self.log.info("thread restored", thread=row.root, connection=row.connection)

    def _reopen(self, row: ThreadRow, first_prompt: str) -> None:
        """A thread recorded but not yet connected when the bot stopped: opened now, with
        its first prompt, rather than ended without a word."""
        thread = self.open_thread(row.room, row.root)
        thread.showing.say(RESTARTED_BEFORE_OPENING)
        thread.open(first_prompt, row.opened_by)
        self.log.info("thread opened again after a restart", thread=row.root, by=row.opened_by)

    def _restore_watch(self, row: ThreadRow) -> None:
        assert row.connection is not None
        watch = self.follow(row.room, row.root, row.connection, row.opened_by)
        if watch is None:
            self.state.end_thread(row.root)
            return
        if row.view is not None:
            watch.watched.restore(row.view)
        watch.restore(self.state.pending_requests(row.root))
        self.log.info("watch thread restored", thread=row.root, connection=row.connection)

    def follow(
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

    def open_thread(self, room: str, root: str, url: str | None = None) -> SessionThread:
        session = ChatSession(self.config.cwd, version=__version__, thoughts=self.config.thoughts)
        dial = self.config.dial
        if self.config.connect_command is not None and url is not None:  # a box's, resumed
            dial = replace(
                dial, url=url, ticket=TicketSource(command=(*self.config.connect_command, url))
            )
        thread = SessionThread(
            self,
            dial,
            room,
            root,
            session,
            self.config.connect_command,
            self.config.max_attachment_bytes,
        )
        self.threads[root] = thread
        self.tasks.spawn(self._forget_when_over(thread), "forget the thread once over")
        self.idleness.active(root, time.monotonic())
        if self._idle_check is None and self.idleness.timeout > 0:
            care = end_idle_threads(self.threads, self.idleness, self.config.limits, self.log)
            self._idle_check = self.tasks.spawn(care, "end idle threads")
        return thread

    async def _forget_when_over(self, thread: SessionThread | WatchThread) -> None:
        await thread.ended.wait()
        self.threads.pop(thread.root, None)
        self.opened_by.pop(thread.root, None)
        self.idleness.forget(thread.root)
        self.over[thread.root] = None  # ended, while the state file may not say so yet
        while len(self.over) > MAX_EARLY:
            self.over.popitem(last=False)
        self.log.info("thread over", thread=thread.root)

    # -- a sync's answer -------------------------------------------------------------------------

    async def handle(self, answer: dict[str, Any], *, act: bool) -> None:
        for room in rooms_of(answer, "invite"):
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
        for room, data in rooms_of(answer, "join").items():
            if room in self.config.rooms:
                await self._room(room, data, act=act)

    async def _room(self, room: str, data: dict[str, Any], *, act: bool) -> None:
        """One room's part of a batch, in the homeserver's order: the state block (the state
        before the timeline), then each timeline event at its place, a power-level change
        taking effect for what follows it only."""
        for event in events_of(data.get("state")):
            await self._state_event(room, event)
        timeline = events_of(data.get("timeline"))
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
        if self.crypto is not None:
            if self.lost_keys:
                self.log.warning(
                    "keys lost: what was said before this start is unreadable", room=room
                )
                await self.matrix.send_or_log(
                    room,
                    "m.room.message",
                    message(LOST_KEYS_WORDS),
                    f"lost-keys-{self.matrix.device}",
                )
            return
        self.log.warning(
            "served room is encrypted: not supported",
            room=room,
            fix="install acp-relay[chat-e2ee] and give --pickle-key-file",
        )
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
        if event.get("type") == "m.room.encrypted" and self.crypto is not None:
            decrypted = await self.crypto.decrypt(room, event)
            if isinstance(decrypted, Later):  # its key comes in a later batch: not blocked on
                if self.awaiting_keys >= MAX_EARLY:  # a member's undecryptable flood: bounded
                    dropped = "too many events await their keys: one dropped"
                    self.log.warning(dropped, event_id=event_id)
                    return
                self.awaiting_keys += 1
                self.tasks.spawn(self._decrypted_later(room, event), "an event awaiting its key")
                return
            if decrypted is None:
                return
            event = decrypted
        if not self.state.first_handling(event_id, int(time.time() * 1000)):
            return  # handled before a restart
        incoming = read_event(event)
        if isinstance(incoming, Message):
            await self._message(room, incoming)
        elif isinstance(incoming, Attachment):
            await on_attachment(self, room, incoming)
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

    async def _decrypted_later(self, room: str, event: dict[str, Any]) -> None:
        assert self.crypto is not None
        try:
            decrypted = await self.crypto.decrypt_later(room, event)
        finally:
            self.awaiting_keys -= 1
        if decrypted is not None:
            await self._timeline_event(room, decrypted)

    async def _reaction(self, owner: Answerable, room: str, reaction: Reaction) -> None:
        power = await self.levels(room)
        await owner.reacted(reaction.sender, reaction.target, reaction.key, power)

    async def levels(self, room: str) -> dict[str, Any] | None:
        if room not in self.power:
            self.power[room] = await self.matrix.power_levels(room)
        return self.power[room]

    async def _message(self, room: str, said: Message) -> None:
        await on_message(self, room, said)


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
