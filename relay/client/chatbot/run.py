"""The bot's process: the Matrix session and the state file opened, the token checked, the
bot run until stopped.

The first contact is bounded by ``--open-timeout``: a homeserver that cannot be reached,
is not a Matrix homeserver, does not take the token, or whose token is not ``--user``'s,
stops the start with one line and exit status 2, as does a ``--room`` the bot is not in
and cannot join (a typo, or no invitation). A stop signal ends the start at any point.
Once running, an outage is waited for (with backoff, said in the log).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING

from mautrix.errors import MatrixRequestError

from relay.client.chatbot.bot import ChatBot, unless
from relay.client.chatbot.botconfig import ChatConfig
from relay.client.chatbot.matrix import MatrixSession, TokenRevoked, Unreachable
from relay.client.chatbot.store import State, StateError

if TYPE_CHECKING:
    from relay.client.chatbot.crypto import Opened
from relay.observe import logs
from relay.observe.logs import Logger

USAGE = 2
REVOKED = (
    "acp-relay: the homeserver no longer accepts the bot's access token ({}): log the bot "
    "in again and put the new token in --token-file (or $ACP_RELAY_MATRIX_TOKEN)"
)


async def run_chat(config: ChatConfig, on_stop: Callable[[asyncio.Event], None]) -> int:
    """Run the bot until the stop event ``on_stop`` arms is set; the exit status."""
    log = logs.get_logger("relay.chat", user=config.user)
    started_ms = int(time.time() * 1000)  # before any room is joined: see ChatBot.run
    try:
        state = State(config.state)
    except StateError as exc:
        print(f"acp-relay: {exc}", file=sys.stderr)
        return USAGE
    stop = asyncio.Event()
    on_stop(stop)
    try:
        matrix = MatrixSession(config.homeserver, config.user, config.token, log, stop.set)
        async with matrix:
            started = await unless(_contact(config, matrix, log), stop)
            if started is None:
                return 0  # stopped while starting
            if started != 0:
                return int(started)
            # The device's keys are published before any room is joined: a member's client
            # shares its room key with the devices it knows when it speaks.
            crypto = await _crypto(config, matrix, log)
            if isinstance(crypto, int):
                return crypto
            joined = await unless(_join(config, matrix, log), stop)
            if joined is None or joined != 0:
                if crypto is not None:
                    await crypto.crypto.close()
                return 0 if joined is None else int(joined)
            log.info(
                "chat bot started",
                rooms=sorted(config.rooms),
                relay=config.dial.url,
                encrypted_rooms=crypto is not None,
            )
            bot = ChatBot(config, matrix, state, log)
            bot.crypto = crypto.crypto if crypto is not None else None
            try:
                with suppress(TokenRevoked):
                    await bot.run(stop, started_ms, lost_keys=crypto is not None and crypto.lost)
            finally:
                if crypto is not None:
                    await crypto.crypto.close()
            if matrix.revoked is not None:
                print(REVOKED.format(matrix.revoked.errcode), file=sys.stderr)
                return 1
            log.info("chat bot stopped")
            return 0
    finally:
        state.close()


async def _contact(config: ChatConfig, matrix: MatrixSession, log: Logger) -> int:
    """The first contact (bounded by --open-timeout), the token checked; 0, or the exit
    status after saying what is wrong."""
    seconds, where = config.dial.open_timeout, config.homeserver
    log.info("contacting the homeserver", homeserver=where, open_timeout=seconds)
    try:
        who = await matrix.first_contact(seconds)
    except TimeoutError:
        return _fail(f"the homeserver {where} did not answer within {seconds:g} s (--open-timeout)")
    except Unreachable as exc:
        return _fail(f"cannot use the homeserver {where}: {exc}")
    except MatrixRequestError as exc:
        return _fail(
            f"the homeserver refused the access token ({exc.errcode}): "
            "give the bot's token in --token-file"
        )
    if who != config.user:
        return _fail(f"the access token is {who}'s, not --user {config.user}'s")
    return 0


async def _join(config: ChatConfig, matrix: MatrixSession, log: Logger) -> int:
    """The served rooms joined (an invitation an earlier run saw and ignored); 0, or the
    exit status after saying which cannot be."""
    joined = await matrix.joined_rooms()
    for room in sorted(config.rooms - joined):
        try:
            await matrix.join(room)  # an invitation an earlier run saw and ignored
        except MatrixRequestError as exc:
            log.error("a served room cannot be joined", room=room, errcode=exc.errcode or "")
            return _fail(
                f"--room {room}: the bot is not in this room and cannot join it "
                f"({exc.errcode or exc.http_status}): invite {config.user} to it "
                "first, or check the room id"
            )
        # Said once joined: what is said in the room from then on is served.
        log.info("invited to a served room: joining", room=room, at_start=True)
        log.info("joined a served room at start", room=room)
    return 0


async def _crypto(config: ChatConfig, matrix: MatrixSession, log: Logger) -> Opened | int | None:
    """The bot's end-to-end encryption opened (None: not asked for, no pickle key), or the
    exit status after saying what is wrong."""
    if config.pickle_key is None:
        return None
    from relay.client.chatbot.crypto import RoomCrypto  # the chat-e2ee extra's libraries

    assert matrix.api is not None
    if not matrix.device:
        return _fail(
            "the access token has no device (an admin API login?): encrypted rooms "
            "need the token of a login, which makes a device"
        )
    try:
        opened = await RoomCrypto.open(
            config.crypto_state, config.pickle_key, matrix.api, matrix.device, log
        )
    except StateError as exc:
        return _fail(str(exc))
    if opened.lost:
        log.warning(
            "the crypto state was for another device: new keys from now on", device=matrix.device
        )
    log.info("end-to-end encryption ready", device=matrix.device)
    return opened


def _fail(words: str) -> int:
    print(f"acp-relay: {words}", file=sys.stderr)
    return USAGE
