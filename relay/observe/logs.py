"""Structured logs on stderr: JSON lines off a TTY, readable on one; secrets redacted.

Every log line, the relay's own and those of libraries that use :mod:`logging`
(websockets), goes through :func:`redact`, which removes query strings, bearer
tokens and the secrets of the process's :class:`relay.core.redaction.Redactor`
(:func:`redactor`; the relay's, or one ``connect``'s, installed by :func:`configure`).

On a terminal (:class:`ReadableLines`) a line is the time, the level when it is a
warning or an error, the event, then the few keys that matter for that event and the
whole connection id, long values shortened and control characters escaped (an agent's
stderr cannot retitle the terminal). JSON lines escape control characters as JSON does (``\u001b``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

import structlog

from relay.core.printable import escaped
from relay.core.redaction import Redactor

Logger = structlog.stdlib.BoundLogger
"""The relay's logger type: structlog's stdlib-bound logger, bound with per-connection keys."""

# Logging is the process's, so the secrets its lines are redacted of are too.
_redactor = Redactor()


def redactor() -> Redactor:
    """The process's redactor: every log line and trace record is redacted of its secrets."""
    return _redactor


def redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: redact every string value of the event."""
    redacting = _redactor
    for key, value in event.items():
        event[key] = redacting.redact_value(value)
    return event


def configure(
    level: str = "info",
    fmt: str | None = None,
    stream: TextIO | None = None,
    redacting: Redactor | None = None,
) -> None:
    """Send all logs to ``stream`` (stderr), as JSON or console lines, through redaction;
    ``redacting`` becomes the process's redactor (else the one it has stays)."""
    global _redactor
    if redacting is not None:
        _redactor = redacting
    stream = stream or sys.stderr
    if fmt is None:
        fmt = "console" if stream.isatty() else "json"
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else ReadableLines(colors=stream.isatty())
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                redact,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # websockets logs request lines (with query strings) at debug: keep it at warning.
    logging.getLogger("websockets").setLevel(max(logging.WARNING, root.level))
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "relay", **bound: Any) -> Logger:
    """A structlog logger with ``bound`` values on every line."""
    logger: Logger = structlog.stdlib.get_logger(name).bind(**bound)
    return logger


# --- lines for a person at a terminal

VALUE_CHARS = 80  # a longer value is shortened to this many characters
# Values shown whole: the start-up settings are read in full; an agent's stderr line, whose
# reason often comes last (bounded where it is read: relay.server.agents.process).
WHOLE = frozenset({"given", "line"})
BELOW = frozenset({"stderr_tail"})  # lists shown one item a line, below the event's line
META = frozenset({"event", "level", "logger", "timestamp", "exception", "connection_id"})
# Who a line is about: shown where the event names it, otherwise implied by connection_id.
CONTEXT = frozenset({"url", "remote", "subject", "agent_pid"})
SHOWN: Mapping[str, tuple[str, ...]] = {
    "listening": ("url", "agent"),
    "connection opened": ("subject", "remote", "agent_pid"),
    "connection refused": ("status", "reason", "remote"),
    "connection closed": (
        "exit_status",
        "close_code",
        "close_reason",
        "messages_in",
        "messages_out",
        "duration",
    ),
    "connecting": ("url", "ticket_in"),
    "connect finished": (
        "exit_status",
        "messages_from_editor",
        "messages_to_editor",
        "answered_with_error",
        "duration",
    ),
}
_LEVEL_COLOURS = {"warning": "\x1b[33m", "error": "\x1b[31m", "critical": "\x1b[31m"}


class ReadableLines:
    """structlog renderer for a terminal: ``HH:MM:SS [level:] event  key=value ...``."""

    def __init__(self, colors: bool = False) -> None:
        self.colors = colors

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> str:
        level = str(event.get("level", ""))
        time = str(event.get("timestamp", ""))[11:19]
        head = escaped(str(event.get("event", "")))
        if level in _LEVEL_COLOURS:
            head = self._coloured(level, f"{level}: ") + head
        line = f"{time} {head}" if time else head
        fields = shown_fields(event)
        if fields:
            line += "  " + " ".join(f"{key}={value}" for key, value in fields)
        for key in BELOW:
            items = event.get(key)
            if isinstance(items, list | tuple):
                line += "".join("\n    " + escaped(str(item)) for item in items)
        if event.get("exception"):
            line += "\n" + escaped(str(event["exception"]), keep="\n")
        return line

    def _coloured(self, level: str, text: str) -> str:
        return f"{_LEVEL_COLOURS[level]}{text}\x1b[0m" if self.colors else text


def shown_fields(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The keys a terminal line shows for ``event``, with their values as shown."""
    name = str(event.get("event", ""))
    keys = SHOWN.get(name) or [
        k for k in event if k not in META and k not in CONTEXT and k not in BELOW
    ]
    fields = [
        (key, _text(event[key]) if key in WHOLE else shortened(_text(event[key])))
        for key in keys
        if event.get(key) is not None
    ]
    connection = event.get("connection_id")
    if connection:  # whole: it is what `acp-relay ticket --watch` takes, copied from here
        fields.append(("connection_id", escaped(str(connection))))
    return fields


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    if isinstance(value, str) and (not value or any(c.isspace() for c in value)):
        text = '"' + value.replace('"', '\\"') + '"'
    return escaped(text)


def shortened(text: str, limit: int = VALUE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}…({len(text)} chars)"
