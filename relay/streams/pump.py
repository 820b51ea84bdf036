"""Pumps between a byte pipe (one message per line) and a WebSocket (one per text frame).

Used by ``serve`` (agent pipes <-> client socket) and ``connect`` (editor stdio <->
relay socket). Backpressure both ways: a line is read from the pipe only after the
previous frame was handed to a socket with room for it, and a frame is received only
after the previous line was drained into the pipe. Nothing is queued without bound.

The pumps know nothing of logs, counters or traces: each received frame's outcome
comes from a judge (:func:`relay.acp.outcome.judge_frame`), each line's verdict from the
splitter, and both are handed, once carried out, to the caller's observer
(:mod:`relay.observe.observer`).

While a full pipe holds the socket's reading, the event loop cannot see the peer hang
up: every ``PEER_CHECK_SECONDS`` of such a stall the pump asks the kernel about the
socket, and now and then sends a ping, which a peer that has gone answers with a reset.
"""

from __future__ import annotations

import asyncio
import enum
import select
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, cast

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from relay.acp.outcome import Close, Forward, Outcome, Received, Refuse
from relay.core.framing import Dropped, Line, LineSplitter
from relay.streams.pipewriter import PEER_CHECK_SECONDS, LineWriter
from relay.streams.wsadapter import Receiver, frames_waiting

READ_CHUNK = 1 << 18  # bytes asked of the agent's stdout (or the editor's stdin) per read
PROBE_EARLY_SECONDS = 2.0  # during a stall's first seconds, ping at every check
PROBE_EVERY_SECONDS = 4.0  # after that, ping this often
_HANG_UP = select.POLLERR | select.POLLHUP | getattr(select, "POLLRDHUP", 0)

Judge = Callable[[Received], Outcome]
"""Turns one received frame into its outcome (:func:`relay.acp.outcome.judge_frame`)."""


class Judging(Protocol):
    """A judge that may change between two frames: ``now`` judges the next one. The
    watchers' check of the controller's answers is in it only while an answer may come
    (:meth:`relay.server.connections.sharing.Watching.controller_judge`)."""

    now: Judge


class Fixed:
    """A judge that never changes, as a :class:`Judging`."""

    __slots__ = ("now",)

    def __init__(self, judge: Judge) -> None:
        self.now = judge


Tap = Callable[[list[Forward]], None]
"""Told the lines a frames-to-lines pump wrote to the pipe, a batch at a time (the
watchers' history): once per batch, before the pump waits for anything. The list is the
pump's, emptied for the next batch: a tap keeps what it needs, not the list."""
if TYPE_CHECKING:  # connect never translates: it loads none of the boundary
    from relay.acp.refusals import ToAgent
    from relay.acp.rewrite import Rewritten

    AgentLine = Line | Rewritten | ToAgent
    """A line's verdict once the boundary saw it: sent as it is, dropped, sent translated,
    or answered by the relay (:mod:`relay.acp.boundary`)."""
    Crossed = list[bytes | Rewritten | ToAgent] | None
    Translate = Callable[[list[bytes]], Crossed | Awaitable[Crossed]]
    """The boundary's look at the lines of one read (None: all pass as they are); awaited
    when it has to read a line at length first."""
Answer = Callable[[Sequence[bytes]], Awaitable[None]]
"""Carries the relay's own replies back to where the lines came from (the agent)."""


class ByteReader(Protocol):
    """Where :func:`lines_to_frames` reads: an :class:`asyncio.StreamReader` or a wrapper."""

    async def read(self, n: int) -> bytes: ...


class FrameSink(Protocol):
    """Where :func:`lines_to_frames` sends: :class:`relay.streams.wsadapter.TextFrames`, or
    anything that sends like it.

    A sink that keeps what it is sent until it has room again (the replay window,
    :class:`relay.server.connections.carriers.ReplayWindow`) may also have ``async room()``,
    returning once it has room: the pump waits for it before it reads more of a line it
    has begun, so that the line is not assembled (held besides what the sink keeps)
    before the sink can take it.
    """

    async def send_frames(self, frames: Sequence[bytes]) -> None: ...


class FrameObserver(Protocol):
    """Told what became of each received frame, once it was carried out."""

    def frame(self, outcome: Outcome) -> None: ...

    def dropped(self, outcome: Forward) -> None:
        """A line for the pipe came after the pipe closed: it goes nowhere."""

    def peer_lost(self) -> None:
        """The socket's peer went while a full pipe held up the socket's reading."""


class LineObserver(Protocol):
    """Told the verdict on each line read from the pipe, once the sent ones were sent."""

    def lines(self, verdicts: Sequence[AgentLine], sent: Sequence[bytes] | None = None) -> None:
        """``sent``: the lines among ``verdicts`` that were sent, in order."""


class Ended(enum.Enum):
    """Why a frames-to-lines pump stopped."""

    SOCKET_CLOSED = "socket closed"
    PIPE_CLOSED = "pipe closed"


