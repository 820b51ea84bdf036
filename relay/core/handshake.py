"""Is this request a WebSocket upgrade the relay can take? Checked before a ticket is spent.

Pure: header values in, a :class:`Shape` or a refusal (HTTP status, plain-text reason,
headers) out. Admission (:mod:`relay.core.admission`) runs only on a request that passed
here, so a request that could never become a socket (no ``Upgrade``, a bad key, a
subprotocol the relay does not speak, a header given twice) cannot spend a ticket.

Subprotocols: the relay speaks ``acp.v1`` (plain ACP) and, when resuming is on,
``acp-relay.resume.v1``; it selects the resume profile over ``acp.v1`` when both are
offered; a watcher offers ``acp-relay.watch.v1``. ``acp-ticket.<ticket>`` carries a ticket,
so that a browser needs no ticket in its URL; it is never selected, so it must be offered
beside one the relay speaks. What the subprotocol selected makes of the socket is
:class:`relay.core.subprotocols.SocketKind`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from relay.core.admission import Refusal
from relay.core.subprotocols import SocketKind

TICKET_PREFIX = "acp-ticket."
SINGLE_HEADERS = ("Host", "Origin", "Authorization", "Sec-WebSocket-Key", "Upgrade")
MAX_HANDSHAKES = 256  # handshakes in progress at once, all clients together
MAX_HANDSHAKES_PER_ADDRESS = 32  # ... from one client address


@dataclass(frozen=True)
class Shape:
    """A well-formed upgrade: the subprotocols offered and the ticket one of them carried."""

    offered: tuple[str, ...] = ()
    ticket: str | None = None
    select: str | None = None  # the subprotocol the relay will select

    @property
    def kind(self) -> SocketKind:
        """The socket the upgrade makes (:func:`check_upgrade` selects only what the relay
        speaks)."""
        return SocketKind(self.select) if self.select is not None else SocketKind.PLAIN


def header_values(headers: Iterable[tuple[str, str]], name: str) -> list[str]:
    """Every value of header ``name`` (case-insensitive), in order."""
    wanted = name.lower()
    return [value for key, value in headers if key.lower() == wanted]


def duplicated(
    headers: Sequence[tuple[str, str]], names: Sequence[str] = SINGLE_HEADERS
) -> Refusal | None:
    """400 when a header of ``names``, each of which must appear once (Host, Origin,
    Authorization...), is repeated."""
    for name in names:
        if len(header_values(headers, name)) > 1:
            return Refusal(400, f"bad request: the {name} header is given more than once")
    return None


def check_upgrade(
    headers: Sequence[tuple[str, str]], *, speaks: Sequence[SocketKind]
) -> Shape | Refusal:
    """Whether ``headers`` make an upgrade the relay takes; ``speaks`` in order of preference."""
    refused = duplicated(headers) or _upgrade_refusal(headers)
    if refused is not None:
        return refused
    return _subprotocols(headers, speaks)


def _upgrade_refusal(headers: Sequence[tuple[str, str]]) -> Refusal | None:
    upgrade = header_values(headers, "Upgrade")
    connection = ",".join(header_values(headers, "Connection"))
    tokens = {token.strip().lower() for token in connection.split(",")}
    if not upgrade or upgrade[0].strip().lower() != "websocket" or "upgrade" not in tokens:
        return Refusal(
            kind="not_upgrade",
            status=426,
            reason="this ACP endpoint speaks WebSocket only: send GET with Upgrade: websocket "
            "and Connection: Upgrade",
            headers=(("Upgrade", "websocket"),),
        )
    version = header_values(headers, "Sec-WebSocket-Version")
    if [v.strip() for v in version] != ["13"]:
        return Refusal(
            426,
            "unsupported WebSocket version: use 13",
            (("Sec-WebSocket-Version", "13"),),
            kind="not_upgrade",
        )
    key = header_values(headers, "Sec-WebSocket-Key")
    if not key or not _valid_key(key[0]):
        return Refusal(400, "bad request: Sec-WebSocket-Key must be 16 bytes in base64")
    return None


def _valid_key(key: str) -> bool:
    try:
        return len(base64.b64decode(key.strip(), validate=True)) == 16
    except (binascii.Error, ValueError):
        return False


def _subprotocols(
    headers: Sequence[tuple[str, str]], speaks: Sequence[SocketKind]
) -> Shape | Refusal:
    offered = tuple(
        token.strip()
        for value in header_values(headers, "Sec-WebSocket-Protocol")
        for token in value.split(",")
        if token.strip()
    )
    if not offered:
        return Shape()
    tickets = [token[len(TICKET_PREFIX) :] for token in offered if token.startswith(TICKET_PREFIX)]
    if len(tickets) > 1 or (tickets and not tickets[0]):
        return Refusal(400, "bad request: offer at most one acp-ticket.<ticket> subprotocol")
    others = [token for token in offered if not token.startswith(TICKET_PREFIX)]
    select = next((kind.value for kind in speaks if kind.value in others), None)
    if select is None:
        spoken = " or ".join(kind.value for kind in speaks)
        shown = ", ".join(others) if others else "only acp-ticket.<ticket>"
        return Refusal(
            kind="subprotocol",
            status=400,
            reason=f"none of the offered subprotocols ({shown}) is one the relay speaks: offer "
            f"{spoken}, with acp-ticket.<ticket> beside it to carry the ticket",
        )
    return Shape(offered=tuple(others), ticket=tickets[0] if tickets else None, select=select)


@dataclass
class HandshakeGate:
    """Counts handshakes in progress, overall and per client address; refuses past the caps.

    A peer that opens TCP connections and never finishes its HTTP request holds a file
    descriptor each until the open timeout: the caps bound how many it can hold.
    """

    limit: int = MAX_HANDSHAKES
    per_address: int = MAX_HANDSHAKES_PER_ADDRESS
    total: int = 0
    by_address: dict[str, int] = field(default_factory=dict)

    def enter(self, address: str) -> str | None:
        """Count a new handshake from ``address``; why not, if it is over a cap (not counted)."""
        if self.total >= self.limit:
            return f"{self.total} handshakes in progress, the most the relay takes at once"
        if self.by_address.get(address, 0) >= self.per_address:
            return f"{self.per_address} handshakes in progress from {address}"
        self.total += 1
        self.by_address[address] = self.by_address.get(address, 0) + 1
        return None

    def leave(self, address: str) -> None:
        """A counted handshake ended (done, refused or abandoned)."""
        self.total -= 1
        left = self.by_address[address] - 1
        if left:
            self.by_address[address] = left
        else:
            del self.by_address[address]
