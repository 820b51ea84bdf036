"""End-to-end encryption for the bot: its Olm account and Megolm sessions, kept across
restarts, what is said in an encrypted room decrypted, its own events encrypted.

I/O over mautrix's ``OlmMachine`` (the ``chat-e2ee`` extra: python-olm, aiosqlite,
asyncpg), with its SQLite crypto store and state store in one file of their own beside
the bot's state file (mautrix keeps an open transaction's connection in a context
variable: two files would have a state query run on the other's connection). The file
holds the keys that read the served rooms: it is created 0600 and refused when others
may read it, and its pickle key comes from a file or the environment, never a flag. The
device is the access token's (``whoami``): a crypto file kept for another device (a new
login) is said to be lost, and a new account is made for what comes after; a device whose
keys the homeserver has but the file does not (the file lost) cannot go on: a device's
keys cannot be replaced, so the bot stops, saying to log it in again.

:class:`RoomCrypto` takes each ``/sync`` answer (to-device keys, one-time key counts,
device lists, membership) through mautrix's client, and decrypts a timeline event when
asked; sends are encrypted by mautrix's client itself in a room whose state says so
(reactions excepted, as most clients send them).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, cast

from mautrix.client import Client
from mautrix.client.state_store.asyncpg import PgStateStore
from mautrix.crypto import OlmMachine
from mautrix.crypto.store.asyncpg import PgCryptoStateStore, PgCryptoStore
from mautrix.errors import DecryptionError, SessionNotFound
from mautrix.types import JSON, DeviceID, EncryptedEvent, RoomID, SessionID
from mautrix.util.async_db import Database
from mautrix.util.logging import TraceLogger

from relay.chat.events import events_of, rooms_of
from relay.client.chatbot.matrix import LATER, Later
from relay.client.chatbot.schema import StateError, create_private
from relay.observe.logs import Logger

logging.getLogger("aiosqlite").setLevel(logging.INFO)  # its debug lines carry every query
KEY_WAIT = 10.0  # seconds an event waits for its room key (it comes by to-device, later)


@dataclass
class Opened:
    """The crypto state opened: and whether it was lost (made anew for another device)."""

    crypto: RoomCrypto
    lost: bool


class RoomCrypto:
    """The bot's end-to-end encryption, open."""

    def __init__(self, client: Client, olm: OlmMachine, db: Database, log: Logger) -> None:
        self.client = client
        self.olm = olm
        self.db = db
        self.log = log

    @classmethod
    async def open(
        cls, path: str, pickle_key: str, client: Client, device: str, log: Logger
    ) -> Opened:
        """The crypto file at ``path`` for ``device`` (the token's); StateError saying the
        fix."""
        create_private(path, "--crypto-state", "the keys that read the served rooms")
        db = Database.create(
            f"sqlite:///{path}",
            upgrade_table=PgCryptoStore.upgrade_table,
            log=_trace_logger("mau.acp-relay.crypto-db"),
        )
        await db.start()
        await PgStateStore.upgrade_table.upgrade(db)
        store = PgCryptoStore(str(client.mxid), pickle_key, db)
        state = PgCryptoStateStore(db)
        kept = await store.get_device_id()
        lost = bool(kept) and kept != device
        if lost:
            await store.delete()  # keys of another device: useless to this one
        client.device_id = DeviceID(device)
        client.state_store = state
        # mautrix logs with .trace and .silly, which only its own logger class has
        client.log = _trace_logger("mau.client")
        client.crypto_log = _trace_logger("mau.client.crypto")
        olm = OlmMachine(client, store, state, log=_trace_logger("mau.crypto"))
        if await store.get_account() is None and await _published(client, device):
            await db.stop()
            raise StateError(
                f"--crypto-state {path} holds no keys for the device {device}, whose keys the "
                "homeserver has: they were lost, and what they read cannot be read again. Log "
                "the bot in again (a new device) and put its token in --token-file"
            )
        await olm.load()
        await store.put_device_id(DeviceID(device))
        if olm.account is not None and not olm.account.shared:
            await olm.share_keys()
        client.crypto = olm
        return Opened(cls(client, olm, db, log), lost)

    async def close(self) -> None:
        """The database stopped (else its thread keeps the process alive)."""
        await self.db.stop()

    async def sync(self, answer: dict[str, Any]) -> None:
        """A ``/sync`` answer's keys, counts, device lists and membership taken in (its
        timeline is the bot's to act on, each event decrypted by :meth:`decrypt`)."""
        bookkeeping = {k: v for k, v in answer.items() if k != "rooms"}
        bookkeeping["rooms"] = {
            "join": {
                room: {
                    "state": data.get("state", {}),
                    "timeline": {
                        "events": [e for e in events_of(data.get("timeline")) if "state_key" in e]
                    },
                }
                for room, data in rooms_of(answer, "join").items()
            }
        }
        tasks = self.client.handle_sync(cast(JSON, bookkeeping))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for failed in (r for r in results if isinstance(r, Exception)):
            self.log.warning("a key exchange step failed", reason=type(failed).__name__)

    async def decrypt(self, room: str, event: dict[str, Any]) -> dict[str, Any] | Later | None:
        """The event decrypted (its type and content the sender's; its id, sender and time
        kept); :data:`LATER` when its room key has not come yet (:meth:`decrypt_later`);
        None when it cannot be."""
        encrypted = _encrypted(room, event)
        if encrypted is None:
            return None
        try:
            return _as_dict(await self.olm.decrypt_megolm_event(encrypted), event)
        except SessionNotFound:
            return LATER
        except DecryptionError as exc:
            self.log.warning(
                "an event could not be decrypted",
                event_id=event.get("event_id"),
                reason=type(exc).__name__,
            )
            return None

    async def decrypt_later(self, room: str, event: dict[str, Any]) -> dict[str, Any] | None:
        """The event decrypted once its room key came (to-device, in a later sync), waited
        for :data:`KEY_WAIT` seconds at most; None when it did not come."""
        encrypted = _encrypted(room, event)
        if encrypted is None:
            return None
        session = SessionID(str(encrypted.content.session_id))
        if await self.olm.wait_for_session(RoomID(room), session, timeout=KEY_WAIT):
            found = await self.decrypt(room, event)
            if isinstance(found, dict):
                return found
        self.log.warning("no room key for an event", event_id=event.get("event_id"))
        return None


def _encrypted(room: str, event: dict[str, Any]) -> EncryptedEvent | None:
    try:
        return EncryptedEvent.deserialize(cast(JSON, {**event, "room_id": room}))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


async def _published(client: Client, device: str) -> bool:
    """Whether the homeserver has identity keys for ``device`` (made by a crypto state that
    is not this one: a device's keys cannot be replaced)."""
    answer = await client.query_keys({client.mxid: [DeviceID(device)]})
    return bool(answer.device_keys.get(client.mxid, {}).get(DeviceID(device)))


def _trace_logger(name: str) -> TraceLogger:
    """A logger of mautrix's class, which its database asks for (the process's logger class
    is not mautrix's once the logs are set up), passing its lines up to mautrix's."""
    logger = TraceLogger(name)
    logger.parent = logging.getLogger("mau")
    return logger


def _as_dict(decrypted: Any, original: dict[str, Any]) -> dict[str, Any]:
    served = decrypted.serialize()
    return {**original, "type": served.get("type"), "content": served.get("content", {})}
