"""The two ends of a client's link to the relay, whatever the kind of socket.

A :class:`Link` is what a client drives: its lines out, the relay's lines in, until the
client is done or the link cannot go on. Its kind is the relay's choice of subprotocol,
made once when it is opened (:mod:`relay.client.link.opening`): plain ACP
(:class:`relay.client.link.plain.PlainLink`, the link ends with its socket) or the resume
profile (:class:`relay.client.link.resuming.ResumingLink`, one connection over successive
sockets). A :class:`ClientSide` is what a link needs of the client it serves: ``connect``'s
bridge (the editor's stdio, :mod:`relay.client.editor.bridge`), or a thread of
``acp-relay chat`` (:mod:`relay.client.chatbot.sessionthread`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

from websockets.asyncio.client import ClientConnection

from relay.client.link.dialing import DialConfig
from relay.client.link.editorerrors import Failure
from relay.core.resumeprofile import Welcome
from relay.observe.logs import Logger
from relay.observe.observer import PumpObserver


class Link(Protocol):
    """A client's connection to the relay, over one socket or, resumable, several."""

    async def send_lines(self, lines: Sequence[bytes]) -> None:
        """The client's lines of one read, to the relay in order (each request among them
        noted as awaiting its answer); waits while the link has no room for them."""

    async def run(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> bool:
        """Carry both ways until the client is done (True: the socket was closed with 1000)
        or the link cannot go on (False: the client was told why)."""

    def drop(self) -> None:
        """Let the socket go without a close (a resumable connection waits for its grace)."""


class LineSink(Protocol):
    """Where the relay's lines go, in order: the editor's stdout, or a chat thread."""

    async def write(self, line: bytes) -> bool:
        """Take one line (waiting while the reader lags); False once the reader is gone."""

    def flush(self) -> None:
        """Pass on what :meth:`write` may hold back (the socket went)."""


class ClientSide(Protocol):
    """What a link needs of the client it serves, and no more."""

    @property
    def config(self) -> DialConfig: ...

    @property
    def log(self) -> Logger: ...

    @property
    def observer(self) -> PumpObserver: ...

    def lines_out(self) -> LineSink:
        """Where the relay's lines go, one by one (made once per link)."""

    def note_request(self, line: bytes) -> None:
        """A client line goes to the relay (a request among them awaits its answer)."""

    def ticket_fetched(self, ticket: str) -> None:
        """A ticket was read (it must reach no log line)."""

    def welcomed(self, welcome: Welcome) -> None:
        """The relay welcomed a resume: its secret is the one the next resume presents (the
        relay spends the old one)."""

    async def carry(
        self,
        ws: ClientConnection,
        downstream: Coroutine[Any, Any, bool],
        upstream: asyncio.Task[None],
        stop: asyncio.Event,
    ) -> Failure | None:
        """Carry both ways over ``ws`` until the client is done (None) or the socket is
        lost (why); ``downstream`` brings the relay's lines and is True once the socket
        is gone, ``upstream`` reads the client's."""

    async def fail(self, failure: Failure) -> None:
        """Every client request gets ``failure`` from now on."""

    async def unsent(self, lines: Sequence[bytes]) -> None:
        """Lines the link did not take: it failed while they waited for room."""

    async def client_gone(self, upstream: asyncio.Task[None], stop: asyncio.Event) -> str:
        """While the relay is away: return once the client no longer waits for it (why)."""

    async def answer_owed(self, why: str) -> None:
        """The link ends: every request still owed an answer gets the closing error."""
