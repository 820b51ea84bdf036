"""The team chat's benchmark rows: a permission request's way to an approver and back, and a
long streamed turn, on loopback with a real Synapse (not timed tests: figures to read).

Run after the README's test set-up (Synapse comes into ``tests/.synapse`` at first use):

    .venv/bin/python -m tests.bench.chat              # 50 requests, 10,000 chunks
    .venv/bin/python -m tests.bench.chat --requests 10 --chunks 2000 --rounds 1  # a smoke run

- request → approver: from the agent writing ``session/request_permission`` (its
  monotonic clock, in the request's title) to the message reaching the approver's client
  (a mautrix session long-polling ``/sync``, polled every 10 ms);
- reaction → agent: from the approver's reaction being sent to the agent reading the
  answer (its clock, in the words it writes next);
- the bot's CPU per request (``/proc``: its process only, Synapse and the relay apart);
- the same three rows with approval rules on (a rule over every kind, approvers by id and
  by power level, timers armed), and in an end-to-end encrypted room (the approver's
  client decrypting as the bot does), in alternated rounds with the plain rows
  (``--rounds``);
- a turn of N streamed chunks (the demo agent, 0.5 ms between chunks): the time until the
  thread shows exactly the agent's text, and how many edits the bot made for it, against
  the seconds it took (the edit rate); the bot's CPU per chunk; what the bot wrote to
  storage meanwhile (``/proc``'s ``write_bytes``: its state file and write-ahead log, not
  its log, which goes to a pipe), against the turn's text.

Median and p95 over the requests. Writes ``results/chat.json`` and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from relay.chat.rules import TOOL_KINDS
from tests.bench.client import cpu_seconds, written_bytes
from tests.support.chatbot import chat_bot
from tests.support.live import live_relay
from tests.support.matrix import person
from tests.support.synapse import ensure_venv, running_homeserver

HERE = Path(__file__).resolve().parent
AGENT = (sys.executable, str(HERE / "chatagent.py"))
# The demo agent streams a prompt back a word a chunk; a pause between words spreads the
# turn over seconds, so that the thread is edited while it grows.
DEMO = (sys.executable, "-m", "relay.demo_agent", "--word-delay", "0.0005")
WAIT = 120.0  # seconds any one wait of the benchmark may take


def has_end(thread: list[Any]) -> bool:
    return any("End of turn" in seen.body for seen in thread)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(values) * 1000, 1),
            "p95_ms": round(percentile(values, 0.95) * 1000, 1)}  # fmt: skip


def rules_file(folder: Path, approver: str) -> Path:
    """A rule over every tool kind with what it costs per request: the approver by id and
    by power level (the room's members read for the mentions), a timeout and an escalation
    that never fire within the run, and the tally and audit kept at each tap."""
    path = folder / "rules.toml"
    path.write_text(f"""
[[rule]]
kinds = {json.dumps(list(TOOL_KINDS))}
approvers = ["{approver}"]
approver-level = 100
timeout = 3600
escalate-after = 3000
escalate-to = ["{approver}"]
""")  # fmt: skip
    return path


async def requests_row(server: Any, folder: Path, count: int, kind: str) -> dict[str, Any]:
    """The request rows, ``kind`` plain, with ``rules``, or in an ``encrypted`` room (the
    approver's client decrypting, as the bot does)."""
    bot, alice = server.register("bot"), server.register("alice")
    keys = folder / "alice.keys" if kind == "encrypted" else None
    async with live_relay(AGENT) as live, person(server, alice, keys=keys) as lead:
        room = await lead.create_room([bot.user_id], encrypted=kind == "encrypted")
        quiet = ["--log-level", "info"]
        if kind == "rules":
            quiet += ["--config", str(rules_file(folder, alice.user_id)), "--remind-after", "3000"]
        if kind == "encrypted":
            key = folder / "pickle.key"
            key.write_text("the benchmark's pickle key\n")
            key.chmod(0o600)
            quiet += ["--pickle-key-file", str(key)]
        async with chat_bot(server, bot, live.url(), folder=folder, rooms=[room],
                            approvers=[alice.user_id], extra=quiet) as running:  # fmt: skip
            await running.logged("chat bot started")
            root = await lead.say(room, f"{bot.user_id} bench {count}")
            to_approver, to_agent, sent_at = [], [], {}
            cpu_before = None
            for i in range(count):
                shown = None
                while shown is None:
                    for seen in lead.thread(room, root):
                        found = re.search(rf"Permission requested: bench {i} ([\d.]+)", seen.body)
                        if found:
                            shown = (seen.event_id, float(found[1]))
                    if shown is None:
                        await asyncio.sleep(0.01)
                to_approver.append(time.monotonic() - shown[1])
                if cpu_before is None:
                    cpu_before = cpu_seconds(running.proc.pid)
                sent_at[i] = time.monotonic()
                await lead.react(room, shown[0], "1️⃣")
            answered: dict[int, float] = {}
            while len(answered) < count:
                for seen in lead.thread(room, root):
                    for n, at in re.findall(r"answered (\d+) ([\d.]+)", seen.body):
                        answered[int(n)] = float(at)
                await asyncio.sleep(0.01)
            cpu = cpu_seconds(running.proc.pid) - (cpu_before or 0.0)
            to_agent = [answered[i] - sent_at[i] for i in range(count)]
            await running.stop()
    return {"requests": count, "request_to_approver": summary(to_approver),
            "reaction_to_agent": summary(to_agent),
            "bot_cpu_ms_per_request": round(cpu / max(count - 1, 1) * 1000, 2)}  # fmt: skip


async def stream_row(server: Any, folder: Path, chunks: int) -> dict[str, Any]:
    bot, alice = server.register("bot"), server.register("alice")
    text = " ".join(str(n) for n in range(chunks))
    async with live_relay(DEMO) as live, person(server, alice) as lead:
        room = await lead.create_room([bot.user_id])
        quiet = ["--log-level", "info"]
        async with chat_bot(server, bot, live.url(), folder=folder, rooms=[room],
                            approvers=[alice.user_id], extra=quiet) as running:  # fmt: skip
            await running.logged("invited to a served room: joining")
            root = await lead.say(room, f"{bot.user_id} hi")
            await lead.until_thread(room, root, lambda t: has_end(t), seconds=WAIT)
            cpu_before = cpu_seconds(running.proc.pid)
            written_before = written_bytes(running.proc.pid)
            started = time.monotonic()
            await lead.say(room, text, thread=root)

            def words() -> list[Any]:
                return [s for s in lead.thread(room, root)
                        if s.sender == bot.user_id and s.msgtype == "m.text"][1:]  # fmt: skip

            await lead.until_thread(
                room, root, lambda _: "".join(s.body for s in words()) == text, seconds=WAIT
            )
            took = time.monotonic() - started
            edits = sum(s.edits for s in words())
            cpu = cpu_seconds(running.proc.pid) - cpu_before
            written = written_bytes(running.proc.pid) - written_before
            await running.stop()
    return {"chunks": chunks, "exact": True, "messages": len(words()), "edits": edits,
            "seconds_to_exact_text": round(took, 2),
            "edits_per_second": round(edits / took, 2),
            "bot_cpu_ms": round(cpu * 1000, 1),
            "bot_cpu_us_per_chunk": round(cpu * 1e6 / chunks, 1),
            "text_bytes": len(text.encode()), "state_bytes_written": written,
            "state_bytes_per_text_byte": round(written / len(text.encode()), 2)}  # fmt: skip


async def main(requests: int, chunks: int, rounds: int) -> dict[str, Any]:
    ensure_venv()
    with tempfile.TemporaryDirectory(prefix="acp-relay-chat-bench-") as where:
        folder = Path(where)
        (folder / "synapse").mkdir()
        with running_homeserver(folder / "synapse") as server:
            runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
            for n in range(rounds):  # alternated: the machine's drift falls on all alike
                for kind in KINDS:
                    place = folder / f"{kind}-{n}"
                    place.mkdir()
                    runs[kind].append(await requests_row(server, place, requests, kind))
            (folder / "b").mkdir()
            return {"permission_requests": runs["plain"][0],
                    "permission_requests_with_rules": runs["rules"][0],
                    "permission_requests_encrypted": runs["encrypted"][0],
                    "alternated_medians_ms": _medians(runs),
                    "streamed_turn": await stream_row(server, folder / "b", chunks)}  # fmt: skip


KINDS = ("plain", "rules", "encrypted")


def _medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each round's medians of each kind, side by side (their spread)."""
    rows = ("request_to_approver", "reaction_to_agent")
    return {
        **{f"{row} {kind}": [r[row]["median_ms"] for r in runs[kind]]
           for row in rows for kind in KINDS},
        **{f"bot_cpu_ms_per_request {kind}": [r["bot_cpu_ms_per_request"] for r in runs[kind]]
           for kind in KINDS},
    }  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=10_000)
    alternated = "alternated rounds of the request rows: plain, with rules, encrypted"
    parser.add_argument("--rounds", type=int, default=3, help=alternated)
    args = parser.parse_args()
    took = WAIT * (2 + len(KINDS) * args.rounds)
    result = asyncio.run(asyncio.wait_for(main(args.requests, args.chunks, args.rounds), took))
    (HERE / "results" / "chat.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
