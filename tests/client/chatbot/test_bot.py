"""The bot end to end: a real Synapse, a relay with the demo agent, the bot as a subprocess,
people as client-library sessions."""

from __future__ import annotations

import asyncio
import sys
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from mautrix.types import EventType, PowerLevelStateEventContent, RoomID, UserID

from relay.chat.access import Access
from relay.client.chatbot.bot import MAX_EARLY, ChatBot
from relay.client.chatbot.botconfig import ChatConfig
from relay.client.chatbot.matrix import LATER, Later, MatrixSession
from relay.client.chatbot.rounds import Answerable
from relay.client.chatbot.store import State
from relay.client.link.dialing import DialConfig
from relay.client.link.ticketsource import TicketSource
from relay.observe import logs
from tests.support.agents import CHATTY, DEMO_AGENT
from tests.support.audit import LogAudit
from tests.support.chatbot import BotRun, chat_bot
from tests.support.live import live_relay, until_idle
from tests.support.matrix import Person, has, person
from tests.support.synapse import Homeserver
from tests.support.waiting import until

if TYPE_CHECKING:
    from relay.client.chatbot.crypto import RoomCrypto

pytestmark = pytest.mark.timeout(120)


async def test_a_mention_opens_a_thread_where_the_team_answers_the_agent(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A mention opens a thread (one connection, one session); the turn shows a tool call and a
    permission request; a non-approver's reaction is ignored (said once); the approver's
    answers; the tool completes, the turn ends; a reply is the next prompt; !end ends it."""
    bot, alice, bob = (homeserver.register(name) for name in ("bot", "alice", "bob"))
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as other,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id])
        await other.join(room)
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room], approvers=[alice.user_id]
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            thread = await lead.until_thread(room, root, lambda t: has(t, "Permission requested"))
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            assert "\n1️⃣ Allow (allow_once)\n2️⃣ Reject (reject_once)\n" in request.body
            await lead.until_thread(room, root, lambda t: all(
                s.reactions.get(k) == {bot.user_id} for s in t if s.event_id == request.event_id
                for k in ("1️⃣", "2️⃣")))  # fmt: skip
            await other.react(room, request.event_id, "1️⃣")
            await other.react(room, request.event_id, "2️⃣")
            await lead.until_thread(room, root, lambda t: has(t, "your reaction was not counted"))
            await lead.react(room, request.event_id, "1️⃣")
            done = await lead.until_thread(
                room, root, lambda t: has(t, "permission: allow", "End of turn: end_turn",
                                          "edit · ✅ completed", "chosen by"))  # fmt: skip
            decided = next(seen for seen in done if seen.event_id == request.event_id)
            assert (
                f"✅ Allow (allow_once): chosen by {alice.user_id} in the chat at" in decided.body
            )
            refusals = [s for s in done if "your reaction was not counted" in s.body]
            assert len(refusals) == 1
            assert refusals[0].body.startswith(bob.user_id)
            await lead.say(room, "hello team", thread=root)
            await lead.until_thread(room, root, lambda t: any(
                s.body == "hello team" and s.sender == bot.user_id for s in t))  # fmt: skip
            await lead.say(room, "!end", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "Session ended by"))
            assert await until_idle(live.relay)
            assert all(s.sender in (bot.user_id, alice.user_id) for s in lead.thread(room, root))
            assert await running.stop() == 0
    assert not any(bot.token in line for line in running.lines)


async def test_a_turn_reads_as_a_plan_thoughts_a_tool_call_words_and_its_end(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """The plan as a checklist edited as it goes, the thought folded, the tool call's line
    edited from pending to completed, the words as plain text (markup and @room stay text,
    pinging nobody), the end of the turn with its stop reason; only the permission
    request's message mentions anyone: its approver, never @room."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(CHATTY) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room], approvers=[alice.user_id]
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id}: run the tests")
            thread = await lead.until_thread(room, root, lambda t: any(
                len(s.reactions) == 2 for s in t if "Permission requested" in s.body))  # fmt: skip
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            assert "$ pytest -q" in request.body
            await lead.react(room, request.event_id, "1️⃣")
            done = await lead.until_thread(room, root, lambda t: has(t, "End of turn: end_turn"))
            await running.stop()
    bodies = [seen.body for seen in done]
    assert bodies == [
        "📋 Plan\n☑ read\n☑ edit\n☑ test",
        "💭 Thinking: The tests first.",
        "🔧 Run pytest -q · execute · ✅ completed",
        f"🔐 Run pytest -q (execute)\n✅ Allow (allow_once): chosen by {alice.user_id} in the "
        f"chat at {bodies[3].rsplit(' at ', 1)[1]}",
        "I ran the tests: <b>42 passed</b> @room",
        "⏹ End of turn: end_turn",
    ]
    assert "<details><summary>💭 Thinking</summary>" in (done[1].html or "")
    words = next(seen for seen in done if seen.body.startswith("I ran"))
    assert words.html is None
    assert words.msgtype == "m.text"
    sent = [e for e in lead.room_messages(room) if e["sender"] == bot.user_id]
    asking = [e for e in sent if e["event_id"] == request.event_id]
    assert [e["content"]["m.mentions"] for e in asking] == [{"user_ids": [alice.user_id]}]
    assert f"Waiting for: {alice.user_id}" in asking[0]["content"]["body"]
    html = asking[0]["content"]["formatted_body"]
    assert f'<a href="https://matrix.to/#/{alice.user_id}">' in html
    assert all(e["content"].get("m.mentions") == {} for e in sent if e not in asking)


