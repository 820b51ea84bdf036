"""Tests for relay.logs: redaction of tickets and secrets, and where and how lines are written."""

from __future__ import annotations

import io
import json
import logging
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
    logs.get_logger("relay.c").info("connection opened", url=f"/acp?ticket={TICKET}")
    text = stream.getvalue()
    assert text.count("\n") == 1
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert "connection opened" in text
    assert f"ticket={REDACTED}" in text
    assert TICKET not in text
    assert "\x1b[" not in text


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