async def lines_to_frames(
    reader: ByteReader,
    sink: FrameSink,
    *,
    max_bytes: int,
    observer: LineObserver,
    translate: Translate | None = None,
    answer: Answer | None = None,
    tap: Callable[[Sequence[bytes]], None] | None = None,
) -> None:
    """Send each line of ``reader`` as one text frame, byte-identical, until EOF.

    Each line gets its verdict from :class:`relay.core.framing.LineSplitter`: sent, or
    dropped (over ``max_bytes``, or not valid UTF-8). ``translate`` (the boundary's,
    :meth:`relay.acp.boundary.Boundary.agent_lines`) is shown the lines of each read
    before they are sent, and may give some a translated line, or the relay's own reply
    for ``answer`` to carry back (that line then goes nowhere else). ``observer`` gets the
    verdicts of each read once its lines were sent, and ``tap`` (the watchers',
    :class:`relay.server.connections.sharing.Watching`) the lines sent. Raises ConnectionClosed
    if the socket goes first.
    """
    splitter = LineSplitter(max_bytes, utf8=True)
    room: Callable[[], Awaitable[None]] | None = getattr(sink, "room", None)
    while chunk := await reader.read(READ_CHUNK):
        dropped = splitter.dropped
        verdicts = splitter.feed(chunk)
        clean = splitter.dropped == dropped  # nearly always: every line is sent
        await _send(verdicts, clean, sink, observer, translate, answer, tap)
        if room is not None and splitter.partial:
            await room()  # the rest of a begun line waits in the pipe until it can go
    last = splitter.finish()
    if last is not None:
        await _send([last], False, sink, observer, translate, answer, tap)


async def _send(
    verdicts: list[Line],
    clean: bool,
    sink: FrameSink,
    observer: LineObserver,
    translate: Translate | None,
    answer: Answer | None,
    tap: Callable[[Sequence[bytes]], None] | None,
) -> None:
    """Send the lines of one read together, then tell the observer and the tap.

    ``clean``: no verdict is Dropped (then the verdicts are the frames, not copied).
    """
    if clean:  # no call of cast per read: its alias would be made each time
        frames: list[bytes] = verdicts  # type: ignore[assignment]  # every verdict a line
    else:
        frames = [line for line in verdicts if isinstance(line, bytes)]
    told: Sequence[AgentLine] = verdicts
    crossed = translate(frames) if translate is not None and frames else None
    if crossed is not None and not isinstance(crossed, list):
        crossed = await crossed  # the boundary reads a long line away from the event loop
    if crossed is not None:
        told = crossed if clean else _in_place(verdicts, crossed)
        frames = [sent_line(c) for c in crossed if not answered(c)]
        replies = [c.reply for c in crossed if answered(c)]
        if replies and answer is not None:
            await answer(replies)
    if frames:
        await sink.send_frames(frames)
    observer.lines(told, frames)
    if tap is not None and frames:
        tap(frames)


def answered(verdict: AgentLine) -> TypeGuard[ToAgent]:
    """Whether the relay answered the line itself (the boundary's ToAgent): it goes nowhere."""
    return hasattr(verdict, "reply")


def sent_line(verdict: bytes | Rewritten | ToAgent) -> bytes:
    """The line that goes on: as it came, or translated (the boundary's Rewritten)."""
    return verdict if verdict.__class__ is bytes else cast("Rewritten", verdict).line


def _in_place(
    verdicts: Sequence[Line], crossed: Sequence[bytes | Rewritten | ToAgent]
) -> list[AgentLine]:
    """``verdicts`` with each line sent replaced by what the boundary made of it."""
    lines = iter(crossed)
    return [verdict if isinstance(verdict, Dropped) else next(lines) for verdict in verdicts]


Reply = Callable[[bytes], Awaitable[bool]]
"""Sends the relay's own answer to a refused frame; False when the socket is gone."""


