"""What a person's message means to the bot: open a thread, prompt, cancel, end, or nothing.

Pure. In a served room, a message outside any thread that mentions the bot (its user id
at the start of the body, or in ``m.mentions``) opens a thread whose first prompt is the
rest of the text, or, for ``share CONNECTION_ID``, follows that connection of the bot's
relay as a watcher (a URL after it is kept only to be refused: a ticket never goes to a
URL said in the chat). In a thread the bot runs, ``!cancel`` cancels the turn, ``!end`` ends
the session, ``!answer N`` answers the pending permission request with its option N,
``!pending`` (there, or after a mention) lists the room's requests still waiting,
anything else is the next prompt. ``!help`` (in a thread, or after a mention) asks what the
bot understands; any other ``!word`` is an unknown command, said so, and ``!!text`` is the
prompt ``!text``. A message in a thread whose session has ended is said to be too late.
Edits are never prompts, nor the bot's own messages, nor notices (other bots).
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.chat.controls import Asked
from relay.chat.earlier import valid_session_id
from relay.chat.events import NOTICE, Message
from relay.chat.text import safe_line

CANCEL = "!cancel"
END = "!end"
HELP = "!help"
ANSWER = "!answer"
PENDING = "!pending"
MODE = "!mode"
MODEL = "!model"
SET = "!set"
USAGE = "!usage"
SHARE = "share"  # "@bot share CONNECTION_ID": follow an editor's connection
SESSIONS = "sessions"  # "@bot sessions": the agent's earlier sessions
RESUME = "resume"  # "@bot resume SESSION_ID": one of them back, in a new thread
REOPEN = "!reopen"  # in an ended thread: its session back


@dataclass(frozen=True)
class Open:
    """Open a thread on this message with ``prompt`` as its first prompt (none: ''), after
    ``settings`` (``@bot !model X !mode Y PROMPT``: each word-long value)."""

    prompt: str
    settings: tuple[Asked, ...] = ()


@dataclass(frozen=True)
class SetControl:
    """Change one of the session's controls: ``!mode ID``, ``!model VALUE``, ``!set OPTION
    VALUE`` (approvers only: a mode can take approvals away)."""

    asked: Asked


@dataclass(frozen=True)
class ListSessions:
    """List the agent's earlier sessions in the bot's folder (``@bot sessions``)."""


@dataclass(frozen=True)
class ResumeSession:
    """Bring back the agent's session ``session_id`` in a new thread (``@bot resume ID``)."""

    session_id: str


@dataclass(frozen=True)
class Reopen:
    """Bring this ended thread's session back, on a new connection (``!reopen``)."""


@dataclass(frozen=True)
class ShowUsage:
    """Say what the session has used (``!usage``)."""


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
class Answer:
    """Answer the thread's pending permission request with its option ``number`` (1-based),
    as a keycap would."""

    number: int


@dataclass(frozen=True)
class Help:
    """Say what the bot understands (:data:`HELP_TEXT`)."""


@dataclass(frozen=True)
class Unknown:
    """A ``!word`` the bot does not know (``why``: what to say)."""

    why: str


@dataclass(frozen=True)
class ListPending:
    """List the room's permission requests still waiting, with links to them."""


@dataclass(frozen=True)
class Ended:
    """A message in a thread of the bot whose session has ended."""


@dataclass(frozen=True)
class Ignore:
    """Nothing to do (why, for the debug log)."""

    why: str


Meaning = (
    Open
    | Share
    | Prompt
    | Cancel
    | End
    | Answer
    | ListPending
    | SetControl
    | ShowUsage
    | ListSessions
    | ResumeSession
    | Reopen
    | Help
    | Unknown
    | Ended
    | Ignore
)

HELP_TEXT = (
    "In the room, mention me with a prompt to open a thread (one agent session), or with "
    "'share CONNECTION_ID' to follow an editor's connection here. In a thread: anything you "
    "write is the next prompt; !cancel cancels the turn; !end ends the session; !answer N "
    "answers the pending permission request with its option N (approvers; as a tap on its "
    "keycap does); !pending (here or after a mention) lists the room's requests still "
    "waiting; !mode ID, !model VALUE and !set OPTION VALUE change the session's mode, model "
    "or options (approvers; also at the start of a mention: @bot !model X PROMPT); !usage "
    "says what the session has used; a prompt that starts with / is one of the agent's "
    "commands; !reopen in an ended thread brings its session back. After a mention: "
    "'sessions' lists the agent's earlier sessions, 'resume SESSION_ID' brings one back in a "
    "new thread. !help shows this. A prompt that starts with ! is written !!text (the "
    "first ! is dropped)."
)
ENDED_TEXT = (
    "This thread's session has ended: !reopen brings it back (when the agent can), or "
    "mention me in the room to start another."
)


