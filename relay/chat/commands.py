"""What a person's message means to the bot: open a thread, prompt, cancel, end, or nothing.

Pure. In a served room, a message outside any thread that mentions the bot (its user id
at the start of the body, or in ``m.mentions``) opens a thread whose first prompt is the
rest of the text, or, for ``share CONNECTION_ID``, follows that connection of the bot's
relay as a watcher (a URL after it is kept only to be refused: a ticket never goes to a
URL said in the chat). In a thread the bot runs, ``!cancel`` cancels the turn, ``!end`` ends
the session, anything else is the next prompt. Edits are never prompts, nor the bot's
own messages, nor notices (other bots).
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.chat.events import NOTICE, Message

CANCEL = "!cancel"
END = "!end"
SHARE = "share"  # "@bot share CONNECTION_ID": follow an editor's connection


@dataclass(frozen=True)
class Open:
    """Open a thread on this message with ``prompt`` as its first prompt."""

    prompt: str


@dataclass(frozen=True)
class Share:
    """Follow connection ``connection`` of the bot's relay in a new thread, as its watcher
    (``url``: a URL the message named, which the bot refuses)."""

    connection: str
    url: str | None = None


@dataclass(frozen=True)
class Prompt:
    """The next prompt of the thread's session."""

    text: str


@dataclass(frozen=True)
class Cancel:
    """Cancel the turn that runs (``session/cancel``)."""


@dataclass(frozen=True)
class End:
    """End the thread's session and its relay connection."""


@dataclass(frozen=True)
class Ignore:
    """Nothing to do (why, for the debug log)."""

    why: str


Meaning = Open | Share | Prompt | Cancel | End | Ignore


def meaning(message: Message, *, bot: str, thread_known: bool) -> Meaning:
    """What ``message`` asks of the bot ``bot`` (``thread_known``: its thread is one of the
    bot's)."""
    if message.sender == bot:
        return Ignore("the bot's own message")
    if message.edit:
        return Ignore("an edit")
    if message.msgtype == NOTICE:
        return Ignore("a notice (bots send those)")
    if message.thread is not None:
        if not thread_known:
            return Ignore("a thread the bot does not run")
        word = message.body.strip()
        if word.lower() == CANCEL:
            return Cancel()
        if word.lower() == END:
            return End()
        return Prompt(message.body.strip()) if word else Ignore("an empty message")
    text = _after_mention(message.body, bot)
    if text is None and bot not in message.mentions:
        return Ignore("does not mention the bot")
    prompt = (text if text is not None else message.body).strip()
    words = prompt.split()
    if len(words) in (2, 3) and words[0].lower() == SHARE:
        return Share(words[1], words[2] if len(words) == 3 else None)
    return Open(prompt) if prompt else Ignore("a mention without a prompt")


def _after_mention(body: str, bot: str) -> str | None:
    """The body after the bot's id at its start (and a ``:`` or ``,`` after it), or None."""
    text = body.lstrip()
    if not text.startswith(bot):
        return None
    rest = text[len(bot) :]
    if rest and not (rest[0].isspace() or rest[0] in ":,"):
        return None  # another user whose id starts with the bot's
    return rest.lstrip(":,").strip()
