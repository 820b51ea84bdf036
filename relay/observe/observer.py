"""The one observer of a connection: its log lines, its counters and its trace.

The pumps carry frames and lines and report what became of them (an outcome per client
frame, a verdict per agent line); the connection reports its events (opened, ended, the
agent's stderr). This is the only place that turns them into log lines and trace
records, so that each happening is logged once, with one vocabulary.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.acp.outcome import Forward, Outcome, Refuse, Skip
from relay.core.exits import ending_event
from relay.core.framing import Dropped
from relay.core.watchprofile import Origin
from relay.observe.logs import Logger, redactor, shortened
from relay.streams.pump import answered, sent_line

if TYPE_CHECKING:  # serve's alone: connect's pumps use PumpObserver without them
    from relay.acp.rewrite import RewriteReport
    from relay.core.exits import Exit
    from relay.observe.boundaryrecords import BoundaryRecords
    from relay.observe.stats import RelayStats
    from relay.observe.tracewriter import ConnectionTrace
    from relay.streams.pump import AgentLine

SUBJECT_CHARS = 64  # a ticket's subject is the client's to choose: its log lines stay short
STDERR_TAIL_LINES = 20  # an agent that fails: its last stderr lines, logged at warning
STDERR_TAIL_CHARS = 4096  # ... at most this many characters of them
STDERR_TAIL_LINE_CHARS = 1024  # ... each line at most this long (its end: the reason)


@dataclass
class Counters:
    """Messages and bytes carried in one direction, and lines dropped."""

    messages: int = 0
    bytes: int = 0
    dropped: int = 0

    def add(self, size: int) -> None:
        self.messages += 1
        self.bytes += size


@dataclass(frozen=True)
class Peer:
    """Who is on the other end of a connection, for its first log line and trace record."""

    remote: str
    subject: str
    path: str


class PumpObserver:
    """Counts and logs what the two pumps of one socket carried: serve's and connect's.

    ``from_socket`` counts the frames the socket delivered and were forwarded as lines;
    ``to_socket`` the lines sent as frames, and the ones dropped.
    """

    def __init__(self, log: Logger, from_socket: Counters, to_socket: Counters) -> None:
        self.log = log
        self.from_socket = from_socket
        self.to_socket = to_socket
        self._told_withheld = False

    def frame(self, outcome: Outcome) -> None:
        """A received frame was carried out: forwarded, refused (and answered) or skipped."""
        if isinstance(outcome, Forward):
            self.from_socket.add(len(outcome.line))
            if outcome.rewrite is not None:
                self._crossed_to_agent(outcome.rewrite)
        elif isinstance(outcome, Refuse):
            event = "session request refused" if outcome.session else "frame refused"
            self.log.warning(event, reason=outcome.reason)
        elif isinstance(outcome, Skip) and outcome.reason == "binary":
            self.log.warning("binary frame ignored", size=outcome.size)

    def _crossed_to_agent(self, report: RewriteReport) -> None:
        """A client message the boundary changed: a session-opening request is logged (its
        paths and MCP servers, as since the start); the editor's capabilities withheld, once
        per connection; the rest goes to the trace and the closing count only."""
        if report.opens_session:
            self.log.info("session request rewritten", **report.fields())
        elif report.withheld and not self._told_withheld:
            self._told_withheld = True
            self.log.info(
                "editor capabilities withheld",
                capabilities=report.withheld,
                reason=report.withheld_because,
            )

    def lines(self, verdicts: Sequence[AgentLine], sent: Sequence[bytes] | None = None) -> None:
        """Lines read from the pipe were handled: the whole ones sent, the others dropped.

        ``sent``, when the caller has it, is the list of the lines sent among ``verdicts``:
        when it is all of them (nearly always), they are counted without a loop.
        """
        counters = self.to_socket
        if sent is not None and len(sent) == len(verdicts):
            counters.messages += len(sent)
            counters.bytes += sum(map(len, sent))
            return
        self._tally(verdicts, counters)

    def _tally(self, verdicts: Sequence[AgentLine], sent: Counters) -> None:
        for line in verdicts:
            if isinstance(line, Dropped):
                sent.dropped += 1
                self.log.error(
                    "line dropped", size=line.size, reason=line.reason, after_message=sent.messages
                )
            elif answered(line):
                self.log.info(
                    "agent request answered by the relay",
                    method=line.report.method,
                    reason=line.reason,
                )
            else:
                sent.messages += 1
                sent.bytes += len(sent_line(line))

    def dropped(self, outcome: Forward) -> None:
        """A frame came for a pipe that is closed: it goes nowhere."""
        self.from_socket.dropped += 1

    def peer_lost(self) -> None:
        """The peer went while a full pipe held up the socket's reading."""
        self.log.warning("socket peer gone while the pipe was full")

    def send_stalled(self, seconds: float) -> None:
        """Nothing sent drained for ``seconds``: the peer is taken for gone."""
        self.log.warning("socket peer stopped reading: closing", seconds=round(seconds, 3))


