"""relay.commands.serve: what serve checks of its own install at start-up (its runs, flags and
answers are tests/commands/test_commands.py's and the server's tests')."""

from __future__ import annotations

import websockets.frames
import websockets.speedups

from relay.commands.serve import websockets_speedups


def test_the_install_has_websockets_c_speedups_and_serve_finds_them() -> None:
    """The project's install brings websockets' C extension, and frames are unmasked by it:
    serve warns at start-up only when it is missing."""
    assert websockets_speedups()
    assert websockets.frames.apply_mask is websockets.speedups.apply_mask  # type: ignore[attr-defined]
