"""Writing connection traces (``--trace-dir``): one NDJSON file per connection.

The records and the byte bound are :mod:`relay.observe.tracerecords`'s; this module owns the file.
Writes happen on the event loop's thread, buffered: records collect in memory and go
to the file once 64 KiB are waiting, half a second after the first waiting record, and
when the connection ends. A record larger than the buffer is written at once. So the
loop is blocked at most for one write of max(64 KiB, one record) into the page cache,
and per connection the total written is bounded by ``--trace-max-bytes``. A write that
fails (disk full, directory gone) stops that connection's trace with one error log;
the connection itself goes on.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay import __version__
from relay.acp.mcp import hide_injected
from relay.acp.outcome import Forward, Outcome, Refuse
from relay.acp.rewrite import RewriteReport, Rewritten
from relay.core.framing import Dropped
from relay.core.redaction import REDACTED, Redactor
from relay.observe.logs import Logger, redactor
from relay.streams.pump import answered

if TYPE_CHECKING:
    from relay.streams.pump import AgentLine
from relay.observe.tracerecords import (
    FORMAT_VERSION,
    TO_AGENT,
    TO_CLIENT,
    BoundedTrace,
    event,
    message,
)

FLUSH_BYTES = 1 << 16
FLUSH_SECONDS = 0.5
FILE_MODE = 0o600


def file_name(conn_id: str, now: float) -> str:
    """``20250102T030405Z-<connection id>.ndjson``: sorts by opening time, names the socket."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + f"-{conn_id}.ndjson"


