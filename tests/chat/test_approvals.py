"""What the thread says of a request under the rules: mentions, tally, reminder, escalation,
timeout, and !pending's list."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from relay.acp.changes import Option
from relay.chat.access import Access
from relay.chat.approvals import (
    MAX_LISTED,
    MAX_MENTIONS,
    Mentions,
    asked_text,
    decided_by,
    escalation_text,
    mention_text,
    mentions_for,
    not_counted_text,
    pending_text,
    reminder_text,
    timeout_words,
)
from relay.chat.permissions import Request
from relay.chat.rules import Rule, Tally, judge

BOT_ID, LEAD, OPS, OPS2, EVE = (
    "@bot:x.org",
    "@lead:x.org",
    "@ops:x.org",
    "@ops2:x.org",
    "@eve:x.org",
)
ALLOW = Option("allow", "Allow", "allow_once")
REJECT = Option("reject", "Reject", "reject_once")
REQUEST = Request("r1", "Run make", "execute", "$ make", (ALLOW, REJECT))
BOT = Access(approvers=frozenset({LEAD}))
POWER = {"users": {LEAD: 100, OPS: 50, OPS2: 50, EVE: 0, BOT_ID: 100}}
MEMBERS = [BOT_ID, EVE, LEAD, OPS, OPS2]


def test_a_request_mentions_who_may_answer_and_would_count() -> None:
    """Listed ids then members at the level; never the bot, the prompter without
    self-approval, or someone whose tap already counted."""
    rule = Rule(frozenset({"execute"}), approvers=frozenset({LEAD}), approver_level=50,
                quorum=2, self_approval=False)  # fmt: skip
    tally = Tally(rule, prompter=OPS)
    assert mentions_for(tally, BOT, MEMBERS, POWER, BOT_ID) == Mentions((LEAD, OPS2))
    tally, _ = judge(tally, LEAD, ALLOW, BOT, POWER)
    assert mentions_for(tally, BOT, MEMBERS, POWER, BOT_ID) == Mentions((OPS2,))
    assert mentions_for(Tally(None, None), BOT, MEMBERS, POWER, BOT_ID) == Mentions((LEAD,))


@given(st.integers(min_value=0, max_value=3 * MAX_MENTIONS))
def test_mentions_are_bounded_and_say_how_many_were_left_out(crowd: int) -> None:
    """A power-level rule over a crowd mentions at most MAX_MENTIONS people; the text says
    how many more could answer."""
    members = [f"@m{n:03}:x.org" for n in range(crowd)]
    access = Access(approver_level=0)
    mentions = mentions_for(Tally(None, None), access, members, {"users": {}}, BOT_ID)
    assert len(mentions.users) == min(crowd, MAX_MENTIONS)
    assert mentions.more == max(crowd - MAX_MENTIONS, 0)
    plain, _ = mention_text(mentions)
    assert plain.endswith(f" and {mentions.more} more") == (mentions.more > 0)
    assert mentions.content() == ({"user_ids": list(mentions.users)} if crowd else {})


def test_a_mention_is_a_link_in_html_and_an_id_in_text() -> None:
    """The HTML links each person with matrix.to (escaped), the text names their id."""
    plain, html = mention_text(Mentions((LEAD, '@a"<b>:x.org')))
    assert plain == f'{LEAD}, @a"<b>:x.org'
    assert f'<a href="https://matrix.to/#/{LEAD}">{LEAD}</a>' in html
    assert "<b>" not in html
    assert "%22%3Cb%3E" in html


def test_the_request_shows_its_rule_its_tally_and_whom_it_waits_for() -> None:
    """Quorum, self-approval and the timeout in words; each allow's votes; the waiting list."""
    rule = Rule(frozenset({"execute"}), approvers=frozenset({LEAD, OPS, OPS2}), quorum=2,
                self_approval=False, timeout=90.0)  # fmt: skip
    tally, _ = judge(Tally(rule, prompter=EVE), OPS, ALLOW, BOT, POWER)
    body, html = asked_text(REQUEST, tally, BOT, Mentions((LEAD, OPS2)))
    lines = body.splitlines()
    assert lines[:2] == ["🔐 Permission requested: Run make (execute)", "$ make"]
    assert lines[-5:] == [
        "Needs 2 approvers choosing the same allow option; a reject from one refuses.",
        "The person who prompted this turn does not count.",
        "Refused if no decision within 90 s.",
        f"Allow: 1 of 2: {OPS}",
        f"Waiting for: {LEAD}, {OPS2}",
    ]
    assert html.endswith(
        f'Waiting for: <a href="https://matrix.to/#/{LEAD}">{LEAD}</a>, '
        f'<a href="https://matrix.to/#/{OPS2}">{OPS2}</a>'
    )
    plain, _ = asked_text(REQUEST, Tally(None, None), BOT, Mentions())
    assert plain.splitlines()[-1].startswith("React with a number to answer.")


def test_who_decided_is_everyone_at_the_quorum_or_the_one_who_rejected() -> None:
    """An allow names its counted approvers; a reject, the one who chose it."""
    rule = Rule(frozenset({"execute"}), approvers=frozenset({LEAD, OPS}), quorum=2)
    tally, _ = judge(Tally(rule, None), LEAD, ALLOW, BOT, POWER)
    tally, _ = judge(tally, OPS, ALLOW, BOT, POWER)
    assert decided_by(tally, ALLOW) == f"{LEAD} and {OPS}"
    rejected, _ = judge(Tally(rule, None), OPS, REJECT, BOT, POWER)
    assert decided_by(rejected, REJECT) == OPS


def test_the_lines_of_a_timeout_a_reminder_an_escalation_and_a_refused_tap() -> None:
    """Each says what happened in a person's words; a timeout names its reject option, or
    says cancelled when the request has none."""
    assert timeout_words(REJECT, 60.0, "10:00:00 UTC") == (
        "⌛ No decision within 60 s: Reject (reject_once) at 10:00:00 UTC"
    )
    assert "cancelled at 10:00:00 UTC (it has no reject option)" in timeout_words(
        None, 5, "10:00:00 UTC"
    )
    body, html = reminder_text(REQUEST, Mentions((LEAD,)))
    assert body == f"⏰ Still waiting for an answer to Run make (execute): {LEAD}"
    assert "matrix.to" in html
    body, _ = escalation_text(REQUEST, Mentions((OPS,)), 30.0)
    assert body == f"⏫ No decision on Run make (execute) after 30 s: {OPS} may answer it now."
    assert not_counted_text(EVE, "only x may answer") == (
        f"{EVE}: only x may answer; your reaction was not counted."
    )


def test_pending_lists_each_waiting_request_with_a_link_bounded() -> None:
    """One line per request with its matrix.to link; past MAX_LISTED, a count; none: said."""
    room = "!room:x.org"
    body, html = pending_text(room, [("$e1", REQUEST)])
    assert body == (
        "🔐 1 permission request waiting:\n"
        "• Run make (execute): https://matrix.to/#/%21room%3Ax.org/%24e1"
    )
    assert '<a href="https://matrix.to/#/%21room%3Ax.org/%24e1">Run make (execute)</a>' in html
    many = [(f"$e{n}", REQUEST) for n in range(MAX_LISTED + 5)]
    body, _ = pending_text(room, many)
    assert body.splitlines()[-1] == "… and 5 more"
    assert len(body.splitlines()) == MAX_LISTED + 2
    assert pending_text(room, [])[0] == "No permission request is waiting in this room."