class ConnectionObserver(PumpObserver):
    """Logs, counts and traces one connection; both pumps and the connection report here."""

    def __init__(
        self,
        conn_id: str,
        log: Logger,
        trace: ConnectionTrace | None = None,
        stats: RelayStats | None = None,
    ) -> None:
        self.up = Counters()  # client -> agent
        self.down = Counters()  # agent -> client
        super().__init__(log, from_socket=self.up, to_socket=self.down)
        self.conn_id = conn_id
        self.trace = trace
        self.stats = stats
        self.started = time.monotonic()
        self._told_stdin_closed = False
        self._stdout_closed_first = False  # the agent closed its stdout, then was stopped
        self.stderr_tail = StderrTail()
        self.boundary: BoundaryRecords | None = None  # the dev console's, under serve --dev

    # -- the pumps ------------------------------------------------------------------

    def frame(self, outcome: Outcome) -> None:
        """A client frame was carried out; traced as well as counted and logged."""
        if outcome.__class__ is Forward and outcome.rewrite is None:
            up = self.up  # nearly every frame: counted, nothing to log nor to count apart
            up.messages += 1
            up.bytes += len(outcome.line)
        else:
            super().frame(outcome)
            if self.boundary is not None and isinstance(outcome, Forward) and outcome.rewrite:
                self.boundary.client(outcome.rewrite)
            if self.stats is not None and isinstance(outcome, Forward | Refuse):
                self._count(outcome, self.stats)
        if self.trace is not None:
            self.trace.client(outcome)

    def _count(self, outcome: Forward | Refuse, stats: RelayStats) -> None:
        if isinstance(outcome, Refuse):
            if outcome.session:
                stats.session_refused += 1
            else:
                stats.frames_refused += 1
        elif outcome.rewrite is not None:
            stats.rewritten += 1

    def lines(self, verdicts: Sequence[AgentLine], sent: Sequence[bytes] | None = None) -> None:
        """Agent lines were handled; traced as well as counted and logged."""
        sent_before, dropped_before = self.down.messages, self.down.dropped
        super().lines(verdicts, sent)
        if self.boundary is not None:
            self.boundary.agent(verdicts)
        if self.stats is not None:
            if not sent_before and self.down.messages:
                self.stats.first_byte.observe(time.monotonic() - self.started)
            if self.down.dropped != dropped_before:
                self._count_drops(verdicts, self.stats)
        if self.trace is not None:
            self.trace.agent_lines(verdicts)

    def crossings(self, counts: Mapping[str, int]) -> None:
        """What the boundary did on this connection, in counts (never paths): one line,
        when it did anything."""
        if any(counts.values()):
            self.log.info("paths crossed", **counts)

    def _count_drops(self, verdicts: Sequence[AgentLine], stats: RelayStats) -> None:
        for line in verdicts:
            if isinstance(line, Dropped):
                stats.drop("not_utf8" if line.reason.startswith("invalid UTF-8") else "too_large")

    def carried(self) -> tuple[int, int, int, int]:
        """Messages and bytes to the agent, then to the client, so far."""
        return self.up.messages, self.up.bytes, self.down.messages, self.down.bytes

    def dropped(self, outcome: Forward) -> None:
        """A client frame came after the agent's stdin closed: it goes nowhere."""
        if not self._told_stdin_closed:
            self._told_stdin_closed = True
            self.log.warning("agent's stdin is closed: client messages are dropped")
        self.up.dropped += 1
        if self.stats is not None:
            self.stats.drop("stdin_closed")

    # -- the connection ----------------------------------------------------------------

    def opened(self, peer: Peer, agent: Sequence[str], pid: int | None) -> None:
        """The agent runs (``pid``), or failed to start (None): the first record."""
        if pid is not None:
            subject = shortened(peer.subject, SUBJECT_CHARS)
            self.log = self.log.bind(agent_pid=pid, remote=peer.remote, subject=subject)
            self.log.info("connection opened")
            if self.stats is not None:
                self.stats.opened_connection(self)
        if self.trace is not None:
            self.trace.opened(
                conn=self.conn_id,
                path=peer.path,
                remote=peer.remote,
                subject=peer.subject,
                agent=agent,
                pid=pid,
            )

    def start_failed(self, why: str, peer: Peer, agent: Sequence[str]) -> None:
        """The agent could not be started."""
        self.log.error("agent failed to start", reason=why, remote=peer.remote)
        self.opened(peer, agent, None)

    def agent_stderr(self, text: str) -> None:
        """One line the agent wrote to its stderr (the last ones are kept, should it fail)."""
        self.log.info("agent stderr", line=text)
        self.stderr_tail.add(text)

    def stdout_closed(self) -> None:
        """The agent closed its stdout and did not exit: the relay stops it. Whether it had
        kept running or was crashing is said at the close, once its exit is known."""
        self._stdout_closed_first = True

    def exit_reason(self, exit_: Exit) -> str:
        """The close reason for ``exit_``: a failed agent's ends with its last stderr line,
        redacted as the logs are (only then is the line looked at)."""
        if not exit_.failed:
            return exit_.reason
        return exit_.reason_with(redactor().redact_text(self.stderr_tail.last()))

    def warn(self, event: str) -> None:
        """Something the operator should know about this connection."""
        self.log.warning(event)

    def relay_failed(self, error: BaseException) -> None:
        """A pump raised: a bug in the relay, with its traceback."""
        self.log.error("relay error", exc_info=error)

    # -- a resumable connection --------------------------------------------------------

    def detached(self, why: str, grace: float) -> None:
        """The socket went; the agent runs on, waiting ``grace`` seconds for a resume."""
        self.log.info("connection detached", reason=why, grace=grace)
        if self.stats is not None:
            self.stats.detached += 1
        if self.trace is not None:
            self.trace.noted("detach", why=why, grace=grace)

    def resumed(self, *, gap: float | None, replayed: int, resent: int, fenced: bool) -> None:
        """A new socket took the connection over: how long it was gone, what it re-gets."""
        fields = {
            "gap_seconds": None if gap is None else round(gap, 3),
            "records_replayed": replayed,
            "messages_resent": resent,
            "fenced_older_socket": fenced,
        }
        self.log.info("connection resumed", **fields)
        if self.stats is not None:
            self.stats.resumed += 1
        if self.trace is not None:
            self.trace.noted("resume", **fields)

    # -- watchers ------------------------------------------------------------------------

    def watcher_attached(self, subject: str, may_answer: bool, watchers: int) -> None:
        """A watcher attached (``watchers`` now attached)."""
        shown = shortened(subject, SUBJECT_CHARS)
        self.log.info("watcher attached", watcher=shown, may_answer=may_answer, watchers=watchers)
        if self.stats is not None:
            self.stats.watch_event("attached")
        if self.trace is not None:
            self.trace.noted("watch", watcher=subject, may_answer=may_answer)

    def watcher_left(self, subject: str, close_code: int | None, watchers: int) -> None:
        """A watcher's socket went (``watchers`` still attached)."""
        shown = shortened(subject, SUBJECT_CHARS)
        self.log.info("watcher left", watcher=shown, close_code=close_code, watchers=watchers)
        if self.trace is not None:
            self.trace.noted("unwatch", watcher=subject, close_code=close_code)

    def watcher_fell_behind(self, subject: str, unread: int) -> None:
        """A watcher left more than its bound unread: it is closed."""
        shown = shortened(subject, SUBJECT_CHARS)
        self.log.warning("watcher fell behind: closing it", watcher=shown, size=unread)
        if self.stats is not None:
            self.stats.watch_event("fell_behind")

    def watcher_refused(self, subject: str, reason: str) -> None:
        """A watcher sent something else than an answer it may give: answered with why."""
        shown = shortened(subject, SUBJECT_CHARS)
        self.log.warning("watcher frame refused", watcher=shown, reason=reason)
        if self.stats is not None:
            self.stats.watch_event("refused")

    def answer_taken(self, by: Origin, subject: str) -> None:
        """The first answer to a permission request, from the controller or a watcher."""
        shown = shortened(subject, SUBJECT_CHARS) if by is Origin.WATCHER else None
        self.log.info("answer taken", by=by.answerer, watcher=shown)
        if self.stats is not None:
            self.stats.watch_event(f"answer_{by.answerer}")
        if self.trace is not None:
            self.trace.noted("answered", by=by.answerer, subject=subject)

    def answer_late(self, by: Origin, subject: str) -> None:
        """An answer to a request answered already: dropped."""
        shown = shortened(subject, SUBJECT_CHARS)
        self.log.info("answer dropped: answered already", by=by.answerer, watcher=shown)
        if self.stats is not None:
            self.stats.watch_event("answer_late")

    def expired(self, grace: float) -> None:
        """No resume came within the grace: the connection ends."""
        self.log.info("connection expired", grace=grace)
        if self.stats is not None:
            self.stats.expired += 1
        if self.trace is not None:
            self.trace.noted("expire", grace=grace)

    def closed(self, exit_: Exit | None, close_code: int | None, close_reason: str | None) -> None:
        """The connection is over: its last log line and trace record."""
        if self.stats is not None:
            returncode = None if exit_ is None else exit_.returncode
            seconds = time.monotonic() - self.started
            self.stats.ended_connection(self, close_code, returncode, seconds)
        if exit_ is not None:
            self._how_it_ended(exit_)
            self.log.info(
                "connection closed",
                exit_status=exit_.returncode,
                close_code=close_code,
                close_reason=close_reason,
                messages_in=self.up.messages,
                bytes_in=self.up.bytes,
                messages_out=self.down.messages,
                bytes_out=self.down.bytes,
                dropped_out=self.down.dropped,
                dropped_in=self.up.dropped,
                duration=round(time.monotonic() - self.started, 3),
            )
        if self.trace is not None:
            self.trace.closed(
                exit_status=None if exit_ is None else exit_.returncode,
                close_code=close_code,
                close_reason=close_reason,
                messages_in=self.up.messages,
                messages_out=self.down.messages,
                dropped_out=self.down.dropped,
            )
            self.trace = None

    def _how_it_ended(self, exit_: Exit) -> None:
        """A warning naming the agent's end when it failed, crashed or kept running."""
        event = ending_event(exit_, stdout_closed_first=self._stdout_closed_first)
        if event is not None:
            # Its stderr is logged at info: a crash's traceback must show at warning too.
            fields = {"exit_status": exit_.returncode, "reason": exit_.reason}
            if exit_.failed:
                fields["stderr_tail"] = self.stderr_tail.lines()
            self.log.warning(event, **fields)


class StderrTail:
    """The last lines an agent wrote to its stderr, bounded in lines and in characters as
    they come: what a failure is told with, and never more."""

    def __init__(self) -> None:
        self._lines: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._chars = 0

    def add(self, line: str) -> None:
        if len(self._lines) == STDERR_TAIL_LINES:
            self._chars -= len(self._lines[0])
        line = shortened_start(line, STDERR_TAIL_LINE_CHARS)
        self._lines.append(line)
        self._chars += len(line)
        while self._chars > STDERR_TAIL_CHARS:
            self._chars -= len(self._lines.popleft())

    def lines(self) -> list[str]:
        """The last lines, oldest first: at most ``STDERR_TAIL_LINES``, ``STDERR_TAIL_CHARS``."""
        return list(self._lines)

    def last(self) -> str:
        """The last line ("" before any)."""
        return self._lines[-1] if self._lines else ""


def shortened_start(text: str, limit: int) -> str:
    """``text`` cut to its last ``limit`` characters, saying how long it was: a program's
    error line says why at its end."""
    if len(text) <= limit:
        return text
    return f"({len(text)} chars)…{text[len(text) - limit + 1 :]}"
