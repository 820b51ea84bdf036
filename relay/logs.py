"""Structured logs on stderr: JSON lines off a TTY, readable on one; secrets redacted.

Every log line, the relay's own and those of libraries that use :mod:`logging`
(websockets), goes through :func:`redact`, which removes query strings, bearer
tokens and any secret registered with :func:`relay.redact.register_secret`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from relay.redact import redact_value

Logger = structlog.stdlib.BoundLogger
"""The relay's logger type: structlog's stdlib-bound logger, bound with per-connection keys."""


def redact(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: redact every string value of the event."""
    for key, value in event.items():
        event[key] = redact_value(value)
    return event


def configure(level: str = "info", fmt: str | None = None, stream: TextIO | None = None) -> None:
    """Send all logs to ``stream`` (stderr), as JSON or console lines, through redaction."""
    stream = stream or sys.stderr
    if fmt is None:
        fmt = "console" if stream.isatty() else "json"
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
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