async def test_cancel_approval_timeout_and_who_may_prompt(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """!cancel cancels the turn; --approval-timeout answers the request's reject option
    (never cancelled, which would end the turn), says so, and the turn goes on; someone not
    allowed to prompt is told so and nothing reaches the agent."""
    bot, alice, bob = (homeserver.register(name) for name in ("bot", "alice", "bob"))
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as other,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id])
        await other.join(room)
        async with chat_bot(
            homeserver,
            bot,
            live.url(),
            folder=tmp_path,
            rooms=[room],
            approvers=[alice.user_id],
            extra=["--approval-timeout", "1"],
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            refused = await other.say(room, f"{bot.user_id} rm -rf /")
            await lead.until_thread(room, refused, lambda t: has(t, "you may not prompt"))
            root = await lead.say(room, f"{bot.user_id} /hang")
            await lead.until_thread(room, root, lambda t: has(t, "waiting for session/cancel"))
            await lead.say(room, "!cancel", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "End of turn: cancelled"))
            await lead.say(room, "/ask", thread=root)
            timed_out = "No decision within 1 s: Reject (reject_once)"
            done = await lead.until_thread(
                room, root, lambda t: has(t, timed_out, "permission: reject")
            )
            assert has(done, "Cancelling the turn")
            await lead.until_thread(room, root, lambda t: t[-1].body == "⏹ End of turn: end_turn")
            await running.stop()
        assert len(running.events("thread opened")) == 1


