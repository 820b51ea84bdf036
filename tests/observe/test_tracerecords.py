"""Connection traces: record formatting and bounding (pure), and files written by a live relay."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.rewrite import RewritePolicy
from relay.config.defaults import MIN_TRACE_MAX_BYTES
from relay.observe.tracerecords import (
    TO_AGENT,
    TO_CLIENT,
    TRUNCATION_RESERVE,
    BoundedTrace,
    Timestamps,
    client_frame,
    encode,
    event,
    line_bytes,
    message,
    message_line,
    timestamp,
)
from relay.observe.tracewriter import file_name
from tests.support.agents import DEMO_AGENT
from tests.support.cli import run_cli, serve
from tests.support.env import clean_env, secret_env
from tests.support.live import SECRET, live_relay, make_ticket

CAT = ("cat",)
NOW = 1_700_000_000.25

# -- pure: records --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "text"),
    [
        (0.0, "1970-01-01T00:00:00.000000Z"),
        (NOW, "2023-11-14T22:13:20.250000Z"),
        (1_700_000_000.000001, "2023-11-14T22:13:20.000001Z"),
    ],
)
def test_timestamp_is_utc_iso_with_microseconds(now: float, text: str) -> None:
    """Record times are ISO 8601 UTC with microseconds and a Z."""
    assert timestamp(now) == text


LINES = [
    b'{"jsonrpc":"2.0","id":1,"method":"initialize"}',
    b'{ "spaced" :  [1, 2.50, 1e3] ,"b":1, "a":2 }',  # whitespace, key order, number spelling
    '{"text":"café ☕ 𝄞 \u2028 \u2029"}'.encode(),  # non-ASCII, line separators kept raw
    b'{"escaped":"\\u00e9\\n\\"quoted\\"\\\\"}',  # escapes stay escapes
    b'{"id":1,"id":2}',  # duplicate keys: parsed JSON would lose one
    b"not json at all \x7f",
]


@pytest.mark.parametrize("line", LINES)
def test_message_record_gives_back_the_exact_line(line: bytes) -> None:
    """A message record is one NDJSON line whose "line" string encodes back to the bytes."""
    data = encode(message(NOW, TO_AGENT, line))
    assert data.endswith(b"\n")
    assert data.count(b"\n") == 1
    record = json.loads(data)
    assert list(record) == ["t", "dir", "line"]
    assert (record["t"], record["dir"]) == (timestamp(NOW), TO_AGENT)
    assert line_bytes(record) == line


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_any_utf8_line_round_trips(text: str) -> None:
    """Every valid UTF-8 line survives encode and json.loads byte for byte, by either path."""
    line = text.encode()
    data = encode(message(NOW, TO_CLIENT, line))
    assert data.count(b"\n") == 1
    assert line_bytes(json.loads(data)) == line
    assert message_line(NOW, TO_CLIENT, line) == data


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("direction", [TO_AGENT, TO_CLIENT])
def test_fast_message_record_is_the_same_bytes(line: bytes, direction: str) -> None:
    """The fast path for plain message records writes exactly what the general one does."""
    assert message_line(NOW, direction, line) == encode(message(NOW, direction, line))
    general, fast = BoundedTrace(4096), BoundedTrace(4096)
    assert fast.add_line(NOW, direction, line) == general.add(NOW, message(NOW, direction, line))


@given(st.integers(min_value=0, max_value=4_102_444_800 * 10**6))
def test_timestamp_agrees_with_datetime(micros: int) -> None:
    """The formatting gives what datetime gives, to the microsecond (to year 2100)."""
    now = micros / 1_000_000
    expected = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert timestamp(now) == expected


@given(st.lists(st.integers(min_value=0, max_value=4_102_444_800 * 10**6), max_size=20))
def test_a_traces_timestamps_are_timestamp_whatever_the_order(micros: list[int]) -> None:
    """A trace's cached formatting gives what timestamp gives, seconds repeated or not, in
    any order; two traces share no cache."""
    one, other = Timestamps(), Timestamps()
    for each in micros:
        now = each / 1_000_000
        assert one(now) == timestamp(now)
        assert other(now + 1) == timestamp(now + 1)


@pytest.mark.parametrize(
    ("record", "frame"),
    [
        ({"dir": TO_AGENT, "line": "a"}, b"a"),
        ({"dir": TO_AGENT, "line": "after", "before": "before"}, b"before"),
        ({"dir": TO_CLIENT, "line": "reply", "by": "relay", "refused": "x\ny"}, b"x\ny"),
        ({"dir": TO_CLIENT, "line": "from the agent"}, None),
        ({"event": "open"}, None),
    ],
)
def test_client_frame_is_what_the_client_sent(record: dict[str, Any], frame: bytes | None) -> None:
    """The client's frames are the to_agent lines (or their before) and refused frames."""
    assert client_frame(record) == frame


