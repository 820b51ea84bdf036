"""The bot's process: the Matrix session and the state file opened, the token checked, the
bot run until stopped.

A token the homeserver does not take, or one that is not ``--user``'s, stops the start
with exit status 2 and the fix; a homeserver that cannot be reached is waited for (with
backoff, said in the log).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from contextlib import suppress

from mautrix.errors import MatrixRequestError

from relay.client.chatbot.bot import ChatBot, ChatConfig
from relay.client.chatbot.matrix import MatrixSession, TokenRevoked
from relay.client.chatbot.state import State, StateError
from relay.observe import logs

USAGE = 2
REVOKED = (
    "acp-relay: the homeserver no longer accepts the bot's access token ({}): log the bot "
    "in again and put the new token in --token-file (or $ACP_RELAY_MATRIX_TOKEN)"
)


async def run_chat(config: ChatConfig, on_stop: Callable[[asyncio.Event], None]) -> int:
    """Run the bot until the stop event ``on_stop`` arms is set; the exit status."""
    log = logs.get_logger("relay.chat", user=config.user)
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
            try:
                who = await matrix.whoami()
            except (MatrixRequestError, TokenRevoked) as exc:
                print(f"acp-relay: the homeserver refused the access token ({exc.errcode}): "
                      "give the bot's token in --token-file", file=sys.stderr)  # fmt: skip
                return USAGE
            if who != config.user:
                print(f"acp-relay: the access token is {who}'s, not --user {config.user}'s",
                      file=sys.stderr)  # fmt: skip
                return USAGE
            log.info("chat bot started", rooms=sorted(config.rooms), relay=config.dial.url)
            with suppress(TokenRevoked):
                await ChatBot(config, matrix, state, log).run(stop)
            if matrix.revoked is not None:
                print(REVOKED.format(matrix.revoked.errcode), file=sys.stderr)
                return 1
            log.info("chat bot stopped")
            return 0
    finally:
        state.close()