async def frames_to_lines(
    ws: Connection,
    writer: asyncio.StreamWriter,
    *,
    judge: Judge | Judging,
    observer: FrameObserver,
    reply: Reply | None = None,
    after_pipe: bool = False,
    tap: Tap | None = None,
) -> Ended:
    """Carry out the outcome of each frame of ``ws`` until either side closes.

    ``judge`` gives each frame its outcome: a line to write into ``writer``, a reply to
    send back (through ``reply``, by default a text frame on ``ws``), nothing, or a close.
    ``observer`` is told each outcome once it was carried out, and ``tap`` (the watchers')
    the lines written to the pipe, a batch at a time: the frames received together, told
    before the pump waits for anything (the socket, the pipe, a reply), so that what
    the agent may answer is told before its answer can come. When the peer hangs up
    while the pipe is full (the socket is not being read, so nothing else notices), the
    socket is aborted and the pump ends SOCKET_CLOSED.

    When the pipe closes, the pump ends PIPE_CLOSED; with ``after_pipe`` it goes on
    judging frames until the socket closes (so that a close, an acknowledgement or a
    frame to refuse is still seen at once) and drops the lines (``observer.dropped``).
    """
    judging = cast(Judging, judge) if hasattr(judge, "now") else Fixed(judge)
    send_reply = reply or partial(_reply, ws)
    receive = Receiver(ws)
    take = receive.take  # a frame received already, without a coroutine (None: await)
    flushes = frames_waiting(ws) is not None
    lines = LineWriter(writer, peer_gone=PeerWatch(ws), caller_flushes=flushes, first_at_once=False)
    written: list[Forward] = []  # this batch's lines, for the tap
    keep = written.append if tap is not None else None
    pipe_open = True
    outcome: Outcome | None = None
    while True:
        outcome = None  # the last message is not held while the next one comes
        try:
            frame: Received | None = take()
            if frame is None:
                if flushes and lines.batch_open:
                    lines.flush()  # nothing more is received yet: the batch ends first
                if written:
                    _told(tap, written)
                frame = await receive()
            outcome = judging.now(frame)
        except ConnectionClosed:
            lines.flush()
            if written:
                _told(tap, written)
            return Ended.SOCKET_CLOSED
        if isinstance(outcome, Forward):
            if pipe_open and lines.put(outcome.line):
                if lines.backed_up():
                    if written:  # the lines before this one, told before the wait
                        _told(tap, written)
                    pipe_open = await lines.drained()
                if pipe_open and keep is not None:
                    keep(outcome)
            else:
                pipe_open = False
            if not pipe_open:
                if written:  # the lines of the batch that reached the pipe before it closed
                    _told(tap, written)
                if lines.peer_lost:
                    observer.peer_lost()
                    ws.transport.abort()
                    return Ended.SOCKET_CLOSED
                if not after_pipe:
                    return Ended.PIPE_CLOSED
                observer.dropped(outcome)
                continue
        elif isinstance(outcome, Refuse):
            lines.flush()  # the lines before the refused frame go first
            if written:
                _told(tap, written)
            if not await send_reply(outcome.reply):
                observer.frame(outcome)
                return Ended.SOCKET_CLOSED
        elif isinstance(outcome, Close):
            lines.flush()
            if written:
                _told(tap, written)
            await ws.close(outcome.code, outcome.reason)
            observer.frame(outcome)
            return Ended.SOCKET_CLOSED
        observer.frame(outcome)


def _told(tap: Tap | None, written: list[Forward]) -> None:
    """Tell ``tap`` the lines of a batch, then empty the list for the next batch (the tap
    keeps none of it)."""
    assert tap is not None  # lines are kept only for a tap
    tap(written)
    written.clear()


class PeerWatch:
    """Whether the socket's peer is gone, asked while a full pipe stalls the socket's reading.

    It also sends a ping at each check of a stall's first ``PROBE_EARLY_SECONDS``, then
    every ``PROBE_EVERY_SECONDS``: the kernel of a peer that closed its socket answers
    data with a reset, which the next check sees. Without it, a peer whose last frames
    still wait unread (its close stuck behind them) could leave unnoticed until the
    next heartbeat.
    """

    EARLY_CHECKS = round(PROBE_EARLY_SECONDS / PEER_CHECK_SECONDS)
    CHECKS_BETWEEN_PROBES = round(PROBE_EVERY_SECONDS / PEER_CHECK_SECONDS)

    def __init__(self, ws: Connection) -> None:
        self.ws = ws
        self._probes: set[asyncio.Future[Any]] = set()

    def __call__(self, checks: int) -> bool:
        if self.ws.state is State.CLOSED or peer_hung_up(self.ws):
            return True
        if checks <= self.EARLY_CHECKS or checks % self.CHECKS_BETWEEN_PROBES == 0:
            probe = asyncio.ensure_future(self.ws.ping())
            self._probes.add(probe)
            probe.add_done_callback(self._probed)
        return False

    def _probed(self, probe: asyncio.Future[Any]) -> None:
        self._probes.discard(probe)
        if not probe.cancelled():
            probe.exception()  # a closed socket: the pump sees it anyway


async def wait_while_peer_stays(event: asyncio.Event, ws: Connection) -> bool:
    """Wait for ``event``; False if the socket's peer goes first (asked as :class:`PeerWatch`
    asks, since the socket is not being read meanwhile)."""
    watch = PeerWatch(ws)
    checks = 0
    while not event.is_set():
        with suppress(TimeoutError):
            async with asyncio.timeout(PEER_CHECK_SECONDS):
                await event.wait()
        checks += 1
        if not event.is_set() and watch(checks):
            return False
    return True


def peer_hung_up(ws: Connection) -> bool:
    """True when the socket's peer has shut down or reset the connection.

    Asks the kernel directly (poll, no read), so it works while the socket's reading is
    paused and unread data sits before the hang-up.
    """
    sock = ws.transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        fd = sock.fileno()
    except (OSError, ValueError):
        return True
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, _HANG_UP)
    return bool(poller.poll(0))


async def _reply(ws: Connection, reply: bytes) -> bool:
    try:
        await ws.send(reply, text=True)
    except ConnectionClosed:
        return False
    return True
