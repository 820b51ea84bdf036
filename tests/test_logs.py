"""Tests for relay.logs: redaction of tickets and secrets, and where and how lines are written."""

from __future__ import annotations

import io
import json
import logging
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from relay import logs, redact
from relay.redact import REDACTED, register_secret

TICKET = "eyJzdWIiOiJhbGljZSJ9.ZXhhbXBsZQ.c2lnbmF0dXJl"
SECRET = "hunter2-relay-secret"


def _ours(handler: logging.Handler) -> bool:
    """A handler installed by logs.configure (pytest's own capture handlers are left alone)."""
    return isinstance(handler.formatter, structlog.stdlib.ProcessorFormatter)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Put back conftest's logging configuration and the registered secrets after each test."""
    root = logging.getLogger()
    websockets_logger = logging.getLogger("websockets")
    handlers = [h for h in root.handlers if _ours(h)]
    levels = root.level, websockets_logger.level
    config = structlog.get_config()
    secrets = set(redact._secrets)
    yield
    root.handlers[:] = [h for h in root.handlers if not _ours(h)] + handlers
    root.setLevel(levels[0])
    websockets_logger.setLevel(levels[1])
    structlog.configure(**config)
    redact._secrets.clear()
    redact._secrets.update(secrets)


def configured(level: str = "debug", fmt: str | None = "json") -> io.StringIO:
    """Configure logging into a fresh StringIO and return it."""
    stream = io.StringIO()
    logs.configure(level, fmt, stream)
    return stream


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """Every line of ``stream`` parsed as one JSON object."""
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all(isinstance(event, dict) for event in events)
    return events


# -- configure: redaction of every log line ------------------------------------------


def test_structlog_event_with_ticket_in_nested_values_is_redacted() -> None:
    """Tickets inside nested dicts, lists and tuples of an event are redacted."""
    stream = configured()
    logs.get_logger("relay.test", conn="c1").warning(
        "refused",
        request={
            "path": f"/acp?ticket={TICKET}",
            "headers": [["Authorization", f"Bearer {TICKET}"]],
        },
        urls=(f"ws://h/acp?ticket={TICKET}",),
        count=3,
    )
    assert TICKET not in stream.getvalue()
    [event] = json_lines(stream)
    assert event["request"] == {
        "path": f"/acp?ticket={REDACTED}",
        "headers": [["Authorization", f"Bearer {REDACTED}"]],
    }
    assert event["urls"] == [f"ws://h/acp?ticket={REDACTED}"]
    assert (event["event"], event["count"], event["conn"]) == ("refused", 3, "c1")


def test_registered_secret_in_event_message_is_redacted() -> None:
    """A registered secret in the event text itself is redacted."""
    stream = configured()
    register_secret(SECRET)
    logs.get_logger().info(f"loaded secret {SECRET}")
    assert [e["event"] for e in json_lines(stream)] == [f"loaded secret {REDACTED}"]


def test_stdlib_logging_records_are_redacted() -> None:
    """Records of libraries using logging (websockets) go through the same redaction."""
    stream = configured()
    logging.getLogger("websockets.server").warning("GET /acp?ticket=%s HTTP/1.1", TICKET)
    logging.getLogger("other.lib").error("auth", extra={"header": f"Bearer {TICKET}"})
    assert TICKET not in stream.getvalue()
    first, second = json_lines(stream)
    assert first["event"] == f"GET /acp?ticket={REDACTED} HTTP/1.1"
    assert (first["logger"], first["level"]) == ("websockets.server", "warning")
    assert second["header"] == f"Bearer {REDACTED}"


def test_exception_text_is_redacted() -> None:
    """A traceback whose message holds a ticket is redacted too."""
    stream = configured()
    try:
        raise ValueError(f"cannot open ws://h/acp?ticket={TICKET}")
    except ValueError:
        logging.getLogger("other.lib").exception("failed")
        logs.get_logger().exception("failed again")
    assert TICKET not in stream.getvalue()
    events = json_lines(stream)
    assert [e["event"] for e in events] == ["failed", "failed again"]
    assert all(f"ticket={REDACTED}" in e["exception"] for e in events)


def test_websockets_debug_lines_stay_off_at_debug_level() -> None:
    """At level debug, websockets' debug lines (request lines) are still not logged."""
    stream = configured("debug")
    logging.getLogger("websockets.server").debug("< GET /acp?ticket=x HTTP/1.1")
    logs.get_logger().debug("relay debug")
    assert [e["event"] for e in json_lines(stream)] == ["relay debug"]


def test_level_filters_lines() -> None:
    """Lines below the configured level are not written, from structlog or logging."""
    stream = configured("warning")
    logs.get_logger().info("quiet")
    logging.getLogger("other.lib").info("quiet too")
    logs.get_logger().warning("loud")
    assert [e["event"] for e in json_lines(stream)] == ["loud"]


# -- configure: formats and destination ----------------------------------------------


