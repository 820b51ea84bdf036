import pytest

from relay.chat.controls import Asked
from relay.chat.events import Message
from relay.chat.meanings import (
    Answer,
    Cancel,
    End,
    Ended,
    Help,
    Ignore,
    ListPending,
    ListSessions,
    Meaning,
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

BOT = "@bot:t"


def said(body: str, *, sender: str = "@alice:t", thread: str | None = None,
         mentions: frozenset[str] = frozenset(), edit: bool = False,
         msgtype: str = "m.text") -> Message:  # fmt: skip
    return Message("$e", sender, body, thread, mentions, edit, msgtype)


@pytest.mark.parametrize(
    ("message", "known", "expected"),
    [
        (said("@bot:t fix the tests"), False, Open("fix the tests")),
        (said("@bot:t: fix it"), False, Open("fix it")),
        (said("  @bot:t,  fix it "), False, Open("fix it")),
        (said("Bot: fix it", mentions=frozenset({BOT})), False, Open("Bot: fix it")),
        (said("@bot:tester fix it"), False, Ignore("does not mention the bot")),
        (said("fix it"), False, Ignore("does not mention the bot")),
        (said("@bot:t"), False, Ignore("a mention without a prompt")),
        (said("@bot:t share 6f1c-2a"), False, Share("6f1c-2a")),
        (said("@bot:t Share 6f1c wss://r/acp"), False, Share("6f1c", "wss://r/acp")),
        (said("@bot:t share the news with everyone"), False,
         Open("share the news with everyone")),
        (said("@bot:t hi", sender=BOT), False, Ignore("the bot's own message")),
        (said("@bot:t hi", edit=True), False, Ignore("an edit")),
        (said("@bot:t hi", msgtype="m.notice"), False, Ignore("a notice (bots send those)")),
        (said("and then?", thread="$r"), True, Prompt("and then?")),
        (said("!cancel", thread="$r"), True, Cancel()),
        (said(" !END ", thread="$r"), True, End()),
        (said("and then?", thread="$r"), False, Ignore("a thread the bot does not run")),
        (said("@bot:t new", thread="$r"), False, Ignore("a thread the bot does not run")),
        (said("  ", thread="$r"), True, Ignore("an empty message")),
        (said("!help", thread="$r"), True, Help()),
        (said("@bot:t !HELP"), False, Help()),
        (said("!answer 11", thread="$r"), True, Answer(11)),
        (said("!answer x", thread="$r"), True,
         Unknown("!answer takes one number: the option, e.g. !answer 11.")),
        (said("!frob it", thread="$r"), True, Unknown(
            "Unknown command !frob: !help lists the commands (a prompt that starts with ! is "
            "written !!frob).")),
        (said("!!frob it", thread="$r"), True, Prompt("!frob it")),
        (said("@bot:t !!important: fix it"), False, Open("!important: fix it")),
        (said("@bot:t !cancel"), False,
         Unknown("!cancel is a command for a thread: !help lists the commands.")),
        (said("!cancel", thread="$r"), False, Ignore("a thread the bot does not run")),
        (said("!pending", thread="$r"), True, ListPending()),
        (said("@bot:t sessions"), False, ListSessions()),
        (said("@bot:t resume sess-1"), False, ResumeSession("sess-1")),
        (said("@bot:t resume \u202e"), False,
         Unknown("resume takes a session id, as sessions lists them.")),
        (said("@bot:t sessions please"), False, Open("sessions please")),
        (said("!mode plan", thread="$r"), True, SetControl(Asked("mode", "plan"))),
        (said("!model Claude Sonnet", thread="$r"), True,
         SetControl(Asked("model", "Claude Sonnet"))),
        (said("!set reasoning high", thread="$r"), True,
         SetControl(Asked("reasoning", "high", by_category=False))),
        (said("!set reasoning", thread="$r"), True,
         Unknown("!set takes an option and a value, e.g. !set reasoning high.")),
        (said("!mode", thread="$r"), True, Unknown("!mode takes a value, e.g. !mode plan.")),
        (said("!usage", thread="$r"), True, ShowUsage()),
        (said("/review the diff", thread="$r"), True, Prompt("/review the diff")),
        (said("@bot:t !model deep !mode plan fix the test"), False,
         Open("fix the test", (Asked("model", "deep"), Asked("mode", "plan")))),
        (said("@bot:t !set effort high  keep  spaces"), False,
         Open("keep  spaces", (Asked("effort", "high", by_category=False),))),
        (said("@bot:t !mode plan"), False, Open("", (Asked("mode", "plan"),))),
        (said("@bot:t !set effort"), False, Unknown(
            "!set at the start of a mention takes a value (!set: an option and a value), then "
            "the prompt.")),
        (said("@bot:t !Pending"), False, ListPending()),
        (said("!pending now", thread="$r"), True, Unknown(
            "Unknown command !pending: !help lists the commands (a prompt that starts with ! "
            "is written !!pending).")),
    ],
)  # fmt: skip
def test_what_a_message_asks_of_the_bot(message: Message, known: bool, expected: Meaning) -> None:
    """Mentions open threads; in a thread: prompts, !cancel, !end; the rest is ignored."""
    assert meaning(message, bot=BOT, thread_known=known) == expected


def test_a_message_in_an_ended_thread_is_said_to_be_too_late() -> None:
    """Any message in a thread whose session ended, a command too, gets Ended."""
    for body in ("and then?", "!help", "!end"):
        assert meaning(said(body, thread="$r"), bot=BOT, thread_known=False,
                       thread_ended=True) == Ended()  # fmt: skip


def test_reopen_in_an_ended_thread_brings_it_back_and_anything_else_is_too_late() -> None:
    """!reopen is the one thing an ended thread takes."""
    ended = said(" !REOPEN ", thread="$r")
    assert meaning(ended, bot=BOT, thread_known=False, thread_ended=True) == Reopen()
    late = said("hello?", thread="$r")
    assert meaning(late, bot=BOT, thread_known=False, thread_ended=True) == Ended()
