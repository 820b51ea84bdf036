"""Approval rules per kind of tool call, and how the taps on one request add up.

Pure. A rule (a ``[[rule]]`` table of the chat's ``--config`` file) names the ACP tool
kinds it covers, who may answer those requests (user ids and/or a power level; by
default the bot's approvers), how many distinct approvers must choose the same allow
option (``quorum``), whether the person who prompted the turn counts
(``self-approval``), and when an unanswered request is refused or escalated. The first
rule whose kinds match a request decides it; a request no rule matches is decided as
before the rules: any approver, first tap.

A tap is judged by the sender's user id and the rule, never by a name or a text: a
reject from a counted approver decides at once; an allow decides once ``quorum``
distinct counted approvers chose that same option; each counted approver counts once.
A timeout never allows: it answers the request's reject option, or ``cancelled`` when
it has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from relay.acp.changes import Option
from relay.chat.access import Access, power_level

# ACP's ToolKind values (schema v1); "switch_mode" is the schema's too, though rarely asked.
TOOL_KINDS = (
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
)
RULE_KEYS = (
    "kinds",
    "approvers",
    "approver-level",
    "quorum",
    "self-approval",
    "timeout",
    "escalate-after",
    "escalate-to",
)
MAX_RULES = 64
MAX_QUORUM = 20


class RuleError(ValueError):
    """A ``[[rule]]`` table that cannot be used (which one, why, and the fix)."""


@dataclass(frozen=True)
class Rule:
    """Who decides requests of some tool kinds, and how many must agree."""

    kinds: frozenset[str]
    approvers: frozenset[str] = frozenset()
    approver_level: int | None = None
    quorum: int = 1
    self_approval: bool = True
    timeout: float | None = None
    escalate_after: float | None = None
    escalate_to: frozenset[str] = frozenset()

    def access(self, bot: Access) -> Access:
        """Who may answer under this rule: its own approvers, else the bot's."""
        if not self.approvers and self.approver_level is None:
            return bot
        return replace(bot, approvers=self.approvers, approver_level=self.approver_level)


def rule_for(rules: Sequence[Rule], kind: str) -> Rule | None:
    """The first rule covering tool kind ``kind`` (None: the bot's approvers, first tap)."""
    return next((rule for rule in rules if kind in rule.kinds), None)


@dataclass(frozen=True)
class Policy:
    """The bot's approval policy: its rules, and what applies where a rule says nothing
    (``--approval-timeout``, ``--escalate-after`` with ``--escalate-to``, ``--remind-after``)."""

    rules: tuple[Rule, ...] = ()
    timeout: float | None = None
    escalate_after: float | None = None
    escalate_to: frozenset[str] = frozenset()
    remind_after: float | None = None

    def rule_for(self, kind: str) -> Rule:
        """The rule deciding a request of tool kind ``kind``: the first matching one, its
        timeout and escalation the bot's where it gives none; else the bot's approvers,
        first tap, under the bot's timeout and escalation."""
        rule = rule_for(self.rules, kind) or Rule(kinds=frozenset(TOOL_KINDS))
        if rule.timeout is None:
            rule = replace(rule, timeout=self.timeout)
        if rule.escalate_after is None and not rule.escalate_to:
            rule = replace(rule, escalate_after=self.escalate_after, escalate_to=self.escalate_to)
        elif not rule.escalate_to:  # its own wait, the bot's people
            rule = replace(rule, escalate_to=self.escalate_to)
        return rule


def policy_from(
    value: object,
    bot: Access,
    *,
    timeout: float | None = None,
    escalate_after: float | None = None,
    escalate_to: frozenset[str] = frozenset(),
    remind_after: float | None = None,
) -> Policy:
    """The bot's policy from the config file's ``rule`` array and its flags, checked as a
    whole; RuleError saying the fix."""
    if escalate_to and escalate_after is None:
        raise RuleError("--escalate-to needs --escalate-after SECONDS (when to add them)")
    if escalate_after is not None and not escalate_to:
        raise RuleError("--escalate-after needs --escalate-to USER_ID (whom to add)")
    rules = rules_from(value, bot)
    for number, rule in enumerate(rules, 1):
        if rule.escalate_after is not None and not (rule.escalate_to or escalate_to):
            raise RuleError(
                f"[[rule]] number {number}: escalate-after needs escalate-to = "
                '["@user:example.org"] (or the bot\'s --escalate-to): whom to add'
            )
    return Policy(rules, timeout, escalate_after, escalate_to, remind_after)


# -- the rules read from the config file ----------------------------------------------------