def test_file_name_sorts_by_time_and_names_the_connection() -> None:
    """Trace files are named <UTC time>-<connection id>.ndjson."""
    assert file_name("c0ffee", NOW) == "20231114T221320Z-c0ffee.ndjson"


# -- pure: bounding --------------------------------------------------------------------


def sized(size: int, now: float = NOW) -> dict[str, Any]:
    """A message record whose encoding is exactly ``size`` bytes."""
    empty = len(encode(message(now, TO_AGENT, b"")))
    return message(now, TO_AGENT, b"x" * (size - empty))


@pytest.mark.parametrize(
    ("max_bytes", "sizes", "kept"),
    [
        (1024, [100] * 7, 7),  # 700 bytes, all fit below 1024 - reserve
        (1024, [100] * 8, 7),  # the 8th would pass 1024 - 256
        (1024, [768], 1),  # exactly at the limit
        (1024, [769], 0),  # one byte over
        (4096, [1000, 3000, 10], 1),  # a later small record never follows a refusal
        (1 << 20, [100] * 100, 100),
    ],
)
def test_bound_keeps_records_until_full_then_one_final_record(
    max_bytes: int, sizes: Sequence[int], kept: int
) -> None:
    """Records are kept while they fit; then one "truncated" record, then nothing."""
    bounded = BoundedTrace(max_bytes)
    out = [bounded.add(NOW + i, sized(size, NOW + i)) for i, size in enumerate(sizes)]
    fast = BoundedTrace(max_bytes)  # the fast path bounds the same way
    lines = [line_bytes(sized(size)) or b"" for size in sizes]
    assert [fast.add_line(NOW + i, TO_AGENT, x) for i, x in enumerate(lines)] == out
    assert [len(data) for data in out[:kept]] == list(sizes[:kept])
    total = b"".join(out)
    assert len(total) <= max_bytes
    records = [json.loads(line) for line in total.splitlines()]
    if kept == len(sizes):
        assert not bounded.stopped
        assert len(records) == kept
        return
    assert bounded.stopped
    assert len(records) == kept + 1
    final = records[-1]
    assert final["event"] == "truncated"
    assert final == {
        "t": timestamp(NOW + kept),
        "event": "truncated",
        "max_bytes": max_bytes,
        "bytes": sum(sizes[:kept]),
        "records": kept,
        "next": "to_agent",
    }
    assert all(data == b"" for data in out[kept + 1 :])
    assert bounded.add(NOW, event(NOW, "close")) == b""


def test_bound_refuses_a_huge_line_without_encoding_it() -> None:
    """A size hint over the room left stops the trace before the record is serialized."""
    bounded = BoundedTrace(MIN_TRACE_MAX_BYTES)
    unserializable = {"dir": TO_CLIENT, "line": object()}  # encoding it would raise TypeError
    data = bounded.add(NOW, unserializable, size_hint=MIN_TRACE_MAX_BYTES)
    assert json.loads(data)["event"] == "truncated"
    assert json.loads(data)["next"] == "to_client"


def test_truncated_record_always_fits_its_reserve() -> None:
    """The final record of the largest plausible trace is smaller than the reserve."""
    bounded = BoundedTrace(1 << 62)
    bounded.used, bounded.records = 1 << 61, 1 << 40
    assert len(bounded.add(NOW, {"dir": TO_AGENT}, size_hint=1 << 62)) < TRUNCATION_RESERVE


@pytest.mark.parametrize("max_bytes", [0, 1, MIN_TRACE_MAX_BYTES - 1])
def test_bound_has_a_minimum(max_bytes: int) -> None:
    """A bound too small for the open and truncated records is refused."""
    with pytest.raises(ValueError, match="at least 1024"):
        BoundedTrace(max_bytes)


# -- a live relay writing traces ------------------------------------------------------------


