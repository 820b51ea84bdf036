"""Tests for relay.acp.lineplan: what the boundary looks for in raw lines, per --files policy."""

from __future__ import annotations

import pytest

from relay.acp.crossings import ANSWER_MARKERS, CAPABILITIES
from relay.acp.lineplan import plan_for, seeker
from relay.acp.rewrite import Files


def test_one_plan_per_policy() -> None:
    """Every connection under one policy shares its plan; policies have their own."""
    assert plan_for(Files.BOX) is plan_for(Files.BOX)
    assert plan_for(Files.BOX) is not plan_for(Files.SHARED)


@pytest.mark.parametrize(
    ("files", "must", "may"),
    [
        (Files.BOX, True, True),
        (Files.SHARED, True, True),
        (Files.PASS, False, False),
    ],
)
def test_the_agents_fs_and_terminal_lines_must_be_read_under_box_and_shared(
    files: Files, must: bool, may: bool
) -> None:
    """fs/ and terminal/ are must-read markers of the agent's lines under box and shared
    only; tool-call locations only translated there."""
    plan = plan_for(files)
    assert (b'"fs/' in plan.agent_must, b'"terminal/' in plan.agent_must) == (must, must)
    assert (b'"path"' in plan.agent_may) == may


@pytest.mark.parametrize(
    ("sample", "found"),
    [
        (b'{"method":"fs/read_text_file"}', True),
        (b'{"locations":[{"path":"/w"}]}', True),
        (b'{"text":"see fs/ here"}', False),
        (b'{"sessionUpdate":"agent_message_chunk","content":{"text":"hi"}}', False),
    ],
)
def test_the_agent_search_finds_any_marker(sample: bytes, found: bool) -> None:
    """One search over the line finds any marker of the box policy, and nothing else."""
    seek = plan_for(Files.BOX).agent_seek(pending=False, capabilities=False)
    assert (seek.search(sample) is not None) is found


def test_answers_and_capabilities_are_looked_for_only_while_awaited() -> None:
    """A session/list answer's markers and agentCapabilities join the search only while a
    list is pending and while the capabilities are still to be learnt."""
    plan = plan_for(Files.BOX)
    answer = b'{"id":1,"result":{"sessions":[]}}'
    error = b'{"id":1,"' + ANSWER_MARKERS[0].strip(b'"') + b'":{}}'
    reply = b'{"id":0,"result":{' + CAPABILITIES + b":{}}}"
    quiet = plan.agent_seek(pending=False, capabilities=False)
    assert [quiet.search(x) for x in (answer, error, reply)] == [None, None, None]
    awaiting = plan.agent_seek(pending=True, capabilities=True)
    assert all(awaiting.search(x) is not None for x in (answer, error, reply))
    assert plan.agent_seek(pending=True, capabilities=True) is awaiting  # made once


def test_a_seeker_is_one_pattern_per_set_of_markers() -> None:
    """The same markers, in any order or repeated, give the one compiled search."""
    assert seeker((b'"a"', b'"b"')) is seeker((b'"a"', b'"b"'))
    assert seeker((b"x.y",)).search(b"xzy") is None  # markers are matched literally