def rules_from(value: object, bot: Access) -> tuple[Rule, ...]:
    """The ``rule`` array of the config file as rules, checked; RuleError saying the fix."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise RuleError("'rule' must be an array of tables: write each as [[rule]]")
    if len(value) > MAX_RULES:
        raise RuleError(f"{len(value)} [[rule]] tables: at most {MAX_RULES}")
    return tuple(_rule(table, number, bot) for number, table in enumerate(value, 1))


def _rule(table: Mapping[str, object], number: int, bot: Access) -> Rule:
    where = f"[[rule]] number {number}"
    unknown = sorted(key for key in table if key not in RULE_KEYS)
    if unknown:
        raise RuleError(f"{where}: unknown key {unknown[0]!r}; valid keys: {', '.join(RULE_KEYS)}")
    rule = Rule(
        kinds=_kinds(table.get("kinds"), where),
        approvers=_users(table.get("approvers"), where, "approvers"),
        approver_level=_level(table.get("approver-level"), where),
        quorum=_quorum(table.get("quorum", 1), where),
        self_approval=_flag(table.get("self-approval", True), where, "self-approval"),
        timeout=_seconds(table.get("timeout"), where, "timeout"),
        escalate_after=_seconds(table.get("escalate-after"), where, "escalate-after"),
        escalate_to=_users(table.get("escalate-to"), where, "escalate-to"),
    )
    _check_reachable(rule, where, bot)
    return rule


def _check_reachable(rule: Rule, where: str, bot: Access) -> None:
    access = rule.access(bot)
    if not access.approvers and access.approver_level is None:
        raise RuleError(
            f"{where}: nobody could answer these requests: give approvers = "
            '["@user:example.org"] or approver-level = N'
        )
    if access.approver_level is None and rule.quorum > len(access.approvers | rule.escalate_to):
        raise RuleError(
            f"{where}: quorum = {rule.quorum} but only {len(access.approvers | rule.escalate_to)}"
            " people could ever approve (approvers and escalate-to, listed by id): lower the "
            "quorum or add approvers"
        )
    if rule.escalate_to and rule.escalate_after is None:
        raise RuleError(f"{where}: escalate-to needs escalate-after = SECONDS (when to add them)")


def _kinds(value: object, where: str) -> frozenset[str]:
    if not isinstance(value, list) or not value or not all(isinstance(k, str) for k in value):
        raise RuleError(
            f"{where}: kinds must be a non-empty list of ACP tool kinds, e.g. "
            f'kinds = ["execute"]; the kinds: {", ".join(TOOL_KINDS)}'
        )
    unknown = sorted(kind for kind in value if kind not in TOOL_KINDS)
    if unknown:
        raise RuleError(
            f"{where}: unknown tool kind {unknown[0]!r}; ACP's tool kinds: {', '.join(TOOL_KINDS)}"
        )
    return frozenset(value)


def _users(value: object, where: str, key: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(user, str) for user in value):
        raise RuleError(f'{where}: {key} must be a list of user ids, e.g. ["@lead:example.org"]')
    for user in value:
        localpart, colon, server = user[1:].partition(":")
        if not user.startswith("@") or not colon or not localpart or not server:
            raise RuleError(
                f"{where}: {key}: expected a Matrix user id such as "
                f"@alice:example.org, got {user[:100]!r}"
            )
    return frozenset(value)


def _level(value: object, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise RuleError(f"{where}: approver-level must be a power level (an integer, e.g. 50)")
    return value


def _quorum(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_QUORUM:
        raise RuleError(f"{where}: quorum must be a whole number from 1 to {MAX_QUORUM}")
    return value


def _flag(value: object, where: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise RuleError(f"{where}: {key} must be true or false")
    return value


def _seconds(value: object, where: str, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86_400:
        raise RuleError(f"{where}: {key} must be a number of seconds, above 0, at most 86400")
    return float(value)


# -- the taps on one request ------------------------------------------------------------------


@dataclass(frozen=True)
class Tap:
    """One approver's reaction as judged: whether it counted, and why not."""

    sender: str
    option_id: str
    counted: bool
    why_not: str = ""


@dataclass(frozen=True)
class Tally:
    """The taps on one request so far, under its rule (None: first counted tap decides)."""

    rule: Rule | None
    prompter: str | None  # who prompted the turn that asked (the self-approval rule's)
    escalated: bool = False
    taps: tuple[Tap, ...] = field(default=())
    reminded: bool = False

    def counted(self) -> frozenset[str]:
        """Who has answered in a way that counted."""
        return frozenset(t.sender for t in self.taps if t.counted)

    def told(self, sender: str) -> bool:
        """Whether ``sender`` was told already why a tap of theirs did not count."""
        return any(not t.counted and t.sender == sender for t in self.taps)

    def votes(self, option_id: str) -> tuple[str, ...]:
        """The counted approvers who chose ``option_id``, in order."""
        return tuple(t.sender for t in self.taps if t.counted and t.option_id == option_id)

    def quorum(self) -> int:
        return 1 if self.rule is None else self.rule.quorum


