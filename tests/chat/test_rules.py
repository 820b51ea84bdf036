"""Approval rules: read from the config's [[rule]] tables, and taps judged under them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.acp.changes import Option
from relay.chat.access import Access
from relay.chat.rules import (
    Counted,
    Decided,
    NotCounted,
    Policy,
    Rule,
    RuleError,
    Tally,
    judge,
    policy_from,
    rule_for,
    rules_from,
    tally_of,
    tally_state,
    timeout_option,
    who_may_answer,
)

LEAD, OPS, OPS2, EVE = "@lead:x.org", "@ops:x.org", "@ops2:x.org", "@eve:x.org"
BOT = Access(approvers=frozenset({LEAD}))
ALLOW = Option("allow", "Allow", "allow_once")
ALWAYS = Option("always", "Always", "allow_always")
REJECT = Option("reject", "Reject", "reject_once")
NEVER = Option("never", "Never", "reject_always")
POWER = {"users": {LEAD: 100, OPS: 50, OPS2: 50, EVE: 0}}


def two_of_ops(**more: Any) -> Rule:
    return Rule(frozenset({"execute"}), approvers=frozenset({OPS, OPS2, LEAD}), quorum=2, **more)


@pytest.mark.parametrize(
    ("table", "fix"),
    [
        ({"kinds": ["exec"]}, "unknown tool kind 'exec'"),
        ({"kinds": []}, "kinds must be a non-empty list"),
        ({"kinds": "execute"}, "kinds must be a non-empty list"),
        ({"kinds": ["read"], "quorm": 2}, "unknown key 'quorm'"),
        ({"kinds": ["read"], "approvers": [OPS], "quorum": 2}, "only 1 people could ever"),
        ({"kinds": ["read"], "quorum": 0}, "quorum must be a whole number"),
        ({"kinds": ["read"], "quorum": True}, "quorum must be a whole number"),
        ({"kinds": ["read"], "approvers": ["ops"]}, "expected a Matrix user id"),
        ({"kinds": ["read"], "approver-level": "high"}, "approver-level must be a power level"),
        ({"kinds": ["read"], "self-approval": "no"}, "self-approval must be true or false"),
        ({"kinds": ["read"], "timeout": 0}, "timeout must be a number of seconds"),
        ({"kinds": ["read"], "escalate-to": [OPS]}, "escalate-to needs escalate-after"),
    ],
)
def test_a_rule_that_cannot_work_is_refused_with_the_fix(table: dict[str, Any], fix: str) -> None:
    """Each misconfigured [[rule]] table is refused, naming the table and what to change."""
    with pytest.raises(RuleError, match=re.escape("[[rule]] number 1")) as caught:
        rules_from([table], BOT)
    assert fix in str(caught.value)


def test_a_rule_without_approvers_needs_the_bot_to_have_some() -> None:
    """A rule naming no approvers falls back on the bot's; with none there either, refused."""
    assert rules_from([{"kinds": ["read"]}], BOT)[0].access(BOT) == BOT
    with pytest.raises(RuleError, match="nobody could answer"):
        rules_from([{"kinds": ["read"]}], Access())


def test_rules_are_read_in_order_and_the_first_matching_one_decides() -> None:
    """rule_for takes the first rule whose kinds cover the tool kind; none: no rule."""
    rules = rules_from(
        [
            {
                "kinds": ["execute", "delete"],
                "approvers": [OPS, OPS2],
                "quorum": 2,
                "self-approval": False,
                "timeout": 60,
                "escalate-after": 30,
                "escalate-to": [LEAD],
            },
            {"kinds": ["execute", "edit"], "approver-level": 50},
        ],
        BOT,
    )
    assert rule_for(rules, "execute") == Rule(
        frozenset({"execute", "delete"}),
        frozenset({OPS, OPS2}),
        None,
        2,
        False,
        60.0,
        30.0,
        frozenset({LEAD}),
    )
    assert rule_for(rules, "edit") == Rule(frozenset({"execute", "edit"}), approver_level=50)
    assert rule_for(rules, "read") is None
    assert rules_from(None, BOT) == ()


def test_an_allow_decides_only_at_quorum_and_a_reject_at_once() -> None:
    """Quorum 2: the first allow is counted (1 of 2), the second decides; a reject decides."""
    tally = Tally(two_of_ops(), prompter=EVE)
    tally, first = judge(tally, OPS, ALLOW, BOT, POWER)
    assert first == Counted(ALLOW, (OPS,), 2)
    tally, second = judge(tally, OPS2, ALLOW, BOT, POWER)
    assert second == Decided(ALLOW)
    _, rejected = judge(Tally(two_of_ops(), EVE), OPS, REJECT, BOT, POWER)
    assert rejected == Decided(REJECT)


