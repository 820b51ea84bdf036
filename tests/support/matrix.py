"""A person in a Matrix room, for the chat's tests: a client-library session (mautrix) that
creates rooms, says things, reacts, and reads a thread as a Matrix client shows it.

:class:`Person` syncs in the background and keeps every timeline event of its rooms;
:meth:`Person.thread` applies the edits (the latest ``m.replace`` by the original
sender) and gathers the reactions, so a test reads what a person sees.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import aiohttp
from mautrix.api import HTTPAPI
from mautrix.client import Client, ClientAPI
from mautrix.types import EventType, RoomID, SyncToken, UserID

from tests.support.synapse import Account, Homeserver
from tests.support.waiting import until

SYNC_MS = 500  # each long poll of a person's background sync
logging.getLogger("mau").setLevel(logging.INFO)  # its debug lines carry every request


@dataclass
class Seen:
    """One message of a thread as a client shows it: its latest text, and its reactions."""

    event_id: str
    sender: str
    body: str
    html: str | None
    msgtype: str
    edits: int
    reactions: dict[str, set[str]] = field(default_factory=dict)  # key -> senders
    ts: int = 0


def has(thread: list[Seen], *texts: str) -> bool:
    """Every text is in some message of the thread."""
    return all(any(text in seen.body for seen in thread) for text in texts)


@dataclass
class Person:
    """A logged-in user: a ClientAPI and everything its sync has seen."""

    account: Account
    api: ClientAPI
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by room
    crypto: Any = None  # a RoomCrypto: this person's client encrypts, as Element does
    raw: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # as synced, by room

    @property
    def user_id(self) -> str:
        return self.account.user_id

    async def create_room(
        self, invite: list[str], *, power: dict[str, int] | None = None, encrypted: bool = False
    ) -> str:
        """A private room with ``invite`` invited (and given ``power`` levels)."""
        state: list[dict[str, Any]] = []
        if encrypted:
            state.append({"type": "m.room.encryption", "state_key": "",
                          "content": {"algorithm": "m.megolm.v1.aes-sha2"}})  # fmt: skip
        override = None
        if power is not None:
            override = {"users": {self.user_id: 100, **power}}
        room = await self.api.create_room(
            invitees=[UserID(user) for user in invite],
            initial_state=cast(Any, state),
            power_level_override=cast(Any, override),
        )
        self.events.setdefault(room, [])
        return str(room)

    async def set_power(self, room: str, user: str, level: int) -> None:
        """Set ``user``'s power level in ``room`` (this person must be allowed to)."""
        content = await self.api.get_state_event(RoomID(room), EventType.ROOM_POWER_LEVELS)
        levels = cast(dict[str, Any], content.serialize())
        levels.setdefault("users", {})[user] = level
        await self.api.send_state_event(
            RoomID(room), EventType.ROOM_POWER_LEVELS, cast(Any, levels)
        )

    async def join(self, room: str) -> None:
        await self.api.join_room_by_id(RoomID(room))
        self.events.setdefault(room, [])

    async def say(
        self, room: str, body: str, *, thread: str | None = None, mentions: list[str] | None = None
    ) -> str:
        """Send a text message (in a thread when given); its event id."""
        content: dict[str, Any] = {"msgtype": "m.text", "body": body}
        if mentions is not None:
            content["m.mentions"] = {"user_ids": mentions}
        if thread is not None:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread,
                                       "is_falling_back": True,
                                       "m.in_reply_to": {"event_id": thread}}  # fmt: skip
        sent = await self.api.send_message_event(
            RoomID(room), EventType.ROOM_MESSAGE, cast(Any, content)
        )
        return str(sent)

    async def send_file(
        self, room: str, data: bytes, *, mimetype: str, name: str, msgtype: str, thread: str
    ) -> str:
        """Upload ``data`` and send it in ``thread`` as ``msgtype`` (m.image, m.file); its
        event id. A person whose client encrypts uploads it encrypted (the event's ``file``)."""
        where: dict[str, Any] = {}
        if self.crypto is not None:
            from mautrix.crypto.attachments import encrypt_attachment

            data, sealed = encrypt_attachment(data)
            url = await self.api.upload_media(data, mime_type="application/octet-stream")
            sealed.url = url
            where["file"] = sealed.serialize()
        else:
            url = await self.api.upload_media(data, mime_type=mimetype, filename=name)
            where["url"] = str(url)
        content: dict[str, Any] = {
            "msgtype": msgtype, "body": name, **where,
            "info": {"mimetype": mimetype, "size": len(data)},
            "m.relates_to": {"rel_type": "m.thread", "event_id": thread, "is_falling_back": True,
                             "m.in_reply_to": {"event_id": thread}},
        }  # fmt: skip
        sent = await self.api.send_message_event(
            RoomID(room), EventType.ROOM_MESSAGE, cast(Any, content)
        )
        return str(sent)

    async def react(self, room: str, target: str, key: str, *, encrypted: bool = False) -> str:
        """A reaction: unencrypted, as most clients send them, or ``encrypted`` (some do)."""
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": key}}
        if encrypted:
            api = cast(Client, self.api)
            sealed = await api.encrypt(RoomID(room), EventType.REACTION, cast(Any, content))
            sent = await api.send_message_event(
                RoomID(room), EventType.ROOM_ENCRYPTED, cast(Any, sealed), disable_encryption=True
            )
            return str(sent)
        sent = await self.api.send_message_event(
            RoomID(room), EventType.REACTION, cast(Any, content)
        )
        return str(sent)

    def thread(self, room: str, root: str) -> list[Seen]:
        """The thread of ``root`` as a client shows it: each message once, edits applied, in
        order, with the reactions on each."""
        events = self.events.get(room, [])
        seen: dict[str, Seen] = {}
        for event in events:
            content = event.get("content", {})
            relates = content.get("m.relates_to") or {}
            if event.get("type") != "m.room.message" or "m.new_content" in content:
                continue
            if relates.get("rel_type") == "m.thread" and relates.get("event_id") == root:
                seen[event["event_id"]] = Seen(
                    event["event_id"], event["sender"], content.get("body", ""),
                    content.get("formatted_body"), content.get("msgtype", ""), 0,
                    ts=event.get("origin_server_ts", 0),
                )  # fmt: skip
        for event in events:
            content = event.get("content", {})
            relates = content.get("m.relates_to") or {}
            target = seen.get(relates.get("event_id", ""))
            if target is None:
                continue
            if relates.get("rel_type") == "m.replace" and event["sender"] == target.sender:
                new = content.get("m.new_content", {})
                target.body, target.html = new.get("body", ""), new.get("formatted_body")
                target.edits += 1
            elif relates.get("rel_type") == "m.annotation" and event.get("type") == "m.reaction":
                target.reactions.setdefault(relates.get("key", ""), set()).add(event["sender"])
        return list(seen.values())

    def event(self, room: str, event_id: str) -> Seen:
        """One message of the room as sent (its root, say)."""
        for event in self.events.get(room, []):
            if event.get("event_id") == event_id:
                content = event.get("content", {})
                return Seen(event_id, event["sender"], content.get("body", ""),
                            content.get("formatted_body"), content.get("msgtype", ""), 0,
                            ts=event.get("origin_server_ts", 0))  # fmt: skip
        raise KeyError(event_id)

    def bodies(self, room: str, root: str) -> list[str]:
        return [each.body for each in self.thread(room, root)]

    async def until_thread(
        self, room: str, root: str, check: Callable[[list[Seen]], bool], seconds: float = 20
    ) -> list[Seen]:
        """Until the thread as shown satisfies ``check``; the thread."""
        await until(
            lambda: check(self.thread(room, root)),
            seconds=seconds,
            what=lambda: f"the thread of {root}: {self.bodies(room, root)}",
        )
        return self.thread(room, root)

    def raw_events(self, room: str) -> list[dict[str, Any]]:
        """The room's events as the homeserver sent them (encrypted ones undecrypted)."""
        return list(self.raw.get(room, []))

    def room_messages(self, room: str) -> list[dict[str, Any]]:
        return [e for e in self.events.get(room, []) if e.get("type") == "m.room.message"]

    async def _sync(self) -> None:
        token: str | None = None
        while True:
            try:
                answer = await self.api.sync(
                    since=SyncToken(token) if token else None, timeout=SYNC_MS
                )
            except (aiohttp.ClientError, OSError):
                await asyncio.sleep(0.2)
                continue
            except Exception:
                await asyncio.sleep(0.2)
                continue
            token = answer.get("next_batch", token)
            if self.crypto is not None:
                await self.crypto.sync(answer)
            for room, joined in answer.get("rooms", {}).get("join", {}).items():
                for event in joined.get("timeline", {}).get("events", []):
                    self.raw.setdefault(room, []).append(event)
                    self.events.setdefault(room, []).append(await self._readable(room, event))

    async def _readable(self, room: str, event: dict[str, Any]) -> dict[str, Any]:
        """The event as this person's client shows it: decrypted when it can be."""
        if self.crypto is None or event.get("type") != "m.room.encrypted":
            return event
        found = await self.crypto.decrypt(room, event)
        if not isinstance(found, dict):
            found = await self.crypto.decrypt_later(room, event)
        return found if isinstance(found, dict) else event


@asynccontextmanager
async def person(
    server: Homeserver, account: Account, *, keys: Path | None = None
) -> AsyncIterator[Person]:
    """``account`` logged in, syncing in the background for the block; with ``keys`` (a
    file for its crypto state), its client encrypts and decrypts as the bot's does."""
    async with aiohttp.ClientSession() as session:
        http = HTTPAPI(server.url, account.token, client_session=session)
        api = Client(UserID(account.user_id), api=http)
        who = Person(account, api)
        if keys is not None:
            from relay.client.chatbot.crypto import RoomCrypto
            from relay.observe import logs

            device = str((await api.whoami()).device_id)
            log = logs.get_logger("test.person", user=account.user_id)
            opened = await RoomCrypto.open(str(keys), "test-pickle-key", api, device, log)
            who.crypto = opened.crypto
        syncing = asyncio.create_task(who._sync())
        try:
            yield who
        finally:
            syncing.cancel()
            with suppress(asyncio.CancelledError):
                await syncing
            if who.crypto is not None:
                await who.crypto.close()
