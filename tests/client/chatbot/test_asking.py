"""Permission requests under approval rules, end to end: a real Synapse, a relay with the
demo agent (its /ask is an ``edit``), the bot as a subprocess, approvers as client-library
sessions; then ``acp-relay chat audit`` read against what the thread said."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.agents import DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import Args, request_in
from tests.support.env import secret_env
from tests.support.live import live_relay, until_detached
from tests.support.matrix import Person, has, person
from tests.support.synapse import Homeserver

pytestmark = pytest.mark.timeout(150)


def rules_file(folder: Path, text: str) -> Path:
    path = folder / "chat.toml"
    path.write_text(text)
    return path


def mentions_of(who: Person, room: str, event_id: str) -> Any:
    """The ``m.mentions`` of the event as first sent."""
    [sent] = [e for e in who.room_messages(room) if e["event_id"] == event_id]
    return sent["content"].get("m.mentions")


async def chat_audit(state: Path, *more: str) -> str:
    """``acp-relay chat audit --state STATE MORE``'s output (it must succeed)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "relay", "chat", "audit", "--state", str(state), *more,
        env=secret_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_a_quorum_waits_for_two_allows_across_a_kill_and_a_reject_refuses_at_once(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """Quorum 2 without self-approval: the request mentions the two other approvers, not the
    prompter; the prompter's tap does not count (said once); one allow keeps the agent
    waiting with "1 of 2"; the bot is killed; after its restart the second allow answers
    the agent; a later request is refused by one reject at once; the audit tells the same."""
    bot, alice, bob, carol = (homeserver.register(n) for n in ("bot", "alice", "bob", "carol"))
    audit.secret(bot.token)
    config = rules_file(tmp_path, f"""
[[rule]]
kinds = ["edit"]
approvers = ["{alice.user_id}", "{bob.user_id}", "{carol.user_id}"]
quorum = 2
self-approval = false
""")  # fmt: skip
    state = tmp_path / "chat.sqlite"
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as second,
        person(homeserver, carol) as third,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id, carol.user_id])
        await second.join(room)
        await third.join(room)
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id], state,
                    extra=["--config", str(config)])  # fmt: skip
        async with args.start() as first_run:
            audit.watch(first_run.lines)
            await first_run.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            request = await request_in(lead, room, root, 1)
            assert mentions_of(lead, room, request.event_id) == {
                "user_ids": sorted([bob.user_id, carol.user_id])
            }
            assert "Needs 2 approvers choosing the same allow option" in request.body
            await lead.react(room, request.event_id, "1️⃣")
            await lead.react(room, request.event_id, "2️⃣")
            refused = "the person who prompted this turn may not approve its requests"
            await lead.until_thread(room, root, lambda t: has(t, refused))
            await second.react(room, request.event_id, "1️⃣")
            tallied = await lead.until_thread(
                room, root, lambda t: has(t, f"Allow: 1 of 2: {bob.user_id}")
            )
            assert not has(tallied, "permission:")
            assert sum(refused in s.body for s in tallied) == 1
            assert await first_run.stop(signal.SIGKILL) == -signal.SIGKILL
        assert await until_detached(live)
        async with args.start() as second_run:
            audit.watch(second_run.lines)
            await second_run.logged("connection resumed after a restart")
            await third.react(room, request.event_id, "1️⃣")
            done = await lead.until_thread(
                room, root, lambda t: has(t, "permission: allow", "End of turn: end_turn")
            )
            decided = next(s for s in done if s.event_id == request.event_id)
            assert f"chosen by {bob.user_id} and {carol.user_id} in the chat" in decided.body
            await lead.say(room, "/ask", thread=root)
            again = await request_in(lead, room, root, 2)
            await third.react(room, again.event_id, "2️⃣")
            done = await lead.until_thread(room, root, lambda t: has(t, "permission: reject"))
            refusal = next(s for s in done if s.event_id == again.event_id)
            assert f"✅ Reject (reject_once): chosen by {carol.user_id}" in refusal.body
            assert await second_run.stop() == 0
    records = [json.loads(line) for line in (await chat_audit(state)).splitlines()]
    assert [r["request_event"] for r in records] == [request.event_id, again.event_id]
    allowed, rejected = records
    assert (allowed["outcome"], allowed["option"]["id"], allowed["decided_from"]) == (
        "selected", "allow", "chat")  # fmt: skip
    assert allowed["decided_by"] == f"{bob.user_id} and {carol.user_id}"  # as the thread says
    assert [(t["sender"], t["counted"]) for t in allowed["taps"]] == [
        (alice.user_id, False), (bob.user_id, True), (carol.user_id, True)]  # fmt: skip
    assert allowed["taps"][0]["why_not"] == refused
    assert allowed["link"] == f"https://matrix.to/#/{quote(room, safe='')}/" + quote(
        request.event_id, safe=""
    )
    assert allowed["tool_call"]["kind"] == "edit"
    assert (rejected["option"]["kind"], rejected["decided_by"]) == ("reject_once", carol.user_id)
    table = list(csv.reader(io.StringIO(await chat_audit(state, "--format", "csv"))))
    assert len(table) == 3
    assert table[1][table[0].index("decided_by")] == allowed["decided_by"]