def test_votes_for_different_allow_options_do_not_add_up() -> None:
    """One allow_once and one allow_always are two options at 1 of 2 each: nothing decided."""
    tally, _ = judge(Tally(two_of_ops(), EVE), OPS, ALLOW, BOT, POWER)
    tally, verdict = judge(tally, OPS2, ALWAYS, BOT, POWER)
    assert verdict == Counted(ALWAYS, (OPS2,), 2)
    assert tally.votes("allow") == (OPS,)


@pytest.mark.parametrize(
    ("sender", "rule", "why"),
    [
        (EVE, two_of_ops(), "only "),
        (LEAD, two_of_ops(self_approval=False), "the person who prompted this turn"),
        ("@lead:x.org ", two_of_ops(), "only "),  # a near-miss id is another user
    ],
)
def test_a_tap_that_does_not_count_says_why(sender: str, rule: Rule, why: str) -> None:
    """Non-approvers, and the prompter under self-approval = false, change nothing."""
    tally, verdict = judge(Tally(rule, prompter=LEAD), sender, ALLOW, BOT, POWER)
    assert isinstance(verdict, NotCounted)
    assert why in verdict.why
    assert tally.votes("allow") == ()
    assert [tap.counted for tap in tally.taps] == [False]


def test_an_approver_counts_once_however_often_they_tap() -> None:
    """The same approver tapping twice (or two allow options) stays one vote."""
    tally, _ = judge(Tally(two_of_ops(), EVE), OPS, ALLOW, BOT, POWER)
    tally, again = judge(tally, OPS, ALLOW, BOT, POWER)
    tally, other = judge(tally, OPS, ALWAYS, BOT, POWER)
    assert isinstance(again, NotCounted)
    assert isinstance(other, NotCounted)
    assert tally.votes("allow") == (OPS,)


def test_escalation_adds_its_people_only_once_it_happened() -> None:
    """escalate-to users count only after the escalation."""
    rule = Rule(
        frozenset({"execute"}), frozenset({OPS}), escalate_after=5.0, escalate_to=frozenset({EVE})
    )
    _, before = judge(Tally(rule, None), EVE, ALLOW, BOT, POWER)
    assert isinstance(before, NotCounted)
    _, after = judge(Tally(rule, None, escalated=True), EVE, ALLOW, BOT, POWER)
    assert after == Decided(ALLOW)


def test_no_rule_keeps_the_first_approvers_tap() -> None:
    """Without a rule, any of the bot's approvers decides with one tap."""
    _, verdict = judge(Tally(None, prompter=LEAD), LEAD, ALLOW, BOT, POWER)
    assert verdict == Decided(ALLOW)


def test_power_level_rules_count_by_the_rooms_levels() -> None:
    """approver-level 50: the members at 50 or more count, the others do not."""
    rule = Rule(frozenset({"edit"}), approver_level=50)
    _, ops = judge(Tally(rule, None), OPS, ALLOW, BOT, POWER)
    _, eve = judge(Tally(rule, None), EVE, ALLOW, BOT, POWER)
    assert ops == Decided(ALLOW)
    assert isinstance(eve, NotCounted)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ((ALLOW, ALWAYS, NEVER, REJECT), REJECT),
        ((ALLOW, NEVER), NEVER),
        ((ALLOW, ALWAYS), None),
        ((), None),
    ],
)
def test_a_timeout_answers_a_reject_never_an_allow(
    options: tuple[Option, ...], expected: Option | None
) -> None:
    """reject_once first, else the first reject option, else cancelled (None)."""
    assert timeout_option(options) == expected


def test_who_may_answer_lists_ids_then_members_at_the_level() -> None:
    """Mentions: the listed approvers, then room members at the level, each once."""
    rule = Rule(frozenset({"edit"}), approvers=frozenset({LEAD}), approver_level=50)
    members = [EVE, OPS2, OPS, LEAD]
    assert who_may_answer(Tally(rule, None), BOT, members, POWER) == (LEAD, OPS2, OPS)
    escalating = Rule(
        frozenset({"edit"}), frozenset({OPS}), escalate_after=1.0, escalate_to=frozenset({EVE})
    )
    assert who_may_answer(Tally(escalating, None, escalated=True), BOT, [], POWER) == (EVE, OPS)


