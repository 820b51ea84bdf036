"""Tests for relay.observe.observer: each outcome and verdict is counted, logged once and traced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from relay.acp.outcome import Forward, Refuse, Skip
from relay.acp.rewrite import RewriteReport
from relay.core.exits import Exit
from relay.core.framing import Dropped, Line
from relay.core.redaction import Redactor
from relay.core.watchprofile import Origin
from relay.observe import logs
from relay.observe.observer import ConnectionObserver, Counters, Peer
from relay.observe.stats import RelayStats
from relay.observe.tracewriter import ConnectionTrace

LOG = logs.get_logger("test.observer")
PEER = Peer("127.0.0.1:5", "alice", "/acp?ticket=SECRET")


def test_counters_add_messages_and_bytes() -> None:
    """Counters add one message and its size per line carried."""
    counters = Counters()
    counters.add(10)
    counters.add(0)
    assert (counters.messages, counters.bytes, counters.dropped) == (2, 10, 0)


def test_each_outcome_is_counted_and_logged_once() -> None:
    """Forwarded frames count; a rewrite, a refusal and a binary frame each log one line."""
    observer = ConnectionObserver("c1", LOG)
    report = RewriteReport("session/new", cwd_from="/a", cwd_to="/b")
    with capture_logs() as events:
        observer.frame(Forward(b'{"id":1}', b'{"id":1}'))
        observer.frame(Forward(b'{"id":2,"x":"/b"}', b'{"id":2,"x":"/a"}', report))
        observer.frame(Refuse(b"{}", "cwd not mapped", b'{"id":3}', session=True))
        observer.frame(Refuse(b"{}", "not JSON", b"a\nb"))
        observer.frame(Skip("binary", 7))
        observer.frame(Skip("blank", 1))
    assert (observer.up.messages, observer.up.bytes) == (2, 8 + 17)
    assert [(e["event"], e["log_level"]) for e in events] == [
        ("session request rewritten", "info"),
        ("session request refused", "warning"),
        ("frame refused", "warning"),
        ("binary frame ignored", "warning"),
    ]
    assert events[0]["cwd_from"] == "/a"
    assert events[3]["size"] == 7


def test_dropped_lines_are_counted_and_logged_with_their_place() -> None:
    """A dropped agent line is logged with its size, reason and the message it came after."""
    observer = ConnectionObserver("c1", LOG)
    with capture_logs() as events:
        observer.lines([b"one", Dropped(40, "too big"), b"three"])
    assert (observer.down.messages, observer.down.bytes, observer.down.dropped) == (2, 8, 1)
    assert [(e["event"], e["size"], e["after_message"]) for e in events] == [
        ("line dropped", 40, 1)
    ]


def test_lines_counted_alike_with_or_without_the_sent_list() -> None:
    """Given the sent lines too (the pump's fast path), the counts and the drop log are the same."""
    verdicts: list[Line] = [b"one", Dropped(40, "too big"), b"three"]
    alone, told = ConnectionObserver("c1", LOG), ConnectionObserver("c2", LOG)
    with capture_logs() as events:
        alone.lines(verdicts)
        told.lines(verdicts, [b"one", b"three"])
        told.lines([b"four"], [b"four"])
    assert (alone.down.messages, alone.down.bytes, alone.down.dropped) == (2, 8, 1)
    assert (told.down.messages, told.down.bytes, told.down.dropped) == (3, 12, 1)
    assert [e["event"] for e in events] == ["line dropped", "line dropped"]


def test_stdin_closed_is_told_once_and_every_frame_counted() -> None:
    """Frames after the agent's stdin closed are counted each; the warning comes once."""
    observer = ConnectionObserver("c1", LOG)
    with capture_logs() as events:
        for _ in range(3):
            observer.dropped(Forward(b"{}", b"{}"))
    assert observer.up.dropped == 3
    assert [e["event"] for e in events] == ["agent's stdin is closed: client messages are dropped"]


def test_drops_reach_the_metrics_by_reason() -> None:
    """Agent lines dropped and client messages after stdin closed count by their reason."""
    stats = RelayStats()
    observer = ConnectionObserver("c1", LOG, stats=stats)
    with capture_logs():
        observer.lines([b"one", Dropped(40, "line of 40 bytes over the limit")])
        observer.lines([Dropped(3, "invalid UTF-8 at byte 1"), b"two"])
        observer.dropped(Forward(b"{}", b"{}"))
        observer.dropped(Forward(b"{}", b"{}"))
    assert stats.dropped == {"too_large": 1, "not_utf8": 1, "stdin_closed": 2}


def test_answers_are_logged_and_counted_by_their_public_names() -> None:
    """An answer taken is logged and counted as the controller's or a watcher's (the metric
    labels answer_controller and answer_watcher); a late one as answer_late."""
    stats = RelayStats()
    observer = ConnectionObserver("c1", LOG, stats=stats)
    with capture_logs() as events:
        observer.answer_taken(Origin.CONTROLLER, "alice")
        observer.answer_taken(Origin.WATCHER, "bob")
        observer.answer_late(Origin.WATCHER, "carol")
    assert stats.watch == {"answer_controller": 1, "answer_watcher": 1, "answer_late": 1}
    assert [(e["by"], e["watcher"]) for e in events] == [
        ("controller", None),
        ("watcher", "bob"),
        ("watcher", "carol"),
    ]


def test_opened_and_closed_log_the_connection_with_its_figures() -> None:
    """One line when the agent runs, one when it is over with counters and exit status."""
    observer = ConnectionObserver("c1", LOG)
    with capture_logs() as events:
        observer.opened(PEER, ("agent",), 42)
        observer.lines([b"abc"])
        observer.closed(Exit(3, stopped=True), 1011, "agent exited with status 3")
    assert [e["event"] for e in events] == ["connection opened", "connection closed"]
    assert (events[0]["agent_pid"], events[0]["remote"], events[0]["subject"]) == (
        42,
        PEER.remote,
        "alice",
    )
    closed = events[1]
    assert (closed["exit_status"], closed["close_code"], closed["messages_out"]) == (3, 1011, 1)


def test_start_failure_logs_no_closed_line() -> None:
    """An agent that never started gets its error line, not a 'connection closed'."""
    observer = ConnectionObserver("c1", LOG)
    with capture_logs() as events:
        observer.start_failed("x: command not found", PEER, ("x",))
        observer.closed(None, 1011, "agent failed to start: x: command not found")
    assert [e["event"] for e in events] == ["agent failed to start"]


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_trace_gets_every_outcome_and_verdict_in_order(tmp_path: Path) -> None:
    """With a trace, the records follow the outcomes and verdicts, redacted, ending in close."""
    trace = ConnectionTrace.open(str(tmp_path), "c1", 1 << 20, LOG)
    assert trace is not None
    observer = ConnectionObserver("c1", LOG, trace)
    observer.opened(PEER, ("agent",), 42)
    observer.frame(Forward(b'{"id":1}', b'{"id":1}'))
    observer.frame(Refuse(b'{"error":1}', "not JSON", b"a\nb"))
    observer.frame(Skip("binary", 3))
    observer.lines([b'{"id":1,"result":{}}', Dropped(9, "invalid UTF-8 at byte 0")])
    observer.closed(Exit(0), 1000, "agent exited")
    [path] = tmp_path.iterdir()
    records = read_records(path)
    assert [r.get("event", r.get("dir")) for r in records] == [
        "open",
        "to_agent",
        "to_client",
        "to_client",
        "dropped",
        "close",
    ]
    assert records[0]["path"] == "/acp?ticket=[redacted]"
    assert records[2]["by"] == "relay"
    assert records[2]["refused"] == "a\nb"
    assert records[-1]["exit_status"] == 0
    assert observer.trace is None  # closed: later reports write nothing


def test_a_long_subject_is_cut_in_the_log_lines() -> None:
    """The ticket's subject, the client's to choose, is at most 64 characters in log lines."""
    observer = ConnectionObserver("c1", LOG)
    with capture_logs() as events:
        observer.opened(Peer("127.0.0.1:5", "s" * 5000, "/acp"), ["cat"], 42)
        observer.agent_stderr("hello")
    assert [e["subject"] for e in events] == [f"{'s' * 63}…(5000 chars)"] * 2


def test_an_agent_that_fails_gets_its_last_stderr_lines_at_warning() -> None:
    """An agent that exits non-zero on its own has its last stderr lines logged at warning,
    bounded (20 lines, 4 KiB, the last 1 KiB of a line), before the closing line; one killed
    by a signal is called a crash."""
    observer = ConnectionObserver("c1", LOG)
    with capture_logs() as events:
        for n in range(30):
            observer.agent_stderr(f"line {n}")
        observer.closed(Exit(1), 1011, "agent exited with status 1")
    warning = [e for e in events if e["log_level"] == "warning"]
    assert [e["event"] for e in warning] == ["agent failed"]
    assert warning[0]["stderr_tail"] == [f"line {n}" for n in range(10, 30)]
    assert (warning[0]["exit_status"], warning[0]["reason"]) == (1, "agent exited with status 1")
    assert events[-1]["event"] == "connection closed"

    observer = ConnectionObserver("c2", LOG)
    with capture_logs() as events:
        for _ in range(10):
            observer.agent_stderr("x" * 5000)
            observer.agent_stderr("y" * 5000 + "the reason")
        observer.closed(Exit(-11), 1011, "agent killed by SIGSEGV")
    [tail] = [e["stderr_tail"] for e in events if e["event"] == "agent crashed"]
    assert tail[-1] == "(5010 chars)…" + "y" * 1013 + "the reason"
    assert [len(line) for line in tail] == [len(tail[-1])] * 3
    assert sum(map(len, tail)) <= 4096


def test_a_failed_agents_close_reason_ends_with_its_last_stderr_line_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The close reason of a failed agent ends with its last stderr line, with the process's
    secrets and bearer tokens redacted, cut from its start to fit; a clean exit's has none."""
    monkeypatch.setattr(logs, "_redactor", Redactor())
    logs.redactor().add_secret("relay-secret-in-stderr")
    observer = ConnectionObserver("c1", LOG)
    with capture_logs():
        observer.agent_stderr("starting")
        observer.agent_stderr("x" * 200 + " relay-secret-in-stderr Bearer sk-123: no access")
    assert observer.exit_reason(Exit(3)) == (
        "agent exited with status 3: ..." + "x" * 52 + " [redacted] Bearer [redacted]: no access"
    )
    assert observer.exit_reason(Exit(0)) == "agent exited"
    assert observer.exit_reason(Exit(-15, stopped=True)) == "agent killed by SIGTERM"


def test_an_agent_that_closed_its_stdout_is_named_by_how_it_then_ended() -> None:
    """After its stdout closed: a status of its own is a failure and a signal a crash, with
    its stderr; an end the relay brought about (stdin EOF, a signal) is an agent that kept
    running; nothing says it was still running before its end is known."""
    for exit_, event in [
        (Exit(1), "agent failed"),
        (Exit(-6), "agent crashed"),
        (Exit(0), "agent closed its stdout but kept running: stopped it"),
        (Exit(-15, stopped=True), "agent closed its stdout but kept running: stopped it"),
    ]:
        observer = ConnectionObserver("c1", LOG)
        with capture_logs() as events:
            observer.agent_stderr("bye")
            observer.stdout_closed()
            observer.closed(exit_, 1011, exit_.reason)
        warnings = [e for e in events if e["log_level"] == "warning"]
        assert [e["event"] for e in warnings] == [event]
        assert ("stderr_tail" in warnings[0]) is exit_.failed


def test_an_agent_that_exits_0_or_is_stopped_by_the_relay_has_not_failed() -> None:
    """Exit 0, or a status after the relay's own SIGTERM or SIGKILL, logs no warning."""
    for exit_ in (Exit(0), Exit(-15, stopped=True), Exit(1, stopped=True)):
        observer = ConnectionObserver("c1", LOG)
        with capture_logs() as events:
            observer.agent_stderr("bye")
            observer.closed(exit_, 1000, "x")
        assert [e["event"] for e in events] == ["agent stderr", "connection closed"]
