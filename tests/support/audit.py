"""The log audit: every log line a test produced, searched for the tickets and secrets it used.

Its fixtures (``audit``, ``audit_figures``) are registered by tests/conftest.py. A test
takes ``audit``, notes each ticket or secret with :meth:`LogAudit.secret` (or mints one
with :meth:`LogAudit.ticket`) and hands it the stderr of each relay subprocess with
:meth:`LogAudit.watch`; the lines of this process are captured, formatted and redacted
as the relay prints them. The test fails if any noted string is in any line.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog

from tests.support.figures import record
from tests.support.live import SECRET, make_ticket

MIN_NEEDLE = 16  # shorter strings may occur in any log by chance


@dataclass
class LogAudit:
    """Strings that must never be logged, and the log lines to search for them."""

    needles: set[str] = field(default_factory=set)
    sources: list[Sequence[str]] = field(default_factory=list)
    in_process: io.StringIO = field(default_factory=io.StringIO)

    def secret(self, text: str) -> str:
        """Note ``text`` (a ticket, a secret) as never to be logged; returns it."""
        if len(text) >= MIN_NEEDLE:
            self.needles.add(text)
        return text

    def ticket(self, **kwargs: Any) -> str:
        """A fresh ticket (:func:`tests.support.live.make_ticket`), noted as never to be logged."""
        return self.secret(make_ticket(**kwargs))

    def watch(self, lines: Sequence[str]) -> None:
        """Also search ``lines`` (a relay subprocess's stderr, as it grows)."""
        self.sources.append(lines)

    def lines(self) -> list[str]:
        found = self.in_process.getvalue().splitlines()
        for source in self.sources:
            found.extend(source)
        return found

    def leaks(self) -> tuple[int, list[str]]:
        """How many lines were searched, and the needles found in them (should be none)."""
        lines = self.lines()
        text = "\n".join(lines)
        return len(lines), sorted(needle[:24] + "..." for needle in self.needles if needle in text)


@contextmanager
def captured_relay_logs(into: io.StringIO) -> Iterator[None]:
    """Copy every log line of this process into ``into``, formatted and redacted as on stderr.

    Uses the formatter of the handler :func:`relay.observe.logs.configure` installed, so the lines
    are exactly what the relay would print.
    """
    root = logging.getLogger()
    ours = [
        h for h in root.handlers if isinstance(h.formatter, structlog.stdlib.ProcessorFormatter)
    ]
    assert ours, "relay.observe.logs.configure has not run"
    handler = logging.StreamHandler(into)
    handler.setFormatter(ours[0].formatter)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


_searched: dict[str, int] = {}  # log lines searched, by test module


@pytest.fixture
def audit(request: pytest.FixtureRequest) -> Iterator[LogAudit]:
    """Every log line a test produced, in this process or a relay's stderr: no ticket, no secret."""
    found = LogAudit()
    found.secret(SECRET)
    with captured_relay_logs(found.in_process):
        yield found
    searched, leaked = found.leaks()
    module = request.module.__name__
    _searched[module] = _searched.get(module, 0) + searched
    assert leaked == [], f"tickets or secrets in the logs: {leaked}"


@pytest.fixture(scope="module")
def audit_figures(request: pytest.FixtureRequest) -> Iterator[None]:
    """Report how many log lines the module's tests searched for tickets and secrets."""
    yield
    module = request.module.__name__
    record(
        f"log audit ({module})", log_lines_searched=_searched.get(module, 0), tickets_or_secrets=0
    )
