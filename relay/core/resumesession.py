"""A resumable connection's session with its client (``acp-relay.resume.v1``), decided here.

Pure, like :mod:`relay.core.lifecycle`: the profile's state of one logical connection
across the sockets that carry it, and what each frame and resume does to it. The I/O layer
(:mod:`relay.server.connections.carriers`) reads frames and sends records; it asks this class
what they mean and carries out the answer. The clock (``now``) and the new secrets come
in as arguments.

Whether a socket is attached, since when the connection is detached and how long it
waits for a resume are the connection's lifecycle's (:mod:`relay.core.lifecycle`); a
session keeps what the profile itself needs:

- the replay window (:class:`relay.core.resumeprofile.Outbox`): the agent's lines not yet
  acknowledged, numbered from 1;
- ``delivered``: the last client message handed to the agent; a message is delivered
  once whatever the client re-sends after a resume;
- ``sent``: the last record sent on the attached socket; ``acked_to_client``: the last
  ``delivered`` the client was told of;
- the *epoch*: which socket is the attached one. A resume fences the socket before it
  (a new epoch); what a fenced socket reports afterwards changes nothing;
- the resume secret, as a digest, replaced at every welcome, spent by a claim, revoked
  when the connection ends.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

from relay.core.resumeprofile import (
    NO_CONNECTION,
    Ack,
    ProfileError,
    Resume,
    Welcome,
    parse_frame,
)
from relay.core.windows import Outbox

Owner = tuple[str, str | None]
"""Whose connection it is: the ticket's subject and audience."""


@dataclass(frozen=True)
class Resumed:
    """A resume accepted: the welcome to send, and what the log line and trace say of it."""

    welcome: Welcome
    epoch: int
    fenced: bool  # a socket was still attached: close it, it is superseded
    replayed: int  # records sent before and not acknowledged: the client gets them again
    resent: int  # messages the client re-sends that the agent never got


@dataclass(frozen=True)
class Refused:
    """A resume that cannot continue the connection, and why (the close reason)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A client message the agent already has (re-sent after a resume): dropped."""

    size: int


@dataclass(frozen=True, slots=True)
class Batch:
    """Records to send: the first one's number, the lines, an acknowledgement riding along."""

    first: int
    lines: list[bytes]
    ack: int | None


def digest(secret: str) -> bytes:
    """What is kept of a resume secret: its SHA-256 (the secret itself is never stored)."""
    return hashlib.sha256(secret.encode()).digest()


class Session:
    """The resume profile's state of one connection: who may resume, what was sent and got."""

    def __init__(self, conn_id: str, owner: Owner, *, grace: float, window: int) -> None:
        self.conn_id = conn_id
        self.owner = owner
        self.grace = grace
        self.outbox = Outbox(window)
        self.epoch = 0  # the attached socket's; each welcome starts a new one
        self.delivered = 0
        self.acked_to_client = 0
        self.sent = 0
        self.ended = False
        self._digest = b""

    # -- sockets -------------------------------------------------------------------------

    def open(self, secret: str) -> tuple[Welcome, int]:
        """The first socket: its welcome (carrying ``secret``) and its epoch."""
        return self._welcome(secret, resumed=False, start=1), self.epoch

    def claim(self, resume: Resume, owner: Owner) -> bool:
        """Whether ``resume``, with a ticket of ``owner``, may take this connection.

        The secret must match and the ticket be the owner's. On success the secret is
        spent at once, so of two sockets resuming together exactly one wins.
        """
        secret_ok = hmac.compare_digest(digest(resume.secret), self._digest)
        if self.ended or owner != self.owner or not secret_ok:
            return False
        self._digest = b""
        return True

    def resume(self, resume: Resume, secret: str, *, attached: bool) -> Resumed | Refused:
        """Continue on a new socket from the client's ``resume`` (already claimed);
        ``attached``: another socket still carries the connection (it is fenced)."""
        problem = self._resume_problem(resume)
        if problem is not None:
            return Refused(problem)
        self.outbox.acknowledge(resume.ack)
        replayed = max(self.sent - resume.ack, 0)
        resent = max(resume.sent - self.delivered, 0)
        welcome = self._welcome(secret, resumed=True, start=resume.ack + 1)
        return Resumed(welcome, self.epoch, attached, replayed, resent)

    def _resume_problem(self, resume: Resume) -> str | None:
        if self.ended:
            return NO_CONNECTION
        outbox = self.outbox
        if resume.ack < outbox.acked or resume.ack >= outbox.next_seq:
            return (
                f"cannot resume: the client has record {resume.ack} and the relay keeps "
                f"{outbox.first_seq} to {outbox.next_seq - 1}"
            )
        if resume.sent < self.delivered:
            return f"cannot resume: the client sent {resume.sent} messages, the agent has more"
        return None

    def _welcome(self, secret: str, *, resumed: bool, start: int) -> Welcome:
        self.epoch += 1
        self._digest = digest(secret)
        self.acked_to_client = self.delivered
        self.sent = start - 1
        return Welcome(
            self.conn_id,
            secret,
            resumed=resumed,
            received=self.delivered,
            next=start,
            grace=self.grace,
            window=self.outbox.limit,
            last=self.outbox.next_seq - 1,
        )

    def end(self) -> None:
        """Nothing may resume this connection any more."""
        self.ended = True
        self._digest = b""

    # -- the client's frames -------------------------------------------------------------

    def take(self, data: bytes) -> bytes | Duplicate | None:
        """A client frame: the message to deliver, a Duplicate, or None (an ack alone).

        Acknowledgements are applied to the window first. ProfileError when a message is
        missing (a gap) or the frame breaks the profile.
        """
        frame = parse_frame(data)
        ack = frame.ack
        if ack is not None and ack >= self.outbox.first_seq:  # an older ack changes nothing
            self.outbox.acknowledge(ack)
        if isinstance(frame, Ack):
            return None
        if frame.seq <= self.delivered:
            return Duplicate(len(frame.message))
        if frame.seq != self.delivered + 1:
            raise ProfileError(f"message {self.delivered + 1} is missing (got {frame.seq})")
        self.delivered = frame.seq
        return frame.message

    # -- records to the client -----------------------------------------------------------

    def batch(self, cursor: int, limit: int) -> Batch:
        """The records from ``cursor`` on (at most ``limit``), with any acknowledgement due."""
        lines = self.outbox.since(cursor, limit)
        first = max(cursor, self.outbox.first_seq)
        ack = None
        if lines and self.delivered > self.acked_to_client:
            ack = self.acked_to_client = self.delivered
        return Batch(first, lines, ack)

    def sent_through(self, epoch: int, last: int) -> None:
        """Socket ``epoch`` sent every record up to ``last`` (a fenced socket's send counts
        for nothing)."""
        if epoch == self.epoch:
            self.sent = last

    def ack_alone(self) -> int | None:
        """An acknowledgement to send on its own (no record to ride on), if one is due."""
        if self.delivered <= self.acked_to_client:
            return None
        self.acked_to_client = self.delivered
        return self.delivered

    def all_sent(self) -> bool:
        """Whether the attached socket was sent every record the window holds."""
        return self.sent >= self.outbox.next_seq - 1

    def keep(self, lines: Sequence[bytes], start: int = 0) -> int:
        """Keep ``lines[start:]`` in the window while it has room; how many were kept."""
        return self.outbox.take(lines, start)
