"""Tests for relay.observe.logs: redaction of tickets and secrets, and where and how lines are
written."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import shlex
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from websockets.asyncio.client import connect

from relay.core.redaction import REDACTED, Redactor
from relay.observe import logs
from tests.support.agents import CHOOSER, DEMO_AGENT
from tests.support.cli import parse_json_lines, serve
from tests.support.connect import log_records, piped_connect, request
from tests.support.env import clean_env, connect_env
from tests.support.live import make_ticket
from tests.support.sockets import closed_with, refused

TICKET = "eyJzdWIiOiJhbGljZSJ9.ZXhhbXBsZQ.c2lnbmF0dXJl"
SECRET = "hunter2-relay-secret"
SECRET_39 = "vocabulary-secret-0123456789abcdef-0123"


def _ours(handler: logging.Handler) -> bool:
    """A handler installed by logs.configure (pytest's own capture handlers are left alone)."""
    return isinstance(handler.formatter, structlog.stdlib.ProcessorFormatter)


@pytest.fixture(autouse=True)
def restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Put back conftest's logging configuration and the process's redactor after each test."""
    root = logging.getLogger()
    websockets_logger = logging.getLogger("websockets")
    handlers = [h for h in root.handlers if _ours(h)]
    levels = root.level, websockets_logger.level
    config = structlog.get_config()
    monkeypatch.setattr(logs, "_redactor", Redactor())
    yield
    root.handlers[:] = [h for h in root.handlers if not _ours(h)] + handlers
    root.setLevel(levels[0])
    websockets_logger.setLevel(levels[1])
    structlog.configure(**config)


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
    logs.redactor().add_secret(SECRET)
    logs.get_logger().info(f"loaded secret {SECRET}")
    assert [e["event"] for e in json_lines(stream)] == [f"loaded secret {REDACTED}"]


def test_the_redactor_given_to_configure_is_the_processs_until_another_is() -> None:
    """configure installs the command's redactor (the relay's, or connect's): its secrets and
    tickets are redacted from every line; a later configure without one keeps it."""
    redactor = Redactor()
    redactor.add_secret(SECRET)
    redactor.add_ticket(TICKET)
    logs.configure("debug", "json", io.StringIO(), redacting=redactor)
    stream = configured()
    logs.get_logger().info(f"secret {SECRET} ticket {TICKET}")
    assert logs.redactor() is redactor
    assert [e["event"] for e in json_lines(stream)] == [f"secret {REDACTED} ticket {REDACTED}"]


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
    the event's few keys in a fixed order and the whole connection id (what `ticket --watch`
    takes)."""
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
        f"connection opened  subject=alice remote=127.0.0.1:5 agent_pid=42 "
        f"connection_id={CONNECTION}",
        'connection closed  exit_status=0 close_code=1000 close_reason="" messages_in=3 '
        f"messages_out=4 duration=1.5 connection_id={CONNECTION}",
        f'warning: line dropped  size=9 reason="too big" connection_id={CONNECTION}',
    ]


def test_console_lines_shorten_long_values() -> None:
    """A value over 80 characters is cut, saying its length; the line stays short."""
    [line] = console_lines(("info", "session request rewritten", {"cwd_from": "/" + "x" * 300}))
    assert f"cwd_from=/{'x' * 78}…(301 chars)" in line
    assert len(line) < 200  # with the whole connection id


def test_console_lines_show_the_start_up_settings_whole() -> None:
    """The start-up settings line is read in full: its value is not cut at 80 characters."""
    given = {f"option-{n}": {"value": "x" * 20, "from": f"flag --option-{n}"} for n in range(5)}
    [line] = console_lines(("info", "settings", {"given": given}))
    assert f" settings  given={given!r} " in line


NO_MODULE = (
    "/home/alice/.venv/bin/python3: Error while finding module specification for "
    "'relay.demo_agent' (ModuleNotFoundError: No module named 'relay')"
)


def test_console_lines_show_an_agents_stderr_line_whole() -> None:
    """An agent's stderr line is shown whole (its reason comes last), not cut at 80
    characters; bounded where it is read, with a note of its size."""
    cut = "x" * 8192 + "…[10000 bytes, cut at 8192]"
    lines = console_lines(
        ("info", "agent stderr", {"line": NO_MODULE}), ("info", "agent stderr", {"line": cut})
    )
    assert f'agent stderr  line="{NO_MODULE}" connection_id=' in lines[0]
    assert f'line="{cut}" connection_id=' in lines[1]


def test_console_lines_show_a_failed_agents_stderr_tail_below_its_line() -> None:
    """A failed agent's last stderr lines follow its warning, one a line, whole and escaped."""
    tail = ["Traceback (most recent call last):", "  File x", f"\x1b]0;{NO_MODULE}"]
    fields = {"exit_status": 1, "reason": "agent exited with status 1", "stderr_tail": tail}
    lines = console_lines(("warning", "agent failed", fields))
    assert lines[0].endswith(
        'warning: agent failed  exit_status=1 reason="agent exited with status 1" '
        "connection_id=a63f1390-2bbf-4500-91d0-9a898253b2a8"
    )
    assert lines[1:] == [f"    {tail[0]}", "      File x", f"    \\x1b]0;{NO_MODULE}"]


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