async def test_a_refused_ticket_is_said_in_the_thread_and_an_encrypted_room_is_refused(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A ticket the relay refuses: the thread says why (401, nothing of the ticket); an
    encrypted room, the bot started without a pickle key, is said to be unreadable, in the
    room (naming the extra and the key to give) and in the log."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    bogus = audit.secret("bogus-ticket-0123456789abcdef")
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        secret_room = await lead.create_room([bot.user_id], encrypted=True)
        async with chat_bot(
            homeserver,
            bot,
            live.url(),
            folder=tmp_path,
            rooms=[room, secret_room],
            approvers=[alice.user_id],
            extra=["--ticket-command", f"echo {bogus}"],
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining", count=2)
            root = await lead.say(room, f"{bot.user_id} hello")
            thread = await lead.until_thread(room, root, lambda t: has(t, "refused the ticket"))
            assert thread[-1].body == "⚠️ relay refused the ticket (401): malformed ticket"
            await until(lambda: any("acp-relay[chat-e2ee]" in e["content"].get("body", "")
                                    for e in lead.room_messages(secret_room)),
                        what="the encrypted room told")  # fmt: skip
            await running.logged("served room is encrypted: not supported")
            await running.stop()
    assert all(bogus not in e["content"].get("body", "") for e in lead.room_messages(room))


async def test_ten_thousand_streamed_chunks_end_as_exactly_the_agents_text(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """A prompt the demo agent streams back as 10,000 chunks: the thread's words messages,
    joined, are exactly its text (continued in a second message past an event's size),
    nothing lost or doubled."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    text = " ".join(str(n) for n in range(10_000))
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
                            approvers=[alice.user_id]) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} hi")
            await lead.until_thread(room, root, lambda t: has(t, "End of turn"))
            await lead.say(room, text, thread=root)

            def words() -> list[str]:
                return [s.body for s in lead.thread(room, root)
                        if s.sender == bot.user_id and s.msgtype == "m.text"][1:]  # fmt: skip

            await lead.until_thread(
                room, root, lambda t: sum("End of turn" in s.body for s in t) == 2, seconds=60
            )
            assert "".join(words()) == text, [len(w) for w in words()]
            await running.stop()


@dataclass
class Reacted:
    """Stands for a thread's requests: records the reactions routed to it."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)
    powers: list[Any] = field(default_factory=list)

    async def reacted(self, sender: str, target: str, key: str, power: Any) -> None:
        self.seen.append((sender, target, key))
        self.powers.append(power)


async def test_a_reaction_synced_before_its_request_is_kept_is_routed_to_it(
    tmp_path: Path,
) -> None:
    """The sync can bring a reaction on a request's message before the bot's send of that
    message has returned: the reaction waits (bounded) and reaches the request once kept."""
    bot, state = offline_bot(tmp_path)
    bot.power["!r"] = {"users": {}}
    event = reaction_event("$x", "@a:t")
    await bot._timeline_event("!r", event)
    thread = Reacted()
    bot.owns_request("$req", cast(Answerable, thread))
    await until(lambda: thread.seen == [("@a:t", "$req", "1️⃣")], what="the early reaction")
    state.close()


async def test_cancel_answers_a_pending_request_cancelled_and_a_later_tap_changes_nothing(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """!cancel with a permission request pending: the request is answered cancelled (its
    message says so), the turn ends cancelled; an approver's tap after it changes nothing."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room], approvers=[alice.user_id]
        ) as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            thread = await lead.until_thread(room, root, lambda t: any(
                len(s.reactions) == 2 for s in t if "Permission requested" in s.body))  # fmt: skip
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            await lead.say(room, "!cancel", thread=root)
            await lead.until_thread(room, root, lambda t: has(
                t, f"Cancelled with the turn by {alice.user_id}", "permission: cancelled",
                "End of turn: cancelled"))  # fmt: skip
            await lead.react(room, request.event_id, "1️⃣")
            await lead.say(room, "after the tap", thread=root)
            done = await lead.until_thread(room, root, lambda t: any(
                s.body == "after the tap" and s.sender == bot.user_id for s in t))  # fmt: skip
            await lead.until_thread(room, root, lambda t: has(t, "End of turn: end_turn"))
            await running.stop()
    decided = next(seen for seen in done if seen.event_id == request.event_id)
    assert "Cancelled with the turn" in decided.body
    assert not has(done, "chosen by")
    assert not has(done, "permission: allow")


TWELVE_OPTIONS = """
import json, sys
def send(message):
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()
prompt = None
for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": 1}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"sessionId": "s-1"}})
    elif method == "session/prompt":
        prompt = message["id"]
        options = [{"optionId": f"o{n}", "name": f"Choice {n}", "kind": "allow_once"}
                   for n in range(1, 13)]
        send({"jsonrpc": "2.0", "id": "perm", "method": "session/request_permission",
              "params": {"sessionId": "s-1", "options": options,
                         "toolCall": {"toolCallId": "t", "title": "Pick", "kind": "other"}}})
    elif message.get("id") == "perm":
        picked = message["result"]["outcome"].get("optionId", "cancelled")
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1",
              "update": {"sessionUpdate": "agent_message_chunk",
                         "content": {"type": "text", "text": f"picked {picked}"}}}})
        send({"jsonrpc": "2.0", "id": prompt, "result": {"stopReason": "end_turn"}})
"""


async def test_help_unknown_commands_answer_n_and_an_ended_thread_are_answered(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """!help is answered (outside a thread and in one), an unknown !word is said unknown and
    reaches no agent; a twelfth option is answered with !answer 12 by an approver only
    (a prompter's is refused); a message in an ended thread says how to start another."""
    bot, alice, bob = (homeserver.register(name) for name in ("bot", "alice", "bob"))
    audit.secret(bot.token)
    async with (
        live_relay((sys.executable, "-c", TWELVE_OPTIONS)) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as other,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id])
        await other.join(room)
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
            approvers=[alice.user_id],
            extra=["--prompter", alice.user_id, "--prompter", bob.user_id],
        ) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            asked = await lead.say(room, f"{bot.user_id} !help")
            await lead.until_thread(room, asked, lambda t: has(t, "!answer N answers"))
            root = await lead.say(room, f"{bot.user_id} pick one")
            await lead.until_thread(room, root, lambda t: has(
                t, "12. Choice 12 (allow_once): write !answer 12"))  # fmt: skip
            await other.say(room, "!answer 12", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "may answer this request"))
            await lead.say(room, "!frobnicate", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "Unknown command !frobnicate"))
            await lead.say(room, "!help", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "!cancel cancels the turn"))
            await lead.say(room, "!answer 12", thread=root)
            chose = f"chosen by {alice.user_id} in the chat (!answer 12)"
            done = await lead.until_thread(room, root, lambda t: has(t, "picked o12", chose))
            await lead.say(room, "!end", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "Session ended by"))
            await running.logged("thread over")
            await lead.say(room, "and then?", thread=root)
            await lead.until_thread(room, root, lambda t: has(t, "session has ended"))
            await running.stop()
        assert len(running.events("thread opened")) == 1
    assert not has(done, "picked o1 ")


