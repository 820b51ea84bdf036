"""Tests for relay.server.connections.readaside: long lines read in a thread, the collector
paused meanwhile and left as it was found."""

from __future__ import annotations

import asyncio
import gc

from relay.acp.boundary import read_lines
from relay.core import strictjson
from relay.server.connections.readaside import CollectorPause, read_aside

LINES = [b'{"id":1,"params":{"path":"/a"}}', b'{"id":1,"id":2}', b"[" + b"{}," * 1000 + b"{}]"]


async def test_lines_read_aside_are_read_as_in_place() -> None:
    """What read_aside gives is what read_lines gives, refusals included, and the collector
    runs again after it."""
    got = await read_aside(LINES)
    want = read_lines(LINES)
    assert list(got) == list(want)
    assert got[LINES[0]] == want[LINES[0]]
    assert got[LINES[2]] == want[LINES[2]]
    assert isinstance(got[LINES[1]], strictjson.JsonRefused)
    assert str(got[LINES[1]]) == str(want[LINES[1]])
    assert gc.isenabled()


async def test_the_collector_runs_again_once_every_reading_ended() -> None:
    """Two readings at once: the collector stays paused until the last one ends."""
    pause = CollectorPause()
    assert gc.isenabled()
    with pause:
        assert not gc.isenabled()
        with pause:
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    await asyncio.gather(read_aside(LINES), read_aside(LINES))
    assert gc.isenabled()


def test_a_collector_paused_by_someone_else_stays_paused() -> None:
    """A collector disabled before the reading is left disabled after it."""
    gc.disable()
    try:
        with CollectorPause():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_runs_again_after_a_reading_that_failed() -> None:
    """A reading ending in an exception still lets the collector run again."""
    pause = CollectorPause()
    try:
        with pause:
            raise RuntimeError("the read failed")
    except RuntimeError:
        pass
    assert gc.isenabled()