class TraceFile:
    """An append-only file with a small write buffer, flushed by size, by timer and on close."""

    def __init__(self, path: Path, log: Logger) -> None:
        self.path = path
        self.log = log
        self._fd: int | None = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, FILE_MODE
        )
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def failed(self) -> bool:
        """True once the file is closed, by :meth:`close` or by a failed write."""
        return self._fd is None

    def write(self, data: bytes) -> None:
        """Queue ``data``; flush when the buffer is full, else within FLUSH_SECONDS."""
        if self._fd is None or not data:
            return
        if len(data) >= FLUSH_BYTES:
            self.flush()
            self._write(data)
            return
        self._buffer += data
        if len(self._buffer) >= FLUSH_BYTES:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._timer = loop.call_later(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        """Write what is buffered."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._buffer:
            data = bytes(self._buffer)
            self._buffer.clear()
            self._write(data)

    def close(self) -> None:
        """Flush and close; later writes are ignored."""
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view and self._fd is not None:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self.log.error(
                "trace write failed; trace stopped", path=str(self.path), reason=str(exc)
            )
            self._buffer.clear()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class ConnectionTrace:
    """One connection's trace: what it carried and its events, into one file."""

    def __init__(
        self,
        file: TraceFile,
        max_bytes: int,
        *,
        clock: Callable[[], float] = time.time,
        redacting: Redactor | None = None,
    ) -> None:
        self.file = file
        self.bounded = BoundedTrace(max_bytes)
        self.clock = clock
        self.redactor = redactor() if redacting is None else redacting

    @classmethod
    def open(
        cls, directory: str, conn_id: str, max_bytes: int, log: Logger
    ) -> ConnectionTrace | None:
        """Create the connection's file; None (with an error log) if that fails."""
        now = time.time()
        path = Path(directory) / file_name(conn_id, now)
        try:
            file = TraceFile(path, log)
        except OSError as exc:
            log.error("cannot create trace file; no trace", path=str(path), reason=exc.strerror)
            return None
        return cls(file, max_bytes)

    # -- connection events ---------------------------------------------------------------

    def opened(
        self,
        *,
        conn: str,
        path: str,
        remote: str,
        subject: str,
        agent: Sequence[str],
        pid: int | None,
    ) -> None:
        """The first record: who connected, to what, and which agent runs for them."""
        self._event(
            "open",
            format=FORMAT_VERSION,
            relay=__version__,
            conn=conn,
            path=self.redactor.redact_text(path),
            remote=remote,
            subject=self.redactor.redact_text(subject),
            agent=[self.redactor.redact_text(arg) for arg in agent],
            pid=pid,
            max_bytes=self.bounded.max_bytes,
        )

    def noted(self, name: str, **fields: Any) -> None:
        """A record of a connection event (``detach``, ``resume``, ``expire``)."""
        self._event(name, **{k: self.redactor.redact_value(v) for k, v in fields.items()})

    def closed(self, **fields: Any) -> None:
        """The last record (exit status, close code and reason, counters); closes the file."""
        self._event("close", **{k: self.redactor.redact_value(v) for k, v in fields.items()})
        self.file.close()

    # -- what the connection carried ----------------------------------------------------

    def client(self, outcome: Outcome) -> None:
        """A client frame and what became of it: a line for the agent, or the relay's reply."""
        if self.bounded.stopped or self.file.failed:
            return
        now = self.clock()
        if isinstance(outcome, Forward):
            self._forwarded(now, outcome)
        elif isinstance(outcome, Refuse):
            record = message(
                now,
                TO_CLIENT,
                outcome.reply,
                by="relay",
                refused=outcome.frame.decode("utf-8"),
                reason=outcome.reason,
            )
            self._write(now, record, len(outcome.frame) + len(outcome.reply))

    def _forwarded(self, now: float, outcome: Forward) -> None:
        line, report = outcome.line, outcome.rewrite
        if report is None and not outcome.changed:
            self.file.write(self.bounded.add_line(now, TO_AGENT, line))
            return
        extra: dict[str, Any] = {"before": outcome.frame.decode("utf-8")}
        if report is not None and report.crossings():
            extra["crossed"] = crossed(report)
        if report is not None:
            line, hidden = self._hide_injected(line, report)
            extra["rewrite"] = self.redactor.redact_value(report.fields())
            if hidden:
                extra["redacted"] = hidden
        record = message(now, TO_AGENT, line, **extra)
        self._write(now, record, len(line) + len(outcome.frame))

    def agent_lines(self, verdicts: Sequence[AgentLine]) -> None:
        """Agent lines after the relay handled them: sent to the client (translated where
        a path crossed, each translation recorded), answered by the relay, or dropped."""
        for line in verdicts:
            if self.bounded.stopped or self.file.failed:
                return
            if isinstance(line, bytes):
                self.file.write(self.bounded.add_line(self.clock(), TO_CLIENT, line))
            elif isinstance(line, Dropped):
                self._event("dropped", dir=TO_CLIENT, size=line.size, reason=line.reason)
            elif answered(line):
                now = self.clock()
                record = message(
                    now,
                    TO_AGENT,
                    line.reply,
                    by="relay",
                    reason=line.reason,
                    crossed=crossed(line.report),
                )
                self._write(now, record, len(line.reply))
            elif isinstance(line, Rewritten):
                now = self.clock()
                record = message(now, TO_CLIENT, line.line, crossed=crossed(line.report))
                self._write(now, record, len(line.line))

    # -- writing --------------------------------------------------------------------------

    def _event(self, name: str, **fields: Any) -> None:
        now = self.clock()
        self._write(now, event(now, name, **fields))

    def _write(self, now: float, record: dict[str, Any], size_hint: int = 0) -> None:
        self.file.write(self.bounded.add(now, record, size_hint))

    def _hide_injected(self, line: bytes, report: RewriteReport) -> tuple[bytes, list[str]]:
        """The line with the relay's own MCP servers' values hidden (all of it, should it be
        unreadable: ``before`` has the client's frame)."""
        injected = report.mcp.injected if report.mcp is not None else []
        hidden = hide_injected(line, injected, self.redactor.redact_text)
        return (REDACTED.encode(), list(injected)) if hidden is None else hidden


def crossed(report: RewriteReport) -> list[dict[str, str]]:
    """Each path or URI the boundary translated in one message: field, from, to."""
    return [{"field": t.field, "from": t.before, "to": t.after} for t in report.crossings()]