async def test_threads_past_a_persons_cap_or_the_bots_cap_are_refused_with_a_reply(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """--max-threads 2 --max-threads-per-person 1: a person's second thread is refused, a
    second person's first opens, a third person's is refused for the bot's cap; each
    refusal is a reply naming its option, and opens no connection."""
    bot, alice, bob, carol = (homeserver.register(n) for n in ("bot", "alice", "bob", "carol"))
    audit.secret(bot.token)
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as second,
        person(homeserver, carol) as third,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id, carol.user_id])
        await second.join(room)
        await third.join(room)
        async with chat_bot(
            homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
            approvers=[alice.user_id, bob.user_id, carol.user_id],
            extra=["--max-threads", "2", "--max-threads-per-person", "1"],
        ) as running:  # fmt: skip
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            first = await lead.say(room, f"{bot.user_id} one")
            await lead.until_thread(room, first, lambda t: has(t, "End of turn: end_turn"))
            again = await lead.say(room, f"{bot.user_id} two")
            await lead.until_thread(room, again, lambda t: has(
                t, "you have 1 threads running", "--max-threads-per-person 1"))  # fmt: skip
            theirs = await second.say(room, f"{bot.user_id} three")
            await lead.until_thread(room, theirs, lambda t: has(t, "End of turn: end_turn"))
            full = await third.say(room, f"{bot.user_id} four")
            await lead.until_thread(
                room, full, lambda t: has(t, "this bot's most (--max-threads 2)")
            )
            await running.stop()
        assert len(running.events("thread opened")) == 2
        assert len(running.events("thread refused: a cap is reached")) == 2