SENDERS = st.sampled_from([LEAD, OPS, OPS2, EVE])
OPTIONS = st.sampled_from([ALLOW, ALWAYS, REJECT, NEVER])


@given(st.lists(st.tuples(SENDERS, OPTIONS), max_size=12), st.booleans())
def test_a_decision_needs_counted_approvers_and_the_tally_survives_a_restart(
    taps: list[tuple[str, Option]], self_approval: bool
) -> None:
    """Whatever the taps: an allow is decided only by quorum distinct counted approvers, a
    non-approver never counts, and the kept tally judges the next tap as the live one."""
    rule = two_of_ops(self_approval=self_approval)
    tally = Tally(rule, prompter=LEAD)
    for sender, option in taps:
        kept = tally_of(tally_state(tally), rule)
        assert kept == tally
        tally, verdict = judge(tally, sender, option, BOT, POWER)
        assert judge(kept, sender, option, BOT, POWER) == (tally, verdict)
        if sender == EVE or (sender == LEAD and not self_approval):
            assert isinstance(verdict, NotCounted)
        if isinstance(verdict, Decided) and not option.kind.startswith("reject"):
            voters = tally.votes(option.option_id)
            assert len(set(voters)) == len(voters) >= 2
            assert EVE not in voters
            break
        if isinstance(verdict, Decided):
            break


def test_the_policy_gives_every_kind_a_rule_with_the_bots_timeout_and_escalation() -> None:
    """A kind no rule covers gets the bot's approvers, first tap, under --approval-timeout
    and --escalate-*; a rule keeps its own timeout and escalation, and takes the bot's
    escalation people when it names only when to escalate."""
    own = Rule(frozenset({"execute"}), timeout=10.0, escalate_after=5.0,
               escalate_to=frozenset({OPS}))  # fmt: skip
    waits = Rule(frozenset({"delete"}), escalate_after=7.0)
    policy = Policy((own, waits), timeout=60.0, escalate_after=30.0,
                    escalate_to=frozenset({LEAD}))  # fmt: skip
    assert policy.rule_for("execute") == own
    assert policy.rule_for("delete") == Rule(
        frozenset({"delete"}), timeout=60.0, escalate_after=7.0, escalate_to=frozenset({LEAD})
    )
    fallback = policy.rule_for("read")
    assert fallback.access(BOT) == BOT
    assert (fallback.quorum, fallback.self_approval, fallback.timeout) == (1, True, 60.0)
    assert (fallback.escalate_after, fallback.escalate_to) == (30.0, frozenset({LEAD}))
    assert Policy().rule_for("read").timeout is None


@pytest.mark.parametrize(
    ("rules", "flags", "fix"),
    [
        (None, {"escalate_to": frozenset({OPS})}, "--escalate-to needs --escalate-after"),
        (None, {"escalate_after": 5.0}, "--escalate-after needs --escalate-to"),
        ([{"kinds": ["read"], "escalate-after": 5}], {}, "escalate-after needs escalate-to"),
    ],
)
def test_an_escalation_with_nobody_to_add_or_no_time_is_refused(
    rules: Any, flags: dict[str, Any], fix: str
) -> None:
    """Escalation needs both when and whom, from the flags or the rule."""
    with pytest.raises(RuleError, match=re.escape(fix)):
        policy_from(rules, BOT, **flags)
    if rules is not None:  # the bot's --escalate-to serves the rule
        made = policy_from(rules, BOT, escalate_after=9.0, escalate_to=frozenset({OPS}))
        assert made.rule_for("read").escalate_to == frozenset({OPS})


PEOPLE = st.sampled_from([LEAD, OPS, OPS2, EVE])
OPTIONS = st.sampled_from([ALLOW, ALWAYS, REJECT, NEVER])


@given(st.lists(st.tuples(PEOPLE, OPTIONS), max_size=200))
def test_a_flood_of_taps_keeps_at_most_two_per_person(taps: list[tuple[str, Option]]) -> None:
    """However many taps come, a tally keeps one counted and one refused tap per person at
    most: what a hostile member's reactions cost stays bounded."""
    tally = Tally(two_of_ops(self_approval=False), prompter=LEAD)
    for sender, option in taps:
        tally, verdict = judge(tally, sender, option, BOT, POWER)
        if isinstance(verdict, Decided):
            break
    for person in (LEAD, OPS, OPS2, EVE):
        assert sum(tap.sender == person for tap in tally.taps) <= 2
