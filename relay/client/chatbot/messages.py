"""What a person's message in a served room does: open a thread, prompt, command, share.

The pure meaning of a message is :func:`relay.chat.meanings.meaning`'s; this carries it
out for the bot (:class:`relay.client.chatbot.bot.ChatBot`): who may prompt and who may
share is checked by the sender's user id, the caps on threads are applied, and anything
refused gets a reply in its thread saying why.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from typing import Any, Protocol

from relay import __version__
from relay.chat.access import Access
from relay.chat.approvals import pending_text
from relay.chat.attachments import Attachment
from relay.chat.earlier import sessions_text
from relay.chat.events import Message, in_thread, message
from relay.chat.limits import Idleness
from relay.chat.meanings import (
    ENDED_TEXT,
    HELP_TEXT,
    Answer,
    Cancel,
    End,
    Ended,
    Help,
    Ignore,
    ListPending,
    ListSessions,
    Open,
    Prompt,
    Reopen,
    ResumeSession,
    SetControl,
    Share,
    ShowUsage,
    Unknown,
    meaning,
)
from relay.chat.permissions import request_of
from relay.chat.text import safe_line
from relay.client.chatbot.botconfig import ChatConfig
from relay.client.chatbot.listing import list_sessions
from relay.client.chatbot.matrix import MatrixSession
from relay.client.chatbot.sessionthread import SessionThread
from relay.client.chatbot.store import State, ThreadKind
from relay.client.chatbot.threadcare import answer_by_number
from relay.client.chatbot.watchthread import WatchThread
from relay.observe.logs import Logger
from relay.observe.tasks import Tasks


class Served(Protocol):
    """What a message needs of the bot (:class:`relay.client.chatbot.bot.ChatBot`)."""

    config: ChatConfig
    access: Access
    log: Logger
    matrix: MatrixSession
    state: State
    threads: dict[str, SessionThread | WatchThread]
    over: OrderedDict[str, None]  # threads ended in this run, the state file maybe not told
    opened_by: dict[str, str]
    idleness: Idleness
    tasks: Tasks
    listing: asyncio.Task[object] | None  # the `sessions` list being made, if one is

    async def levels(self, room: str) -> dict[str, Any] | None:
        """The room's power levels."""

    def open_thread(self, room: str, root: str, url: str | None = None) -> SessionThread:
        """A new session thread rooted at ``root``."""

    def follow(
        self, room: str, root: str, connection: str, requester: str | None
    ) -> WatchThread | None:
        """A new watch thread following ``connection``."""


CONTROLS_REFUSED = (
    "Only approvers change a session's mode, model or options: a mode can take approvals "
    "away (some agents' modes approve every tool call themselves)."
)
NO_SESSIONS_IN_BOXES = (
    "sessions: each thread has a box of its own here (--connect-command): no earlier "
    "session is kept."
)
SESSION_UNKNOWN = (
    "!reopen: this thread's session is not known (it never opened): mention me to start another."
)
CONNECTION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,99}")
SHARE_NO_URL = (
    "share takes a connection id only: the bot follows connections on the relay its "
    "operator configured (or the one its control plane names), never at a URL given here, "
    "which would receive a ticket that can answer the editor's requests."
)