def offline_bot(tmp_path: Path) -> tuple[ChatBot, State]:
    """A bot whose homeserver is never asked: its batches are handed to it."""
    dial = DialConfig(url="ws://127.0.0.1:1/acp", ticket=TicketSource(value="t" * 20))
    config = ChatConfig(homeserver="http://127.0.0.1:1", user="@bot:t", token="x",
                        rooms=frozenset({"!r"}), access=Access(frozenset({"@a:t"})),
                        dial=dial, cwd="/", state=str(tmp_path / "chat.sqlite"))  # fmt: skip
    state = State(config.state)
    log = logs.get_logger("test")
    bot = ChatBot(config, MatrixSession(config.homeserver, config.user, "x", log), state, log)
    return bot, state


def power_event(event_id: str, level: int) -> dict[str, Any]:
    return {"type": "m.room.power_levels", "state_key": "", "event_id": event_id,
            "sender": "@a:t", "origin_server_ts": 1,
            "content": {"users": {"@a:t": 100, "@b:t": level}}}  # fmt: skip


def reaction_event(event_id: str, sender: str) -> dict[str, Any]:
    return {"type": "m.reaction", "event_id": event_id, "sender": sender, "origin_server_ts": 1,
            "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$req",
                                         "key": "1️⃣"}}}  # fmt: skip


@pytest.mark.parametrize(("before", "after"), [(0, 100), (100, 0)])
async def test_a_power_level_change_counts_from_its_place_in_the_batch(
    tmp_path: Path, before: int, after: int
) -> None:
    """A reaction made before a promotion (or a demotion) in the same sync batch is judged
    with the power levels before the change, the state block being the state before it."""
    bot, state = offline_bot(tmp_path)
    thread = Reacted()
    bot.owns_request("$req", cast(Answerable, thread))
    timeline = [reaction_event("$x", "@b:t"), power_event("$p2", after),
                reaction_event("$y", "@b:t")]  # fmt: skip
    batch = {"rooms": {"join": {"!r": {"state": {"events": [power_event("$p1", before)]},
                                       "timeline": {"events": timeline}}}}}  # fmt: skip
    await bot.handle(batch, act=True)
    levels = [power["users"]["@b:t"] for power in thread.powers]
    assert levels == [before, after]
    state.close()


async def test_first_starts_act_on_nothing_said_before_them(
    homeserver: Homeserver, tmp_path: Path, audit: LogAudit
) -> None:
    """Three first starts (a fresh state file each) with mentions made before each, the
    first before the bot had even joined: none opens a thread; a mention after each does."""
    bot, alice = homeserver.register("bot"), homeserver.register("alice")
    audit.secret(bot.token)
    async with live_relay(DEMO_AGENT) as live, person(homeserver, alice) as lead:
        room = await lead.create_room([bot.user_id])
        before = [await lead.say(room, f"{bot.user_id} said before start 0")]
        for start in range(3):
            async with chat_bot(homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
                                approvers=[alice.user_id],
                                state=tmp_path / f"chat-{start}.sqlite") as running:  # fmt: skip
                audit.watch(running.lines)
                await running.logged("first start: acting on what comes from now on")
                root = await lead.say(room, f"{bot.user_id} said after start {start}")
                await lead.until_thread(room, root, lambda t: has(t, "End of turn"))
                assert [r["thread"] for r in running.events("thread opened")] == [root]
                assert await running.stop() == 0
            before.append(await lead.say(room, f"{bot.user_id} said before start {start + 1}"))
        assert all(s.sender == alice.user_id for old in before for s in lead.thread(room, old))