def test_json_format_is_one_object_per_line() -> None:
    """JSON format writes one JSON object per line with event, level, logger and timestamp."""
    stream = configured(fmt="json")
    logs.get_logger("relay.a").info("one", n=1)
    logging.getLogger("lib.b").warning("two\nlines")
    events = json_lines(stream)
    assert [(e["event"], e["level"], e["logger"]) for e in events] == [
        ("one", "info", "relay.a"),
        ("two\nlines", "warning", "lib.b"),
    ]
    assert events[0]["n"] == 1
    assert all(e["timestamp"].endswith("Z") for e in events)


def test_format_defaults_to_json_off_a_tty() -> None:
    """Without a format, a stream that is not a terminal gets JSON."""
    stream = configured(fmt=None)
    logs.get_logger().info("hello")
    assert [e["event"] for e in json_lines(stream)] == ["hello"]


def test_console_format_is_readable_text() -> None:
    """Console format writes plain readable lines (no JSON, no colours), still redacted."""
    stream = configured(fmt="console")
    logs.get_logger("relay.c").info("frame refused", reason=f"/acp?ticket={TICKET}")
    text = stream.getvalue()
    assert text.count("\n") == 1
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert "frame refused" in text
    assert f"ticket={REDACTED}" in text
    assert TICKET not in text
    assert "\x1b[" not in text


CONNECTION = "a63f1390-2bbf-4500-91d0-9a898253b2a8"
TITLE_CHANGE = "\x1b]0;owned\x07"  # an escape sequence that retitles a terminal


def console_lines(*events: tuple[str, str, dict[str, Any]]) -> list[str]:
    """The console lines of ``events`` (level, event, keys), logged on one connection."""
    stream = configured(fmt="console")
    log = logs.get_logger("relay.session", connection_id=CONNECTION)
    for level, event, keys in events:
        getattr(log, level)(event, **keys)
    return stream.getvalue().splitlines()


def test_console_lines_put_the_event_first_then_the_keys_that_matter() -> None:
    """On a terminal a line is the time, the level if a warning or error, the event, then
    the event's few keys in a fixed order and the connection id's first characters."""
    closed = {
        "exit_status": 0, "close_code": 1000, "close_reason": "", "messages_in": 3,
        "bytes_in": 120, "messages_out": 4, "bytes_out": 900, "dropped_in": 0,
        "dropped_out": 0, "duration": 1.5, "remote": "127.0.0.1:5", "subject": "alice",
        "agent_pid": 42,
    }  # fmt: skip
    opened = {"remote": "127.0.0.1:5", "subject": "alice", "agent_pid": 42}
    lines = console_lines(
        ("info", "connection opened", opened),
        ("info", "connection closed", closed),
        ("warning", "line dropped", {"size": 9, "reason": "too big", "agent_pid": 42}),
    )
    times = [line[:9] for line in lines]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d ", t) for t in times), lines
    assert [line[9:] for line in lines] == [
        "connection opened  subject=alice remote=127.0.0.1:5 agent_pid=42 connection_id=a63f1390",
        'connection closed  exit_status=0 close_code=1000 close_reason="" messages_in=3 '
        "messages_out=4 duration=1.5 connection_id=a63f1390",
        'warning: line dropped  size=9 reason="too big" connection_id=a63f1390',
    ]


def test_console_lines_shorten_long_values() -> None:
    """A value over 80 characters is cut, saying its length; the line stays short."""
    [line] = console_lines(("info", "session request rewritten", {"cwd_from": "/" + "x" * 300}))
    assert f"cwd_from=/{'x' * 78}…(301 chars)" in line
    assert len(line) < 170


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_control_characters_never_reach_the_terminal(fmt: str) -> None:
    """An agent's stderr line with escape sequences is written escaped, in both formats:
    no control character is in the output but the newline ending each line."""
    stream = configured(fmt=fmt)
    line = f"{TITLE_CHANGE}hello\tthere\u009b2J\u202eevil"
    logs.get_logger("relay.session").info("agent stderr", line=line)
    logs.get_logger("relay.session").info(f"event {TITLE_CHANGE}")
    text = stream.getvalue()
    assert [c for c in text if unicodedata.category(c) == "Cc" and c != "\n"] == []
    assert "\u202e" not in text
    if fmt == "json":
        assert [e["line"] for e in json_lines(stream)[:1]] == [line]
    else:
        assert "\\x1b]0;owned\\x07hello\\x09there\\x9b2J\\u202eevil" in text


def test_nothing_goes_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """Lines go to the given stream, by default stderr, and never to stdout."""
    stream = configured()
    logs.get_logger().info("to the stream")
    logging.getLogger("lib").warning("also to the stream")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")
    assert len(json_lines(stream)) == 2

    logs.configure("info", "json")
    logs.get_logger().info("to stderr")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert [json.loads(line)["event"] for line in captured.err.splitlines()] == ["to stderr"]
