"""What the thread says of a permission request under the approval rules: whom it mentions,
how the tally stands, a reminder, an escalation, a timeout.

Pure. A request's message mentions, on purpose, the people who may answer it now (in its
``m.mentions.user_ids`` and, readable, in its body and HTML), never ``@room``, and never
someone whose tap would not count (the bot, the prompter under ``self-approval = false``,
an approver who has answered); the list is bounded and says so when it is cut. The
agent's own words still mention nobody (:func:`relay.chat.events.message`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from relay.acp.changes import Option
from relay.chat.access import Access
from relay.chat.audit import matrix_link
from relay.chat.permissions import Request, request_text
from relay.chat.rules import Tally, approvers_text, is_reject, who_may_answer
from relay.chat.text import safe_line, to_html

MAX_MENTIONS = 20  # people one message mentions (a level rule may cover a crowd)


@dataclass(frozen=True)
class Mentions:
    """Whom a message mentions, and how many more it would have but for the bound."""

    users: tuple[str, ...] = ()
    more: int = 0

    def content(self) -> dict[str, Any]:
        """The message's ``m.mentions``."""
        return {"user_ids": list(self.users)} if self.users else {}


def mentions_for(
    tally: Tally,
    bot: Access,
    members: Sequence[str],
    power: Mapping[str, Any] | None,
    me: str,
) -> Mentions:
    """The people who may answer the request now and whose tap would count, bounded."""
    rule = tally.rule
    excluded = {me, *tally.counted()}
    if rule is not None and not rule.self_approval and tally.prompter is not None:
        excluded.add(tally.prompter)
    people = [user for user in who_may_answer(tally, bot, members, power) if user not in excluded]
    return Mentions(tuple(people[:MAX_MENTIONS]), max(len(people) - MAX_MENTIONS, 0))


def mention_text(mentions: Mentions) -> tuple[str, str]:
    """The mentions as words (plain text, HTML with a matrix.to link per person)."""
    more = f" and {mentions.more} more" if mentions.more else ""
    plain = ", ".join(safe_line(user, 255) for user in mentions.users) + more
    links = ", ".join(
        f'<a href="https://matrix.to/#/{quote(user, safe="@:")}">{to_html(safe_line(user, 255))}'
        "</a>"
        for user in mentions.users
    )
    return plain, links + to_html(more)


def asked_text(request: Request, tally: Tally, bot: Access, mentions: Mentions) -> tuple[str, str]:
    """The request's message while pending: what, its options, its rule, the tally so far,
    and whom it waits for (plain text, HTML)."""
    body, html = request_text(request, approvers_text(tally, bot))
    lines = [*rule_lines(tally), *tally_lines(request, tally)]
    if mentions.users:
        plain, linked = mention_text(mentions)
        lines.append(f"Waiting for: {plain}")
        html_lines = [to_html(line) for line in lines[:-1]] + [f"Waiting for: {linked}"]
    else:
        html_lines = [to_html(line) for line in lines]
    if not lines:
        return body, html
    return body + "\n" + "\n".join(lines), html + "<br>" + "<br>".join(html_lines)


def rule_lines(tally: Tally) -> list[str]:
    """What the request's rule asks beyond one approver's tap, in words."""
    rule = tally.rule
    if rule is None:
        return []
    lines = []
    if rule.quorum > 1:
        lines.append(
            f"Needs {rule.quorum} approvers choosing the same allow option; a reject "
            "from one refuses."
        )
    if not rule.self_approval:
        lines.append("The person who prompted this turn does not count.")
    if rule.timeout is not None:
        lines.append(f"Refused if no decision within {rule.timeout:g} s.")
    return lines


def tally_lines(request: Request, tally: Tally) -> list[str]:
    """Each allow option that has counted votes: ``Allow: 1 of 2: @lead``."""
    lines = []
    for option in request.options:
        votes = tally.votes(option.option_id)
        if votes and not is_reject(option):
            lines.append(
                f"{safe_line(option.name)}: {len(votes)} of {tally.quorum()}: "
                f"{', '.join(safe_line(v, 255) for v in votes)}"
            )
    return lines


def decided_by(tally: Tally, option: Option) -> str:
    """Who decided: the counted approvers who chose ``option`` (the last of them for a reject)."""
    votes = tally.votes(option.option_id)
    if is_reject(option):
        votes = votes[-1:]
    return " and ".join(votes) or "nobody"


def not_counted_text(sender: str, why: str) -> str:
    """The thread's line to someone whose tap did not count."""
    return f"{safe_line(sender, 255)}: {why}; your reaction was not counted."


def timeout_words(option: Option | None, seconds: float, when: str) -> str:
    """The request's decision when nobody decided in time: its reject option, never an allow."""
    if option is None:
        return f"⌛ No decision within {seconds:g} s: cancelled at {when} (it has no reject option)"
    return (
        f"⌛ No decision within {seconds:g} s: {safe_line(option.name)} "
        f"({safe_line(option.kind, 40)}) at {when}"
    )


def reminder_text(request: Request, mentions: Mentions) -> tuple[str, str]:
    """The one reminder: who has still to answer the request (plain text, HTML)."""
    plain, linked = mention_text(mentions)
    head = f"⏰ Still waiting for an answer to {request.title} ({request.kind}): "
    return head + plain, to_html(head) + linked


def escalation_text(request: Request, added: Mentions, seconds: float) -> tuple[str, str]:
    """The escalation's line in the thread: who may answer the request from now on."""
    plain, linked = mention_text(added)
    head = f"⏫ No decision on {request.title} ({request.kind}) after {seconds:g} s: "
    tail = " may answer it now."
    return head + plain + tail, to_html(head) + linked + to_html(tail)


MAX_LISTED = 30  # requests !pending lists (the rest counted)


def pending_text(room: str, waiting: Sequence[tuple[str, Request]]) -> tuple[str, str]:
    """``!pending``'s answer: the room's requests still waiting, each with a link to its
    message (``waiting``: message event id and request, oldest first)."""
    if not waiting:
        return (
            "No permission request is waiting in this room.",
            "No permission request is waiting in this room.",
        )
    head = f"🔐 {len(waiting)} permission request{'s' if len(waiting) > 1 else ''} waiting:"
    plain, html = [head], [to_html(head)]
    for event_id, request in waiting[:MAX_LISTED]:
        link = matrix_link(room, event_id)
        what = f"{request.title} ({request.kind})"
        plain.append(f"• {what}: {link}")
        html.append(f'• <a href="{to_html(link)}">{to_html(what)}</a>')
    if len(waiting) > MAX_LISTED:
        more = f"… and {len(waiting) - MAX_LISTED} more"
        plain.append(more)
        html.append(to_html(more))
    return "\n".join(plain), "<br>".join(html)