def meaning(
    message: Message, *, bot: str, thread_known: bool, thread_ended: bool = False
) -> Meaning:
    """What ``message`` asks of the bot ``bot`` (``thread_known``: its thread is one the bot
    runs; ``thread_ended``: one it ran, whose session has ended)."""
    if message.sender == bot:
        return Ignore("the bot's own message")
    if message.edit:
        return Ignore("an edit")
    if message.msgtype == NOTICE:
        return Ignore("a notice (bots send those)")
    if message.thread is not None:
        if thread_ended:
            return Reopen() if message.body.strip().lower() == REOPEN else Ended()
        if not thread_known:
            return Ignore("a thread the bot does not run")
        body = message.body.strip()
        if body.startswith("!"):
            return _command(body, Prompt)
        return Prompt(body) if body else Ignore("an empty message")
    text = _after_mention(message.body, bot)
    if text is None and bot not in message.mentions:
        return Ignore("does not mention the bot")
    prompt = (text if text is not None else message.body).strip()
    words = prompt.split()
    if len(words) in (2, 3) and words[0].lower() == SHARE:
        return Share(words[1], words[2] if len(words) == 3 else None)
    if len(words) == 1 and words[0].lower() == SESSIONS:
        return ListSessions()
    if len(words) == 2 and words[0].lower() == RESUME:
        if valid_session_id(words[1]):
            return ResumeSession(words[1])
        return Unknown("resume takes a session id, as sessions lists them.")
    settings, prompt = _leading_settings(prompt)
    if isinstance(settings, Unknown):
        return settings
    if settings:
        return Open(prompt, settings)
    if prompt.startswith("!"):
        what = _command(prompt, Open)
        if isinstance(what, Help | Unknown | Open | ListPending):
            return what
        return Unknown(_not_here(prompt))
    return Open(prompt) if prompt else Ignore("a mention without a prompt")


def _command(text: str, then: type[Prompt] | type[Open]) -> Meaning:
    """A message that starts with ``!``: a command, or (``!!``) a prompt ``then`` carries."""
    if text.startswith("!!"):
        return then(text[1:])
    words = text.split()
    name = words[0].lower()
    if name == HELP:
        return Help()
    if name == PENDING and len(words) == 1:
        return ListPending()
    if name == USAGE and len(words) == 1:
        return ShowUsage()
    if name in (MODE, MODEL, SET):
        return _set_control(name, words[1:])
    if name == CANCEL and len(words) == 1:
        return Cancel()
    if name == END and len(words) == 1:
        return End()
    if name == ANSWER:
        if len(words) == 2 and words[1].isdigit() and words[1].isascii():
            return Answer(int(words[1]))
        return Unknown("!answer takes one number: the option, e.g. !answer 11.")
    return Unknown(
        f"Unknown command {_quoted(words[0])}: !help lists the commands (a prompt "
        f"that starts with ! is written !{_quoted(words[0])})."
    )


def _set_control(name: str, words: list[str]) -> Meaning:
    """``!mode ID``, ``!model VALUE``, ``!set OPTION VALUE`` (a value may hold spaces: a
    choice's name)."""
    if name == SET:
        if len(words) < 2:
            return Unknown("!set takes an option and a value, e.g. !set reasoning high.")
        return SetControl(Asked(words[0], " ".join(words[1:]), by_category=False))
    if not words:
        return Unknown(f"{name} takes a value, e.g. {name} {'plan' if name == MODE else 'X'}.")
    return SetControl(Asked(name[1:], " ".join(words)))


def _leading_settings(text: str) -> tuple[tuple[Asked, ...] | Unknown, str]:
    """The ``!mode ID``, ``!model VALUE`` and ``!set OPTION VALUE`` at the start of a mention
    (one word each), and the prompt after them."""
    words, settings, at = text.split(), [], 0
    while at < len(words) and words[at].lower() in (MODE, MODEL, SET):
        name = words[at].lower()
        size = 3 if name == SET else 2
        if at + size > len(words):
            return Unknown(
                f"{_quoted(words[at])} at the start of a mention takes a value "
                "(!set: an option and a value), then the prompt."
            ), ""
        what = _set_control(name, words[at + 1 : at + size])
        assert isinstance(what, SetControl)
        settings.append(what.asked)
        at += size
    if not settings:
        return (), text
    parts = text.split(None, at)
    return tuple(settings), parts[at].strip() if len(parts) > at else ""


def _not_here(text: str) -> str:
    return f"{_quoted(text.split()[0])} is a command for a thread: !help lists the commands."


def _quoted(word: str) -> str:
    return safe_line(word, 40)


def _after_mention(body: str, bot: str) -> str | None:
    """The body after the bot's id at its start (and a ``:`` or ``,`` after it), or None."""
    text = body.lstrip()
    if not text.startswith(bot):
        return None
    rest = text[len(bot) :]
    if rest and not (rest[0].isspace() or rest[0] in ":,"):
        return None  # another user whose id starts with the bot's
    return rest.lstrip(":,").strip()