def read_trace(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert all(isinstance(r, dict) for r in records)
    return records


def traces(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every trace file of ``directory`` by connection id (from its name)."""
    found = {}
    for path in sorted(directory.glob("*.ndjson")):
        stamp, _, conn = path.stem.partition("-")
        assert len(stamp) == 16, path.name
        found[conn] = read_trace(path)
    return found


def files(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


def read(path: Path) -> bytes:
    return path.read_bytes()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def conn_id(ws: ClientConnection) -> str:
    assert ws.response is not None
    return ws.response.headers["Acp-Connection-Id"]


async def recv_all(ws: ClientConnection, count: int) -> list[str]:
    async with asyncio.timeout(10):
        return [str(await ws.recv()) for _ in range(count)]


def messages(records: list[dict[str, Any]], direction: str) -> list[str]:
    return [r["line"] for r in records if r.get("dir") == direction and "line" in r]


async def test_one_file_per_connection_with_records_in_order(tmp_path: Path) -> None:
    """Each socket gets a file named with its Acp-Connection-Id: open, lines both ways, close."""
    sent = {0: [f'{{"n":{i},"to":0}}' for i in range(20)], 1: ['{"only":"one"}']}
    ids = []
    async with live_relay(CAT, trace_dir=str(tmp_path)) as live:
        for index in (0, 1):
            async with connect(live.ticket_url()) as ws:
                ids.append(conn_id(ws))
                for frame in sent[index]:
                    await ws.send(frame)
                assert await recv_all(ws, len(sent[index])) == sent[index]
    found = traces(tmp_path)
    assert sorted(found) == sorted(ids)
    for index, conn in enumerate(ids):
        records = found[conn]
        opened, closed = records[0], records[-1]
        assert opened["event"] == "open"
        assert (opened["conn"], opened["path"], opened["agent"]) == (
            conn,
            "/acp?ticket=[redacted]",
            ["cat"],
        )
        assert opened["subject"] == "tester"
        assert isinstance(opened["pid"], int)
        assert closed["event"] == "close"
        assert closed["messages_in"] == closed["messages_out"] == len(sent[index])
        assert messages(records, TO_AGENT) == sent[index]
        assert messages(records, TO_CLIENT) == sent[index]
        times = [r["t"] for r in records]
        assert times == sorted(times)
        seen: set[str] = set()  # cat echoes a line only after it got it: requests come first
        for record in records[1:-1]:
            if record["dir"] == TO_AGENT:
                seen.add(record["line"])
            else:
                assert record["line"] in seen
    assert {mode(path) for path in files(tmp_path)} == {0o600}


# An agent that saves its exact stdin to a file and echoes each line, after writing a
# few awkward lines of its own: CRLF, invalid UTF-8, one over the size limit.
RECORDER = (
    "import sys\n"
    "out = sys.stdout.buffer\n"
    "out.write(b'{\"hello\":\"\\xc3\\xa9\"}\\r\\n' + b'\\xff\\xfe\\n' + b'y' * 70000 + b'\\n')\n"
    "out.flush()\n"
    "with open(sys.argv[1], 'wb') as saved:\n"
    "    for line in sys.stdin.buffer:\n"
    "        saved.write(line)\n"
    "        saved.flush()\n"
    "        out.write(line)\n"
    "        out.flush()\n"
)

AWKWARD_FRAMES = [
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}',
    '{ "spaced" :  [1, 2.50, 1e3] , "b":1,"a":2 }',
    '{"text":"café ☕ 𝄞 \u2028"}',
    '{"escaped":"\\u00e9\\"\\\\"}',
    '{\n  "pretty": true\n}',  # has newlines: the relay compacts it
    "not json\nat all",  # has newlines and is not JSON: the relay answers -32700 itself
    '{"big":"' + "z" * 50_000 + '"}',
]


async def test_exact_bytes_both_ways_can_be_rebuilt_from_the_trace(tmp_path: Path) -> None:
    """The agent's stdin, the client's frames and the frames sent back rebuild from records."""
    saved = tmp_path / "stdin.bin"
    traces_dir = tmp_path / "traces"
    traces_dir.mkdir()
    agent = (sys.executable, "-c", RECORDER, str(saved))
    async with (
        live_relay(agent, trace_dir=str(traces_dir), max_message_bytes=65536) as live,
        connect(live.ticket_url()) as ws,
    ):
        first = await recv_all(ws, 1)  # the CRLF line; the bad ones are dropped
        for frame in AWKWARD_FRAMES:
            await ws.send(frame)
        received = first + await recv_all(ws, len(AWKWARD_FRAMES))
    [records] = traces(traces_dir).values()

    to_agent = [line_bytes(r) for r in records if r.get("dir") == TO_AGENT]
    assert b"".join(line + b"\n" for line in to_agent if line is not None) == read(saved)
    from_agent = [
        r["line"] for r in records if "line" in r and r["dir"] == TO_CLIENT and "by" not in r
    ]
    from_relay = [r["line"] for r in records if r.get("by") == "relay"]
    # The agent's frames in exact order; the relay's own reply may overtake them on the wire.
    assert from_agent == [m for m in received if m not in from_relay]
    assert len(from_relay) == 1
    assert from_relay[0] in received
    frames_in = [sent for r in records if (sent := client_frame(r)) is not None]
    assert frames_in == [f.encode() for f in AWKWARD_FRAMES]

    dropped = [r for r in records if r.get("event") == "dropped"]
    assert [(r["dir"], r["size"]) for r in dropped] == [(TO_CLIENT, 2), (TO_CLIENT, 70000)]
    assert "UTF-8" in dropped[0]["reason"]
    pretty = next(r for r in records if r.get("before") == AWKWARD_FRAMES[4])
    assert pretty["line"] == '{"pretty":true}'
    assert "rewrite" not in pretty
    refusal = next(r for r in records if r.get("by") == "relay")
    assert refusal["refused"] == "not json\nat all"
    assert json.loads(refusal["line"])["error"]["code"] == -32700


@pytest.mark.slow
async def test_session_rewrite_recorded_before_and_after(tmp_path: Path) -> None:
    """A rewritten session/new keeps the client's line in before and what changed in rewrite."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "alice" / "proj").mkdir(parents=True)
    traces_dir = tmp_path / "traces"
    traces_dir.mkdir()
    token = "mcp-token-0123456789"
    github = {
        "type": "http",
        "name": "github",
        "url": "https://mcp.example/gh",
        "headers": [{"name": "Authorization", "value": f"Bearer {token}"}],
    }
    rule = parse_rule(f"/Users/alice={tmp_path}/alice")
    cwd = CwdPolicy((rule,), "workspace", str(tmp_path / "ws"), True)
    policy = RewritePolicy(cwd, McpPolicy((github,)))
    initialize = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'
    request = (
        '{"jsonrpc":"2.0","id":2,"method":"session/new",'
        '"params":{"cwd":"/Users/alice/proj","mcpServers":[]}}'
    )
    async with (
        live_relay(DEMO_AGENT, rewrite=policy, trace_dir=str(traces_dir)) as live,
        connect(live.ticket_url()) as ws,
    ):
        await ws.send(initialize)  # the demo agent declares mcpCapabilities.http
        await recv_all(ws, 1)
        await ws.send(request)
        reply = json.loads((await recv_all(ws, 1))[0])
    assert reply["result"]["_meta"]["demo"]["mcpServers"] == ["github"]
    [records] = traces(traces_dir).values()
    rewritten = next(r for r in records if "before" in r)
    assert rewritten["dir"] == TO_AGENT
    assert rewritten["before"] == request
    hidden = {**github, "headers": [{"name": "Authorization", "value": "[redacted]"}]}
    after = json.loads(request)
    after["params"].update(cwd=f"{tmp_path}/alice/proj", mcpServers=[hidden])
    assert rewritten["line"] == json.dumps(after, ensure_ascii=False, separators=(",", ":"))
    assert rewritten["redacted"] == ["github"]
    assert rewritten["rewrite"]["cwd_from"] == "/Users/alice/proj"
    assert rewritten["rewrite"]["cwd_to"] == f"{tmp_path}/alice/proj"
    assert rewritten["rewrite"]["mcp_injected"] == ["github"]
    assert messages(records, TO_AGENT) == [initialize, rewritten["line"]]
    assert token.encode() not in read(files(traces_dir)[0])


@pytest.mark.parametrize(
    ("max_bytes", "frame_size", "count"),
    [(4096, 200, 50), (65536, 1 << 20, 1)],
    ids=["many-small", "one-huge"],
)
async def test_trace_stops_at_the_bound_with_a_final_record(
    tmp_path: Path, max_bytes: int, frame_size: int, count: int
) -> None:
    """A full trace ends with one "truncated" record within --trace-max-bytes; the relay goes on."""
    frames = [json.dumps({"n": i, "pad": "p" * (frame_size - 30)}) for i in range(count)]
    async with (
        live_relay(CAT, trace_dir=str(tmp_path), trace_max_bytes=max_bytes) as live,
        connect(live.ticket_url()) as ws,
    ):
        for frame in frames:
            await ws.send(frame)
        assert await recv_all(ws, count) == frames  # tracing stopped, not the relay
    [path] = files(tmp_path)
    size = len(read(path))
    assert size <= max_bytes
    records = read_trace(path)
    assert records[0]["event"] == "open"
    assert records[-1]["event"] == "truncated"
    assert records[-1]["max_bytes"] == max_bytes
    assert records[-1]["bytes"] + len(encode(records[-1])) == size
    assert [r.get("event") for r in records].count("truncated") == 1
    assert "close" not in [r.get("event") for r in records]
    assert all(r["line"] in frames for r in records if "line" in r)
    assert messages(records, TO_AGENT) == frames[: len(messages(records, TO_AGENT))]
    if count == 1:  # the one record could never fit: nothing but open and truncated
        assert [r["event"] for r in records] == ["open", "truncated"]
    else:  # stopped only when the next record did not fit in what was left
        assert size > max_bytes - TRUNCATION_RESERVE - 2 * frame_size


async def test_no_ticket_or_secret_in_any_trace(tmp_path: Path) -> None:
    """Tickets (query or bearer) and secrets never reach a trace file; the path is redacted."""
    query_ticket = make_ticket(subject="alice")
    bearer_ticket = make_ticket(subject="bob")
    async with live_relay(CAT, trace_dir=str(tmp_path)) as live:
        async with connect(live.url(query_ticket)) as ws:
            await ws.send('{"id":1}')
            await recv_all(ws, 1)
        headers = {"Authorization": f"Bearer {bearer_ticket}"}
        async with connect(live.url(), additional_headers=headers) as ws:
            await ws.send('{"id":2}')
            await recv_all(ws, 1)
    found = traces(tmp_path)
    assert len(found) == 2
    paths = sorted(r[0]["path"] for r in found.values())
    assert paths == ["/acp", "/acp?ticket=[redacted]"]
    for path in files(tmp_path):
        data = read(path).decode()
        for needle in (SECRET, query_ticket, bearer_ticket, bearer_ticket.rsplit(".", 1)[-1]):
            assert needle not in data


async def test_agent_that_cannot_start_still_leaves_a_trace(tmp_path: Path) -> None:
    """A connection whose agent fails to start gets a trace: open (no pid), then close 1011."""
    async with (
        live_relay(("/nonexistent/agent",), trace_dir=str(tmp_path)) as live,
        connect(live.ticket_url()) as ws,
    ):
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(10):
                await ws.recv()
    [records] = traces(tmp_path).values()
    assert [r["event"] for r in records] == ["open", "close"]
    assert records[0]["pid"] is None
    assert records[1]["close_code"] == 1011
    assert records[1]["close_reason"].startswith("agent failed to start")


# -- the command line ----------------------------------------------------------------------


async def test_serve_trace_dir_creates_a_private_directory(tmp_path: Path) -> None:
    """`serve --trace-dir` creates the directory (0700) and one 0600 file per socket."""
    directory = tmp_path / "new" / "traces"
    args = ("--agent", "cat", "--trace-dir", str(directory), "--trace-max-bytes", "64KiB")
    async with serve(*args, env=secret_env()) as relay:
        async with connect(relay.ticket_url()) as ws:
            await ws.send('{"id":1}')
            assert await recv_all(ws, 1) == ['{"id":1}']
        await relay.wait_event("connection closed")
        assert await relay.stop() == 0
    assert mode(directory) == 0o700
    [path] = files(directory)
    assert mode(path) == 0o600
    records = read_trace(path)
    assert [r.get("event", r.get("dir")) for r in records] == ["open", TO_AGENT, TO_CLIENT, "close"]
    assert records[0]["max_bytes"] == 64 * 1024


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace-max-bytes", "100"], "flag --trace-max-bytes: must be at least 1024 bytes"),
        (["--trace-dir", "{file}"], "cannot use --trace-dir {file}"),
    ],
    ids=["too-small", "not-a-directory"],
)
def test_bad_trace_settings_stop_start_up(tmp_path: Path, args: list[str], message: str) -> None:
    """A trace bound under 1 KiB or a trace directory that is a file exits 2, saying which."""
    file = tmp_path / "plain-file"
    file.write_text("")
    args = [a.replace("{file}", str(file)) for a in args]
    result = run_cli("serve", "--agent", "cat", *args, env=secret_env())
    assert (result.returncode, result.stdout) == (2, "")
    assert message.replace("{file}", str(file)) in result.stderr
    assert result.stderr.count("\n") == 1


def test_trace_max_bytes_in_the_environment_is_checked() -> None:
    """ACP_RELAY_TRACE_MAX_BYTES is checked like the flag, and named when wrong."""
    env = clean_env(ACP_RELAY_SECRET=SECRET, ACP_RELAY_TRACE_MAX_BYTES="1x")
    result = run_cli("serve", "--agent", "cat", env=env)
    assert result.returncode == 2
    assert "env ACP_RELAY_TRACE_MAX_BYTES" in result.stderr