# -- one vocabulary across serve and connect ------------------------------------------

BEHAVIOUR = Path(__file__).resolve().parents[2] / "docs" / "behaviour.md"


def documented_keys() -> set[str]:
    """The log keys of docs/behaviour.md's table: every key a line may carry."""
    text = BEHAVIOUR.read_text()
    table = re.search(r"<!-- log keys:[^\n]*-->\n(.*?)<!-- end of log keys -->", text, re.S)
    assert table, "no log keys table in docs/behaviour.md"
    keys = set()
    for row in table[1].splitlines()[2:]:
        keys.update(re.findall(r"`([a-z_]+)`", row.split("|")[1]))
    return keys


def test_the_documented_vocabulary_is_snake_case_and_names_its_pids() -> None:
    """The documented keys are snake_case, one per meaning: no conn, bare pid, why or error."""
    keys = documented_keys()
    assert len(keys) > 60
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", key) for key in keys)
    assert not keys & {"conn", "pid", "why", "error", "cause", "closeCode", "retryAfter"}
    assert {"connection_id", "relay_pid", "agent_pid", "watchdog_pid", "reason"} <= keys


def chosen(argv: Sequence[str]) -> str:
    """The first frame for the CHOOSER agent: become ``argv``."""
    return json.dumps({"exec": list(argv)})


FAILING = [
    sys.executable,
    "-c",
    "import sys\nsys.stdout.buffer.write(b'\\xff\\n')\nsys.stdout.flush()\n"
    "print('boom', file=sys.stderr)\nsys.exit(3)\n",
]


@pytest.mark.slow
async def test_serve_and_connect_log_in_one_documented_vocabulary(tmp_path: Path) -> None:
    """Serve and connect, run through their main events, write only documented keys; a
    refused session request is logged once."""
    secrets = tmp_path / "secrets"
    secrets.write_text(f"{SECRET_39}\nshort-but-16-bytes\n")
    secrets.chmod(0o644)
    args = (
        "--agent", shlex.join(CHOOSER), "--secret-file", str(secrets), "--cwd-map",
        f"/Users/alice={tmp_path}", "--cwd-fallback", "reject", "--kill-grace", "0.5",
    )  # fmt: skip
    env = clean_env(ACP_RELAY_MAX_CONECTIONS="3")
    async with serve(*args, env=env) as relay:
        editor_lines = [
            chosen(DEMO_AGENT),
            json.dumps(request(1, "initialize", protocolVersion=1)),
            json.dumps(request(2, "session/new", cwd="/Users/alice", mcpServers=[])),
        ]
        stdin = "".join(line + "\n" for line in editor_lines).encode()
        ticket = make_ticket(SECRET_39)
        status, _, connect_err = await piped_connect(relay.url, stdin, connect_env(ticket))
        assert status == 0, connect_err
        bad = make_ticket()  # signed with another secret: 401
        failed, _, failed_err = await piped_connect(relay.url, b"", connect_env(bad))
        assert failed == 1
        async with connect(relay.ticket_url(make_ticket(SECRET_39))) as ws:
            await ws.send(chosen(["cat"]))
            await ws.send(json.dumps(request(3, "session/new", cwd="/elsewhere", mcpServers=[])))
            async with asyncio.timeout(10):
                assert "-32602" in str(await ws.recv())
            await ws.send(b"binary")
            await ws.send("[1, 2]")
            async with asyncio.timeout(10):
                assert "-32600" in str(await ws.recv())
        async with connect(relay.ticket_url(make_ticket(SECRET_39))) as ws:
            await ws.send(chosen(FAILING))
            await closed_with(ws)
        await refused(relay.ticket_url(make_ticket()))  # another secret: 401
        await refused(relay.ticket_url(make_ticket(SECRET_39)), origin="https://evil.example")
        await refused(f"ws://127.0.0.1:{relay.port}/elsewhere?ticket={make_ticket(SECRET_39)}")
        await relay.wait_event("connection closed", 3)
        assert await relay.stop() == 0
    records = [*parse_json_lines(relay.stderr), *log_records(connect_err)]
    records += log_records(failed_err)
    events = {r["event"] for r in records}
    assert events >= {
        "unknown environment variable ignored", "short ticket secret",
        "secret file readable by group or others", "listening", "session rewrite",
        "connection opened", "session request rewritten", "session request refused",
        "binary frame ignored", "frame refused", "line dropped", "agent stderr",
        "agent failed", "connection refused", "connection closed", "shutting down", "stopped",
        "connecting", "connected", "stdin ended: waiting for answers", "closing",
        "connect finished", "relay connection failed",
    }, events  # fmt: skip
    vocabulary = documented_keys()
    for record in records:
        assert set(record) <= vocabulary, (record["event"], set(record) - vocabulary)
    assert [r["event"] for r in records].count("session request refused") == 1
