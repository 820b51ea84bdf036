"""relay.client.chatbot.keptlink: a thread without a link keeps its decisions and sends nothing.

(The open link, :class:`relay.client.chatbot.keptlink.KeptLink`, is driven end to end by
the bot's restart tests, ``tests/client/chatbot/test_restarts.py``.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from relay.client.chatbot.keptlink import Unlinked
from relay.client.chatbot.store import State, ThreadKind


async def test_a_thread_without_a_link_keeps_a_decision_once_and_sends_nothing(
    tmp_path: Path,
) -> None:
    """Unlinked: a keycap's decision is kept once with no line to send; lines, checkpoints
    and the socket's drop do nothing; there is nothing to carry."""
    state = State(str(tmp_path / "chat.sqlite"))
    try:
        state.add_thread("$root", "!r", ThreadKind.SESSION, "ws://x/acp", 1.0)
        state.request_shown("$root", "$req", {"id": '"perm-1"'})
        unlinked = Unlinked(state)
        assert await unlinked.answer(b'{"answer":1}', "$req", "allow") is True
        assert await unlinked.answer(b'{"answer":2}', "$req", "reject") is False
        await unlinked.send([b'{"line":1}'])
        unlinked.checkpoint({"view": []})
        unlinked.drop()
        assert await unlinked.run(asyncio.create_task(asyncio.sleep(0)), asyncio.Event()) is False
        assert state.unacknowledged("$root", 0) == []
        assert state.pending_requests("$root") == []
    finally:
        state.close()