@dataclass(frozen=True)
class Decided:
    """The tap decided the request: answer ``option``."""

    option: Option


@dataclass(frozen=True)
class Counted:
    """The tap counted toward ``option``; ``votes`` of the quorum so far."""

    option: Option
    votes: tuple[str, ...]
    quorum: int


@dataclass(frozen=True)
class NotCounted:
    """The tap changed nothing (why, to say once to its sender)."""

    why: str


Verdict = Decided | Counted | NotCounted


def judge(
    tally: Tally, sender: str, option: Option, bot: Access, power: Mapping[str, Any] | None
) -> tuple[Tally, Verdict]:
    """``sender``'s tap on ``option``, judged by the rule: the tally after it, and what it did."""
    why = _why_not_counted(tally, sender, bot, power)
    if why is not None:
        if tally.told(sender):  # noted once per person: a flood of taps costs nothing kept
            return tally, NotCounted(why)
        return _noted(tally, Tap(sender, option.option_id, False, why)), NotCounted(why)
    after = _noted(tally, Tap(sender, option.option_id, True))
    if is_reject(option):
        return after, Decided(option)
    votes = after.votes(option.option_id)
    if len(votes) >= after.quorum():
        return after, Decided(option)
    return after, Counted(option, votes, after.quorum())


def _why_not_counted(
    tally: Tally, sender: str, bot: Access, power: Mapping[str, Any] | None
) -> str | None:
    rule = tally.rule
    access = bot if rule is None else rule.access(bot)
    escalated = rule is not None and tally.escalated and sender in rule.escalate_to
    if not (access.may_approve(sender, power) or escalated):
        return f"only {approvers_text(tally, bot)} may answer this request"
    if rule is not None and not rule.self_approval and sender == tally.prompter:
        return "the person who prompted this turn may not approve its requests"
    if any(tap.counted and tap.sender == sender for tap in tally.taps):
        return "each approver counts once: your first answer stands"
    return None


def _noted(tally: Tally, tap: Tap) -> Tally:
    return replace(tally, taps=(*tally.taps, tap))


def is_reject(option: Option) -> bool:
    return option.kind.startswith("reject")


def approvers_text(tally: Tally, bot: Access) -> str:
    """Who may answer this request, in words for its message."""
    rule = tally.rule
    words = (bot if rule is None else rule.access(bot)).approvers_text()
    if rule is not None and tally.escalated and rule.escalate_to:
        words += ", and since the escalation " + ", ".join(sorted(rule.escalate_to))
    return words


def who_may_answer(
    tally: Tally, bot: Access, members: Sequence[str], power: Mapping[str, Any] | None
) -> tuple[str, ...]:
    """The room's ``members`` who may answer the request now, in order (for its mentions)."""
    rule = tally.rule
    access = bot if rule is None else rule.access(bot)
    extra = rule.escalate_to if rule is not None and tally.escalated else frozenset()
    listed = sorted(access.approvers | extra)
    by_level = [
        user
        for user in members
        if access.approver_level is not None
        and power_level(user, power) >= access.approver_level
        and user not in listed
    ]
    return (*listed, *sorted(by_level))


def timeout_option(options: Sequence[Option]) -> Option | None:
    """What a timed-out request is answered: ``reject_once``, else the first reject option;
    None (``cancelled``) only when it has no reject option. Never an allow."""
    for option in options:
        if option.kind == "reject_once":
            return option
    return next((option for option in options if is_reject(option)), None)


def tally_state(tally: Tally) -> dict[str, Any]:
    """The tally's taps and escalation as JSON values (the rule is the config's, not kept)."""
    return {
        "prompter": tally.prompter,
        "escalated": tally.escalated,
        "reminded": tally.reminded,
        "taps": [[t.sender, t.option_id, t.counted, t.why_not] for t in tally.taps],
    }


def tally_of(state: Mapping[str, Any], rule: Rule | None) -> Tally:
    """A tally kept by :func:`tally_state`, under ``rule`` (the config's, read at start)."""
    taps = tuple(
        Tap(str(sender), str(option_id), bool(counted), str(why))
        for sender, option_id, counted, why in state.get("taps", [])
    )
    prompter = state.get("prompter")
    return Tally(
        rule,
        prompter if isinstance(prompter, str) else None,
        bool(state.get("escalated")),
        taps,
        bool(state.get("reminded")),
    )
