"""The bot's Matrix session: sync, send, react, join, read power levels (mautrix underneath).

Thin I/O over :mod:`mautrix`'s ``ClientAPI``. Every send honours the homeserver: a
``429 M_LIMIT_EXCEEDED`` holds the bot's sends until its ``retry_after_ms``
(:class:`relay.chat.pacing.Hold`, shared by every thread) and the send is tried again;
a homeserver that cannot be reached is tried again with backoff, said in the log once
per outage. Transaction ids are the caller's, so that a send retried after a restart
is the same event to the homeserver. The access token never reaches a log line: it is
the redactor's from the start, and mautrix's request lines are kept at INFO.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, TypeVar, cast
from urllib.parse import quote

import aiohttp
from mautrix.api import HTTPAPI, Method, Path
from mautrix.client import Client
from mautrix.errors import (
    MatrixConnectionError,
    MatrixInvalidToken,
    MatrixRequestError,
    MLimitExceeded,
)
from mautrix.types import EventContent, EventType, RoomID, Serializable, SyncToken, UserID

from relay.chat.pacing import Hold
from relay.observe.logs import Logger

T = TypeVar("T")
BACKOFF_FIRST = 0.5  # seconds before the first retry of an unreachable homeserver
BACKOFF_MAX = 30.0
SYNC_TIMEOUT_MS = 25_000  # the long poll's wait on the homeserver
REQUEST_TIMEOUT = 60.0  # seconds for any one request (a sync's wait included)
logging.getLogger("mau").setLevel(logging.INFO)  # its debug lines carry every request's body


class Unreachable(Exception):
    """The homeserver could not be reached (its words)."""


class Later:
    """An encrypted event whose room key has not come yet (it comes by to-device, in a
    later sync: the event is decrypted then, the sync loop not held)."""


LATER = Later()


class MediaRefused(Exception):
    """A file could not be had from the homeserver (why, for the thread)."""


async def opened_file(data: bytes, sealed: tuple[str, str, str]) -> bytes:
    """A file of an encrypted room opened with its key (the chat-e2ee extra's AES), off the
    event loop; MediaRefused when it does not open (a hash or a key that does not match)."""
    try:
        from mautrix.crypto.attachments import decrypt_attachment
        from mautrix.errors import DecryptionError
    except ImportError:  # an encrypted room's file reached a bot without the extra
        raise MediaRefused("an encrypted file, and the bot has no chat-e2ee extra") from None
    key, sha256, iv = sealed
    try:
        return await asyncio.to_thread(decrypt_attachment, data, key, sha256, iv)
    except DecryptionError as exc:
        raise MediaRefused(f"the encrypted file does not open ({exc})") from None


class TokenRevoked(Exception):
    """The homeserver no longer accepts the bot's access token: the bot stops."""

    def __init__(self, errcode: str) -> None:
        super().__init__(errcode)
        self.errcode = errcode


class MatrixSession:
    """The bot's one session with its homeserver."""

    def __init__(
        self,
        homeserver: str,
        user: str,
        token: str,
        log: Logger,
        on_revoked: Callable[[], None] = lambda: None,
    ) -> None:
        self.homeserver = homeserver
        self.user = user
        self.log = log
        self.revoked: TokenRevoked | None = None  # the token stopped working: why
        self._on_revoked = on_revoked
        self.hold = Hold()
        self._token = token
        self._http: aiohttp.ClientSession | None = None
        self.api: Client | None = None  # encrypts in encrypted rooms once given its crypto
        self.device = ""  # the access token's device (whoami)
        self._down_since: float | None = None
        self._rng = random.Random()

    async def __aenter__(self) -> MatrixSession:
        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(self._answered)
        self._http = aiohttp.ClientSession(
            trace_configs=[trace], timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        )
        http = HTTPAPI(self.homeserver, self._token, client_session=self._http)
        self.api = Client(UserID(self.user), api=http)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def _answered(
        self, _session: aiohttp.ClientSession, _context: SimpleNamespace, params: Any
    ) -> None:
        """Every answer: a 429's retry_after_ms becomes the bot's hold on sending."""
        response = params.response
        if response.status != 429:
            return
        retry: int | None = None
        try:
            body = json.loads(await response.read())
            value = body.get("retry_after_ms") if isinstance(body, dict) else None
            retry = value if isinstance(value, int) else None
        except (ValueError, aiohttp.ClientError):
            pass
        until = self.hold.limited(time.monotonic(), retry)
        self.log.info(
            "rate-limited by the homeserver",
            retry_after_ms=retry,
            holding_seconds=round(until - time.monotonic(), 3),
        )

    # -- requests, retried --------------------------------------------------------------

    async def _retried(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call`` until it answers: after the hold of a 429, with backoff while the
        homeserver cannot be reached (said once per outage, and when it is back)."""
        backoff = BACKOFF_FIRST
        while True:
            wait = self.hold.until - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                result = await call()
            except MLimitExceeded:
                continue  # the hold is set by _answered
            except (MatrixConnectionError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                self._unreachable(what, exc, backoff)
                await asyncio.sleep(backoff * (0.5 + self._rng.random()))
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            except MatrixInvalidToken as exc:
                self.revoked = TokenRevoked(exc.errcode or "M_UNKNOWN_TOKEN")
                self._on_revoked()
                raise self.revoked from None
            except MatrixRequestError as exc:
                if exc.http_status not in (502, 503, 504):
                    raise
                self._unreachable(what, exc, backoff)
                await asyncio.sleep(backoff * (0.5 + self._rng.random()))
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            if self._down_since is not None:
                self.log.warning(
                    "homeserver reachable again",
                    homeserver=self.homeserver,
                    down_seconds=round(time.monotonic() - self._down_since, 1),
                )
                self._down_since = None
            return result

    def _unreachable(self, what: str, exc: BaseException, backoff: float) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            self.log.warning(
                "homeserver unreachable: retrying with backoff",
                request=what,
                homeserver=self.homeserver,
                reason=str(exc)[:200] or type(exc).__name__,
                first_retry_seconds=backoff,
            )
        else:
            self.log.info(
                "homeserver still unreachable", request=what, next_retry_seconds=round(backoff, 2)
            )

    def _client(self) -> Client:
        assert self.api is not None, "use MatrixSession as an async context manager"
        return self.api

    # -- what the bot does ------------------------------------------------------------------

    async def first_contact(self, seconds: float) -> str:
        """The user the token belongs to, asked within ``seconds`` (TimeoutError after):
        :class:`Unreachable` with what happened when the homeserver cannot be reached or is
        not a Matrix homeserver; MatrixRequestError when it does not take the token."""
        async with asyncio.timeout(seconds):
            try:
                await self._versions()
                answer = await self._client().whoami()
            except (MatrixConnectionError, aiohttp.ClientError, OSError) as exc:
                if isinstance(exc, TimeoutError):
                    raise
                raise Unreachable(str(exc)[:200] or type(exc).__name__) from None
        self.device = str(answer.device_id or "")
        return str(answer.user_id)

    async def _versions(self) -> None:
        """``/_matrix/client/versions``, which every Matrix homeserver answers without a
        token: anything else is not one (a wrong port, the relay itself, a web site)."""
        assert self._http is not None
        url = f"{self.homeserver}/_matrix/client/versions"
        async with self._http.get(url) as response:
            body = await response.read()
        try:
            versions = json.loads(body).get("versions")
        except (ValueError, AttributeError):
            versions = None
        if response.status != 200 or not isinstance(versions, list):
            raise Unreachable(
                f"not a Matrix homeserver: {url} answered HTTP {response.status} "
                f"({response.content_type or 'no content type'}) instead of its versions"
            )

    async def sync(self, since: str | None, timeout_ms: int | None = None) -> dict[str, Any]:
        client = self._client()
        timeout_ms = SYNC_TIMEOUT_MS if timeout_ms is None else timeout_ms
        token = SyncToken(since) if since else None
        answer = await self._retried("sync", lambda: client.sync(since=token, timeout=timeout_ms))
        return answer if isinstance(answer, dict) else {}

    async def send(self, room: str, kind: str, content: dict[str, Any], txn: str) -> str:
        """Send an event (``txn``: its transaction id, the same on a retry); its event id."""
        client = self._client()
        event_type = EventType.find(kind, EventType.Class.MESSAGE)
        sent = await self._retried(
            "send",
            lambda: client.send_message_event(
                RoomID(room), event_type, cast(EventContent, content), txn_id=txn
            ),
        )
        return str(sent)

    async def send_or_log(
        self, room: str, kind: str, content: dict[str, Any], txn: str, **where: str
    ) -> str | None:
        """:meth:`send`, a refusal of the homeserver's (a 4xx: the bot may no longer post
        there, the event is refused...) logged with ``where`` it was meant to go: it costs
        that message, never the bot. None then."""
        try:
            return await self.send(room, kind, content, txn)
        except MatrixRequestError as exc:
            self.refused("the homeserver refused a message", exc, room=room, **where)
            return None

    def refused(self, what: str, exc: MatrixRequestError, **where: str) -> None:
        """One error line for a request the homeserver refused."""
        self.log.error(
            what,
            errcode=exc.errcode or "",
            status=exc.http_status,
            reason=str(exc.message or exc)[:200],
            **where,
        )

    async def join(self, room: str) -> None:
        client = self._client()
        await self._retried("join", lambda: client.join_room_by_id(RoomID(room)))

    async def joined_rooms(self) -> set[str]:
        """The rooms the bot is a member of."""
        rooms = await self._retried("joined rooms", self._client().get_joined_rooms)
        return {str(room) for room in rooms}

    async def download(self, server: str, media_id: str, limit: int) -> bytes:
        """A file of the homeserver's media (authenticated download, the bot's token), read
        up to ``limit`` bytes; MediaRefused saying why it cannot be had."""
        assert self._http is not None
        url = (
            f"{self.homeserver}/_matrix/client/v1/media/download/{quote(server, safe='')}/"
            f"{quote(media_id, safe='')}"
        )
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with self._http.get(url, headers=headers, allow_redirects=False) as response:
                if response.status != 200:
                    raise MediaRefused(f"the homeserver answered {response.status}")
                data = bytearray()
                while len(data) <= limit:
                    more = await response.content.read(limit + 1 - len(data))
                    if not more:
                        break
                    data += more
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise MediaRefused(f"the download failed ({type(exc).__name__})") from None
        if len(data) > limit:
            raise MediaRefused(f"over --max-attachment-bytes ({limit:,} bytes)")
        return bytes(data)

    async def joined_members(self, room: str) -> list[str]:
        """The room's joined members' user ids (empty if they cannot be read: a request then
        mentions its approvers listed by id only)."""
        client = self._client()
        try:
            members = await self._retried(
                "joined members", lambda: client.get_joined_members(RoomID(room))
            )
        except MatrixRequestError as exc:
            self.refused("the room's members could not be read", exc, room=room)
            return []
        return sorted(str(user) for user in members)

    async def power_levels(self, room: str, at: str | None = None) -> dict[str, Any] | None:
        """The room's ``m.room.power_levels`` content, now or as it was at the event ``at``
        (None if it cannot be read)."""
        client = self._client()
        try:
            if at is not None:
                return await self._power_levels_at(room, at)
            content = await self._retried(
                "power levels",
                lambda: client.get_state_event(RoomID(room), EventType.ROOM_POWER_LEVELS),
            )
        except MatrixRequestError:
            return None
        serialized = content.serialize() if isinstance(content, Serializable) else content
        return serialized if isinstance(serialized, dict) else None

    async def _power_levels_at(self, room: str, event_id: str) -> dict[str, Any] | None:
        """The power levels in the room's state at ``event_id`` (its context's state)."""
        api = self._client().api
        path = Path.v3.rooms[room].context[event_id]
        answer = await self._retried(
            "power levels", lambda: api.request(Method.GET, path, query_params={"limit": "0"})
        )
        state = answer.get("state") if isinstance(answer, dict) else None
        for event in state if isinstance(state, list) else []:
            if (
                isinstance(event, dict)
                and event.get("type") == "m.room.power_levels"
                and event.get("state_key") == ""
                and isinstance(event.get("content"), dict)
            ):
                return dict(event["content"])
        return None