async def on_message(bot: Served, room: str, said: Message) -> None:
    """A person's message in a served room: what it means, carried out or answered."""
    known = said.thread is not None and said.thread in bot.threads
    ended = (
        said.thread is not None
        and not known
        and (said.thread in bot.over or bot.state.ended_thread(said.thread))
    )
    what = meaning(said, bot=bot.config.user, thread_known=known, thread_ended=ended)
    if isinstance(what, Ignore):
        return
    power = await bot.levels(room)
    approving = isinstance(what, Answer | ListPending) and bot.access.may_approve(
        said.sender, power
    )  # an approver answers and lists requests, prompter or not
    if not (approving or bot.access.may_prompt(said.sender, power)):
        await _refuse(bot, room, said)
        return
    if isinstance(what, Help | Unknown | Ended):
        words = what.why if isinstance(what, Unknown) else HELP_TEXT
        await reply(bot, room, said, ENDED_TEXT if isinstance(what, Ended) else words)
        return
    if isinstance(what, ListPending):
        waiting = [
            (kept.event_id, request_of(kept.record)) for _, kept in bot.state.pending_in_room(room)
        ]
        body, html = pending_text(room, waiting)
        await reply(bot, room, said, body, html)
        return
    if isinstance(what, ListSessions):
        if bot.listing is not None and not bot.listing.done():
            await reply(
                bot, room, said, "sessions: a list is being made; ask again once it is there."
            )
            return
        # Its own connection and agent, off the sync loop, one at a time.
        bot.listing = bot.tasks.spawn(_sessions(bot, room, said), "list the agent's sessions")
        return
    if isinstance(what, Share | Open | ResumeSession | Reopen):
        refusal = bot.config.limits.refusal(
            said.sender, {root: bot.opened_by.get(root) for root in bot.threads}
        )
        if refusal is not None:
            bot.log.info("thread refused: a cap is reached", by=said.sender, room=room)
            await reply(bot, room, said, refusal)
            return
    if isinstance(what, Share):
        await _share(bot, room, said, what)
        return
    if isinstance(what, ResumeSession | Reopen):
        await _bring_back(bot, room, said, what)
        return
    if isinstance(what, Open) and what.settings and not bot.access.may_approve(said.sender, power):
        await reply(bot, room, said, CONTROLS_REFUSED)
        return
    if isinstance(what, Open):
        bot.opened_by[said.event_id] = said.sender
        url, at = bot.config.dial.url, time.time()
        bot.state.add_thread(
            said.event_id, room, ThreadKind.SESSION, url, at, said.sender, what.prompt
        )
        opened = bot.open_thread(room, said.event_id)
        bot.log.info("thread opened", thread=said.event_id, by=said.sender)
        opened.open(what.prompt, said.sender, what.settings)
        return
    assert said.thread is not None
    thread = bot.threads[said.thread]
    bot.idleness.active(said.thread, time.monotonic())
    if isinstance(what, Answer):  # in a share's thread too: a watcher may answer
        why = await answer_by_number(thread, said.sender, what.number, power)
        if why is not None:
            await reply(bot, room, said, f"{safe_line(said.sender)}: {why}")
        return
    if isinstance(thread, WatchThread):
        if isinstance(what, End):
            thread.end(safe_line(said.sender))
        else:
            thread.showing.say("This thread follows the editor's session: prompt there.")
        return
    if isinstance(what, SetControl):
        if not bot.access.may_approve(said.sender, power):
            await reply(bot, room, said, CONTROLS_REFUSED)
            return
        thread.set_control(what.asked, said.sender)
        return
    if isinstance(what, ShowUsage):
        thread.session.usage()
        thread.showing.wake()
        return
    bot.log.debug(
        "message handled", thread=said.thread, by=said.sender, meaning=type(what).__name__
    )
    if isinstance(what, Prompt):
        thread.prompt(what.text, said.sender)
    elif isinstance(what, Cancel):
        thread.cancel(safe_line(said.sender))
    elif isinstance(what, End):
        thread.end(safe_line(said.sender))


async def on_attachment(bot: Served, room: str, attachment: Attachment) -> None:
    """An image or file in a served room: in a session's thread, from a prompter, it joins
    the next prompt (the thread says so, or why not); elsewhere it is not acted on."""
    thread = bot.threads.get(attachment.thread or "")
    if thread is None or not bot.access.may_prompt(attachment.sender, await bot.levels(room)):
        return
    if isinstance(thread, WatchThread):
        thread.showing.say("This thread follows the editor's session: send files there.")
        return
    bot.idleness.active(thread.root, time.monotonic())
    bot.log.info(
        "a file sent in a thread",
        thread=thread.root,
        by=attachment.sender,
        kind=attachment.kind,
        size=attachment.size,
    )
    thread.attach(attachment)