async def test_an_escalation_mentions_its_people_who_may_then_answer_and_a_timeout_refuses(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A rule escalating after 1 s and timing out after 6 s: the escalation edits the
    request and mentions the added approver in the thread, who then answers it; a request
    nobody answers is refused with its reject option and the turn goes on; the audit says
    who decided each, and that the second timed out."""
    bot, alice, dave = (homeserver.register(n) for n in ("bot", "alice", "dave"))
    audit.secret(bot.token)
    config = rules_file(tmp_path, f"""
[[rule]]
kinds = ["edit", "execute"]
timeout = 6
escalate-after = 1
escalate-to = ["{dave.user_id}"]
""")  # fmt: skip
    state = tmp_path / "chat.sqlite"
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, dave) as oncall,
    ):
        room = await lead.create_room([bot.user_id, dave.user_id])
        await oncall.join(room)
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id], state,
                    extra=["--config", str(config)])  # fmt: skip
        async with args.start() as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            request = await request_in(lead, room, root, 1)
            assert mentions_of(lead, room, request.event_id) == {"user_ids": [alice.user_id]}
            await oncall.react(room, request.event_id, "2️⃣")  # not yet: not counted
            escalated = f"after 1 s: {dave.user_id} may answer it now."
            thread = await lead.until_thread(room, root, lambda t: has(t, escalated))
            line = next(s for s in thread if escalated in s.body)
            assert mentions_of(lead, room, line.event_id) == {"user_ids": [dave.user_id]}
            edited = next(s for s in thread if s.event_id == request.event_id)
            assert f"and since the escalation {dave.user_id}" in edited.body
            await oncall.react(room, request.event_id, "1️⃣")
            done = await lead.until_thread(room, root, lambda t: has(t, "permission: allow"))
            decided = next(s for s in done if s.event_id == request.event_id)
            assert f"chosen by {dave.user_id} in the chat" in decided.body
            await lead.say(room, "/ask", thread=root)
            ignored = await request_in(lead, room, root, 2)
            done = await lead.until_thread(room, root, lambda t: has(
                t, "permission: reject") and t[-1].body.endswith("End of turn: end_turn"),
                seconds=30)  # fmt: skip
            timed_out = next(s for s in done if s.event_id == ignored.event_id)
            assert "⌛ No decision within 6 s: Reject (reject_once)" in timed_out.body
            assert await running.stop() == 0
    first, second = (json.loads(line) for line in (await chat_audit(state)).splitlines())
    assert (first["decided_by"], first["decided_from"]) == (dave.user_id, "chat")
    assert [(t["sender"], t["counted"]) for t in first["taps"]] == [
        (dave.user_id, False), (dave.user_id, True)]  # fmt: skip
    assert (second["outcome"], second["decided_from"], second["option"]["kind"]) == (
        "timed out", "timeout", "reject_once")  # fmt: skip


async def test_a_reminder_mentions_who_has_not_answered_and_pending_lists_the_waiting(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """With approvers by id and by power level, the request mentions both kinds (not a
    member below the level); !pending lists it with a link; --remind-after mentions them
    again once; once answered, !pending says nothing waits."""
    bot, alice, bob, carol = (homeserver.register(n) for n in ("bot", "alice", "bob", "carol"))
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as member,
        person(homeserver, carol) as moderator,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id, carol.user_id])
        await lead.set_power(room, carol.user_id, 50)
        await member.join(room)
        await moderator.join(room)
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id],
                    tmp_path / "chat.sqlite",
                    extra=["--approver-level", "50", "--remind-after", "2"])  # fmt: skip
        async with args.start() as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            request = await request_in(lead, room, root, 1)
            waiting = {"user_ids": [alice.user_id, carol.user_id]}
            assert mentions_of(lead, room, request.event_id) == waiting
            asked = await lead.say(room, f"{bot.user_id} !pending")
            listing = await lead.until_thread(room, asked, lambda t: has(t, "1 permission"))
            assert quote(request.event_id, safe="") in listing[-1].body
            reminded = await lead.until_thread(room, root, lambda t: has(t, "⏰ Still waiting"))
            reminder = next(s for s in reminded if "⏰" in s.body)
            assert mentions_of(lead, room, reminder.event_id) == waiting
            await moderator.react(room, request.event_id, "1️⃣")
            await lead.until_thread(room, root, lambda t: has(t, "permission: allow"))
            await lead.say(room, "!pending", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "No permission request is"))
            assert await running.stop() == 0
        assert len(running.events("permission request answered")) == 1


async def test_an_approver_who_may_not_prompt_still_lists_and_answers_requests(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """With --prompter set apart from the approvers: the approver's !pending and !answer
    are carried out, their prompt is refused; the prompter's !answer does not count."""
    bot, alice, bob = (homeserver.register(n) for n in ("bot", "alice", "bob"))
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as approver,
        person(homeserver, bob) as prompter,
    ):
        room = await approver.create_room([bot.user_id, bob.user_id])
        await prompter.join(room)
        args = Args(homeserver, bot, live.url(), tmp_path, [room], [alice.user_id],
                    tmp_path / "chat.sqlite", extra=["--prompter", bob.user_id])  # fmt: skip
        async with args.start() as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await prompter.say(room, f"{bot.user_id} /ask")
            await request_in(approver, room, root, 1)
            asked = await approver.say(room, f"{bot.user_id} !pending")
            await approver.until_thread(room, asked, lambda t: has(t, "1 permission request"))
            await prompter.say(room, "!answer 1", thread=root)
            await approver.until_thread(room, root, lambda t: has(
                t, f"{bob.user_id}: only {alice.user_id} may answer this request"))  # fmt: skip
            await approver.say(room, "and also delete it", thread=root)
            await approver.until_thread(room, root, lambda t: has(t, "you may not prompt"))
            await approver.say(room, "!answer 1", thread=root)
            done = await approver.until_thread(room, root, lambda t: has(t, "permission: allow"))
            assert has(done, f"chosen by {alice.user_id} in the chat (!answer 1)")
            assert await running.stop() == 0
