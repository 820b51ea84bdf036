"""Connection traces: what one socket carried, as NDJSON records, bounded in size.

Pure: values in, bytes out; the clock is passed in. :mod:`relay.observe.tracewriter` writes the
bytes. A trace is one JSON object per line (UTF-8, compact, keys in a fixed order):

``{"t": ..., "event": "open", ...}``
    first record: connection id, request path (redacted), remote, subject, agent.
``{"t": ..., "dir": "to_agent", "line": "..."}``
    a line the relay wrote to the agent's stdin, as a JSON string of its exact text
    (the ``\\n`` terminator left out). When the relay changed the client's frame, the
    frame as received is in ``before``; a session-opening rewrite adds ``rewrite``
    (what changed, as in the log line) and, if values of the relay's own MCP servers
    were hidden, ``redacted`` (those servers' names).
``{"t": ..., "dir": "to_client", "line": "..."}``
    a text frame the relay sent to the client, exactly. Frames the relay wrote itself
    (the answer to a client frame it refused) carry ``"by": "relay"``, the refused
    frame in ``refused`` and the ``reason``.
``{"t": ..., "event": "dropped", "dir": "to_client", "size": N, "reason": "..."}``
    an agent line the relay dropped (over the size limit, or not UTF-8).
``{"t": ..., "event": "detach" | "resume" | "expire", ...}``
    a resumable connection lost its socket, took a new one, or waited past its grace.
``{"t": ..., "event": "close", ...}``
    last record: exit status, close code and reason, counters.
``{"t": ..., "event": "truncated", ...}``
    the last record instead, when the next record would have passed the byte bound.

``t`` is the UTC time with microseconds: when the relay had handed a client frame's
line to the agent's stdin (or sent its own answer to a refused frame), or an agent line
to the socket. The two directions are written by two pumps, so a record of one may sit
a few records from its place relative to the other while both are busy. Lines are
stored as JSON strings rather than parsed JSON: re-encoding parsed JSON would not give
back the bytes (whitespace, key order, number spelling, escapes). Every line the relay
carries is valid UTF-8, so ``record["line"].encode()`` is exactly the line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring  # the C string encoder json.dumps uses
from typing import Any

from relay.config.defaults import MIN_TRACE_MAX_BYTES

FORMAT_VERSION = 1
TO_AGENT = "to_agent"
TO_CLIENT = "to_client"
DIRECTIONS = (TO_AGENT, TO_CLIENT)
# Room always kept for the final "truncated" record (whose size is bounded: numbers only).
TRUNCATION_RESERVE = 256

Record = dict[str, Any]


def timestamp(now: float) -> str:
    """``now`` (Unix seconds) as ISO 8601 UTC with microseconds: ``2025-01-02T03:04:05.678901Z``."""
    second, micro = divmod(round(now * 1_000_000), 1_000_000)
    return f"{_utc_second(second)}.{micro:06d}Z"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc_second(second: int) -> str:
    """Arithmetic on the epoch, not the time module: this module reads no clock."""
    return (_EPOCH + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%S")


class Timestamps:
    """One trace's :func:`timestamp`: formatting is most of a record's cost, so the whole
    second is formatted once per second of the trace, its microseconds each time."""

    def __init__(self) -> None:
        self._second: int | None = None
        self._text = ""

    def __call__(self, now: float) -> str:
        second, micro = divmod(round(now * 1_000_000), 1_000_000)
        if second != self._second:
            self._second, self._text = second, _utc_second(second)
        return f"{self._text}.{micro:06d}Z"


def encode(record: Mapping[str, Any]) -> bytes:
    """One NDJSON line: compact JSON, non-ASCII kept as UTF-8, ``\\n`` at the end."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def message(now: float, direction: str, line: bytes, **extra: Any) -> Record:
    """A message record: ``line`` must be valid UTF-8 (every line the relay carries is)."""
    return {"t": timestamp(now), "dir": direction, "line": line.decode("utf-8"), **extra}


def message_line(
    now: float, direction: str, line: bytes, stamp: Callable[[float], str] = timestamp
) -> bytes:
    """``encode(message(now, direction, line))``, built directly: the common record, fast
    (``stamp`` a trace's :class:`Timestamps`)."""
    return b"".join(
        (
            b'{"t":"',
            stamp(now).encode(),
            b'","dir":"',
            direction.encode(),
            b'","line":',
            encode_basestring(line.decode("utf-8")).encode(),
            b"}\n",
        )
    )


def event(now: float, name: str, **fields: Any) -> Record:
    """A record that is not a message: ``open``, ``close``, ``dropped``, ``truncated``."""
    return {"t": timestamp(now), "event": name, **fields}


def line_bytes(record: Mapping[str, Any]) -> bytes | None:
    """The exact bytes a message record carried (without ``\\n``); None for other records."""
    line = record.get("line")
    return line.encode("utf-8") if isinstance(line, str) else None


def client_frame(record: Mapping[str, Any]) -> bytes | None:
    """The exact text frame the client sent, for a record that came from one; else None."""
    if record.get("dir") == TO_AGENT:
        text = record.get("before", record.get("line"))
    elif record.get("by") == "relay":
        text = record.get("refused")
    else:
        return None
    return text.encode("utf-8") if isinstance(text, str) else None


class BoundedTrace:
    """The byte budget of one trace file.

    :meth:`add` turns a record into the bytes to append. Once a record would pass
    ``max_bytes`` (less the room kept for it), a final ``truncated`` record is returned
    instead and every later call returns ``b""``. The file therefore never exceeds
    ``max_bytes``. ``size_hint`` (the length of the line a record holds) lets a record
    that cannot fit be refused before it is encoded: a record is never shorter than its
    line.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < MIN_TRACE_MAX_BYTES:
            raise ValueError(f"a trace needs at least {MIN_TRACE_MAX_BYTES} bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.used = 0
        self.records = 0
        self.stopped = False
        self._limit = max_bytes - TRUNCATION_RESERVE
        self._stamp = Timestamps()

    def add(self, now: float, record: Mapping[str, Any], size_hint: int = 0) -> bytes:
        """The bytes to append for ``record``: itself, the final record, or nothing."""
        if self.stopped:
            return b""
        if self.used + size_hint > self._limit:
            return self._truncate(now, _kind(record))
        return self._take(now, encode(record), _kind(record))

    def add_line(self, now: float, direction: str, line: bytes) -> bytes:
        """Like ``add(now, message(now, direction, line), len(line))``, faster."""
        if self.stopped:
            return b""
        if self.used + len(line) > self._limit:
            return self._truncate(now, direction)
        return self._take(now, message_line(now, direction, line, self._stamp), direction)

    def _take(self, now: float, data: bytes, kind: str) -> bytes:
        if self.used + len(data) > self._limit:
            return self._truncate(now, kind)
        self.used += len(data)
        self.records += 1
        return data

    def _truncate(self, now: float, kind: str) -> bytes:
        self.stopped = True
        final = encode(
            event(
                now,
                "truncated",
                max_bytes=self.max_bytes,
                bytes=self.used,
                records=self.records,
                next=kind,
            )
        )
        self.used += len(final)
        return final


def _kind(record: Mapping[str, Any]) -> str:
    kind = record.get("dir", record.get("event"))
    known = (*DIRECTIONS, "open", "close", "dropped", "detach", "resume", "expire")
    return kind if kind in known else "record"