async def set_power(lead: Person, room: str, user: str, level: int) -> None:
    """``lead`` (the room's admin) sets ``user``'s power level."""
    levels = await lead.api.get_state_event(RoomID(room), EventType.ROOM_POWER_LEVELS)
    assert isinstance(levels, PowerLevelStateEventContent)
    levels.users[UserID(user)] = level
    await lead.api.send_state_event(RoomID(room), EventType.ROOM_POWER_LEVELS, levels)


@pytest.mark.parametrize(("before", "after", "counted"), [(0, 50, False), (50, 0, True)])
async def test_a_reaction_made_before_a_power_change_is_judged_by_the_power_before_it(
    homeserver: Homeserver,
    tmp_path: Path,
    audit: LogAudit,
    before: int,
    after: int,
    counted: bool,
) -> None:
    """While the bot is down, bob taps a request, then his power level changes: the batch of
    the restart holds both, in that order; a tap made before a promotion does not count, one
    made before a demotion does (--approver-level 50)."""
    bot, alice, bob = (homeserver.register(name) for name in ("bot", "alice", "bob"))
    audit.secret(bot.token)
    state = tmp_path / "chat.sqlite"
    async with (
        live_relay(DEMO_AGENT) as live,
        person(homeserver, alice) as lead,
        person(homeserver, bob) as other,
    ):
        room = await lead.create_room([bot.user_id, bob.user_id])
        await other.join(room)
        await set_power(lead, room, bob.user_id, before)

        def start() -> AbstractAsyncContextManager[BotRun]:
            extra = ["--approver-level", "50", "--prompter", alice.user_id]
            return chat_bot(homeserver, bot, live.url(), folder=tmp_path, rooms=[room],
                            approvers=[], extra=extra, state=state)  # fmt: skip

        async with start() as running:
            audit.watch(running.lines)
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} /ask")
            thread = await lead.until_thread(room, root, lambda t: any(
                len(s.reactions) == 2 for s in t if "Permission requested" in s.body))  # fmt: skip
            request = next(seen for seen in thread if "Permission requested" in seen.body)
            assert await running.stop() == 0
        await other.react(room, request.event_id, "1️⃣")
        await set_power(lead, room, bob.user_id, after)
        async with start() as running:
            audit.watch(running.lines)
            if counted:
                await lead.until_thread(room, root, lambda t: has(t, "permission: allow"))
                assert has(lead.thread(room, root), f"chosen by {bob.user_id}")
            else:
                await lead.until_thread(room, root, lambda t: has(t, "not counted"))
                assert not has(lead.thread(room, root), "chosen by")
            assert await running.stop() == 0


class KeysNeverCome:
    """Stands for the bot's crypto: every event's room key is still on its way, and comes
    when the test says."""

    def __init__(self) -> None:
        self.come = asyncio.Event()

    async def decrypt(self, room: str, event: dict[str, Any]) -> Later:
        return LATER

    async def decrypt_later(self, room: str, event: dict[str, Any]) -> None:
        await self.come.wait()


async def test_encrypted_events_awaiting_their_keys_are_bounded(tmp_path: Path) -> None:
    """A flood of encrypted events whose keys do not come holds at most MAX_EARLY waits;
    the rest are dropped, and every wait is given back once the keys came (or not)."""
    bot, state = offline_bot(tmp_path)
    crypto = KeysNeverCome()
    bot.crypto = cast("RoomCrypto", crypto)
    for n in range(MAX_EARLY + 20):
        event = {"type": "m.room.encrypted", "event_id": f"$e{n}", "sender": "@a:t",
                 "origin_server_ts": 1, "content": {}}  # fmt: skip
        await bot._timeline_event("!r", event)
    assert bot.awaiting_keys == MAX_EARLY
    crypto.come.set()
    await until(lambda: bot.awaiting_keys == 0, what="the waits given back")
    await bot.tasks.stop()
    state.close()