async def _sessions(bot: Served, room: str, said: Message) -> None:
    """``@bot sessions``: the agent's earlier sessions in --cwd, listed in a reply."""
    if bot.config.connect_command is not None:
        await reply(bot, room, said, NO_SESSIONS_IN_BOXES)
        return
    listed = await list_sessions(bot.config.dial, bot.config.cwd, __version__)
    if isinstance(listed, str):
        await reply(bot, room, said, f"sessions: {safe_line(listed, 400)}")
        return
    body, html = sessions_text(bot.config.cwd, listed, bot.config.user)
    await reply(bot, room, said, body, html)


async def _bring_back(bot: Served, room: str, said: Message, what: ResumeSession | Reopen) -> None:
    """``@bot resume SESSION_ID`` (a new thread on that session) or ``!reopen`` in an ended
    thread (that thread again, on its session): a new connection that brings it back."""
    if isinstance(what, ResumeSession):
        root, session, url = said.event_id, what.session_id, bot.config.dial.url
        bot.state.add_thread(root, room, ThreadKind.SESSION, url, time.time(), said.sender)
    else:
        assert said.thread is not None
        kept = bot.state.ended_session(said.thread)
        if kept is None or kept[1] is None:
            await reply(bot, room, said, SESSION_UNKNOWN)
            return
        root, session = said.thread, kept[1]
        bot.state.reopen(root, said.sender, time.time())
        bot.over.pop(root, None)
    bot.opened_by[root] = said.sender
    thread = bot.open_thread(room, root)
    thread.session.resuming = session
    bot.log.info("a session brought back", thread=root, by=said.sender, session=session)
    thread.open("", said.sender)


async def _share(bot: Served, room: str, said: Message, share: Share) -> None:
    """Follow an editor's connection in a new thread rooted at ``said``: on the relay the
    operator configured (or the one --watch-ticket-command names), never at a URL from
    the chat, which would receive the watcher's ticket."""
    if not bot.access.may_share(said.sender, await bot.levels(room)):
        who = "approvers" if bot.access.share_by == "approvers" else "prompters"
        await reply(
            bot, room, said, f"share: only {who} may attach this room to an editor's connection."
        )
        return
    if share.url is not None:
        await reply(bot, room, said, SHARE_NO_URL)
        return
    if bot.config.watch_ticket_command is None:
        await reply(bot, room, said, "share needs the bot started with --watch-ticket-command")
        return
    if not CONNECTION_ID.fullmatch(share.connection):
        await reply(
            bot,
            room,
            said,
            "share: expected a connection id (letters, digits "
            "and dashes, as the relay's logs show it)",
        )
        return
    url = bot.config.dial.url
    bot.state.add_thread(said.event_id, room, ThreadKind.WATCH, url, time.time(), said.sender)
    bot.state.connected(said.event_id, share.connection, "", 0.0)
    watch = bot.follow(room, said.event_id, share.connection, said.sender)
    assert watch is not None
    bot.log.info("share opened", thread=said.event_id, by=said.sender, connection=share.connection)
    watch.start()


async def reply(bot: Served, room: str, said: Message, words: str, html: str | None = None) -> None:
    """A reply to ``said``, in its thread (or starting one on it)."""
    content = in_thread(message(words, html=html), said.thread or said.event_id, said.event_id)
    await bot.matrix.send_or_log(room, "m.room.message", content, f"reply-{said.event_id}")


async def _refuse(bot: Served, room: str, said: Message) -> None:
    """Someone not allowed to prompt: a reply saying so, in the thread it was in."""
    root = said.thread or said.event_id
    words = (
        f"{safe_line(said.sender)}: you may not prompt the agent here; ask an "
        "approver to add you with --prompter."
    )
    bot.log.info("prompt from someone not allowed to prompt", user=said.sender, room=room)
    await bot.matrix.send_or_log(
        room,
        "m.room.message",
        in_thread(message(words), root, said.event_id),
        f"refused-{said.event_id}",
    )
