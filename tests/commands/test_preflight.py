"""Tests for relay.commands.preflight: the files and folders flags name, checked at start-up."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

import pytest

from relay.commands.preflight import (
    Kind,
    agent_account,
    check_account_reaches,
    check_agent_program,
    check_workspace,
    demo_sdk_installed,
    first_blocked,
    load_secrets,
    private_directory,
    program_problem,
    shared_directory_problem,
    state_directory,
)
from relay.config.account import Account
from relay.config.errors import UsageError


def test_a_private_directory_is_made_with_mode_0700(tmp_path: Path) -> None:
    """A missing folder is created, readable by the relay's user only."""
    made = private_directory(str(tmp_path / "state"), "--state-dir")
    assert made == str(tmp_path / "state")
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert private_directory(None, "--state-dir") is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_directory_is_refused(tmp_path: Path) -> None:
    """A folder the relay cannot write is refused at start-up, naming the flag."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UsageError, match=r"cannot use --trace-dir .*not writable"):
        private_directory(str(locked), "--trace-dir")


def folder(mode: int, uid: int) -> os.stat_result:
    """What os.stat says of a directory with ``mode`` owned by ``uid``."""
    return os.stat_result((stat.S_IFDIR | mode, 0, 0, 2, uid, 0, 4096, 0, 0, 0))


@pytest.mark.parametrize(
    ("mode", "owner", "problem"),
    [
        (0o700, 1000, None),
        (0o755, 1000, None),
        (0o2700, 1000, None),
        (0o720, 1000, "can be written by its group: chmod go-w it"),
        (0o702, 1000, "can be written by others: chmod go-w it"),
        (0o1777, 1000, "can be written by its group and others: chmod go-w it"),
        (0o700, 1001, "is owned by uid 1001, not by the relay's user (uid 1000)"),
        (0o700, 0, "is owned by uid 0, not by the relay's user (uid 1000)"),
    ],
)
def test_a_state_dir_must_be_the_relays_alone(mode: int, owner: int, problem: str | None) -> None:
    """A folder another user owns, or its group or others may write, is refused with a fix."""
    found = shared_directory_problem(folder(mode, owner), 1000)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)


def test_an_existing_group_writable_state_dir_is_refused(tmp_path: Path) -> None:
    """state_directory refuses an existing folder its group may write, naming the flag."""
    shared = tmp_path / "state"
    shared.mkdir()
    shared.chmod(0o770)
    with pytest.raises(UsageError, match=rf"--state-dir {shared} can be written by its group"):
        state_directory(str(shared))
    shared.chmod(0o700)
    assert state_directory(str(shared)) == str(shared)
    assert state_directory(None) is None


def test_a_file_is_no_directory(tmp_path: Path) -> None:
    """A path that is a file cannot be a state or trace directory: the flag is named."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="cannot use --state-dir"):
        private_directory(str(tmp_path / "file"), "--state-dir")


def test_secrets_come_from_the_file_before_the_environment(tmp_path: Path) -> None:
    """The secret file wins over ACP_RELAY_SECRET; with neither, the error says how."""
    (tmp_path / "secret").write_text("# comment\nfirst-secret-0123456789\nold-secret-0123456789\n")
    assert load_secrets(str(tmp_path / "secret"), "env-secret") == (
        "first-secret-0123456789",
        "old-secret-0123456789",
    )
    assert load_secrets(None, "env-secret") == ("env-secret",)
    with pytest.raises(UsageError, match="no secret"):
        load_secrets(None, None)


# A made-up filesystem for program_problem: path -> what it is; anything else is missing.
FILES: dict[str, Kind] = {
    "/usr/bin/agent": "executable",
    "/opt/bin/plain": "not executable",
    "/usr/bin/plain": "executable",
    "/opt/bin/only-plain": "not executable",
    "/srv/ws/bin/run": "executable",
    "/usr/bin/folder": "directory",
}


def kind(path: str) -> Kind:
    return FILES.get(path, "missing")


@pytest.mark.parametrize(
    ("program", "search_path", "problem"),
    [
        ("agent", "/opt/bin:/usr/bin", None),
        ("plain", "/opt/bin:/usr/bin", None),  # exec skips what it cannot run
        ("bin/run", "/nowhere", None),  # relative to the workspace, not PATH
        ("./bin/run", "", None),
        ("run", "bin", None),  # a relative PATH entry is taken against the workspace too
        ("/usr/bin/agent", "", None),
        ("nothing", "/opt/bin:/usr/bin", "program 'nothing' not found on PATH; install it"),
        ("only-plain", "/opt/bin:/usr/bin",
         "program 'only-plain' found on PATH as /opt/bin/only-plain, which is not executable"),
        ("folder", "/usr/bin", "program 'folder' not found on PATH"),
        ("/usr/bin/gone", "", "/usr/bin/gone does not exist"),
        ("../ws/bin/gone", "", "/srv/ws/bin/gone does not exist"),
        ("/opt/bin/plain", "", "/opt/bin/plain is not executable (chmod +x /opt/bin/plain?)"),
        ("/usr/bin/folder", "", "/usr/bin/folder is a directory, not a program"),
    ],
)  # fmt: skip
def test_program_problem_finds_programs_as_exec_does(
    program: str, search_path: str, problem: str | None
) -> None:
    """A name is looked up on PATH, a path with / against the workspace; else why not."""
    found = program_problem(program, search_path, "/srv/ws", kind)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)


def test_check_agent_program_uses_the_agents_path(tmp_path: Path) -> None:
    """The agent's own PATH decides, and the file found is the one exec will run; without
    a PATH, the system's default path."""
    program = tmp_path / "my-agent"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    other = tmp_path / "later"
    other.mkdir()
    (other / "my-agent").write_text("#!/bin/sh\n")
    (other / "my-agent").chmod(0o755)
    path = f"/nowhere:{tmp_path}:{other}"
    assert check_agent_program(["my-agent"], {"PATH": path}, str(tmp_path)) == str(program)
    assert check_agent_program(["sh", "-c", "true"], {}, str(tmp_path)).endswith("/sh")
    with pytest.raises(UsageError, match=r"^--agent: program 'my-agent' not found on PATH"):
        check_agent_program(["my-agent"], {"PATH": "/nowhere"}, str(tmp_path))


def test_check_workspace(tmp_path: Path) -> None:
    """A workspace must be an existing directory; the error names --workspace and the path."""
    check_workspace(str(tmp_path))
    (tmp_path / "file").write_text("")
    with pytest.raises(
        UsageError, match=re.escape(f"--workspace {tmp_path}/file is not a directory")
    ):
        check_workspace(str(tmp_path / "file"))
    with pytest.raises(UsageError, match=re.escape(f"--workspace {tmp_path}/gone does not exist")):
        check_workspace(str(tmp_path / "gone"))


def test_demo_sdk_installed() -> None:
    """The test environment has the demo extra (the ACP SDK)."""
    assert demo_sdk_installed()


# -- the agents' account

NOBODY = Account("nobody", 65534, 65534, (65534,), "/nonexistent")
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the relay switches accounts")


def test_no_agent_user_is_no_account() -> None:
    """Without --agent-user agents run as the relay's user; --agent-group alone is refused."""
    assert agent_account(None, None) is None
    with pytest.raises(UsageError, match=r"^--agent-group staff needs --agent-user USER too"):
        agent_account(None, "staff")


@pytest.mark.parametrize(
    ("user", "group", "says"),
    [
        ("no-such-user-xyz", None, "--agent-user no-such-user-xyz: no such user; create it"),
        ("nobody", "no-such-group-xyz", "--agent-group no-such-group-xyz: no such group"),
    ],
)
def test_an_unknown_account_is_refused_with_the_fix(
    user: str, group: str | None, says: str
) -> None:
    """An --agent-user or --agent-group that does not exist stops start-up, naming it."""
    with pytest.raises(UsageError, match=f"^{re.escape(says)}"):
        agent_account(user, group)


@ROOT_ONLY
@pytest.mark.parametrize(("user", "group"), [("nobody", None), ("65534", "nogroup")])
def test_the_agents_account_as_root(user: str, group: str | None) -> None:
    """As root, --agent-user (name or uid) gives the ids, groups and home of the account."""
    account = agent_account(user, group)
    assert account is not None
    assert (account.name, account.uid, account.gid, account.home) == (
        "nobody", 65534, 65534, "/nonexistent",
    )  # fmt: skip
    assert account.groups == (65534,)
    assert account.environment() == (
        ("HOME", "/nonexistent"), ("USER", "nobody"), ("LOGNAME", "nobody"),
    )  # fmt: skip


@ROOT_ONLY
def test_an_account_that_cannot_reach_the_workspace_or_agent_is_refused() -> None:
    """Every directory to the workspace and the agent's program needs x for the account."""
    with tempfile.TemporaryDirectory(dir="/tmp") as top:  # pytest's own is root's only
        os.chmod(top, 0o755)
        private = Path(top) / "private"
        (private / "ws").mkdir(parents=True)
        agent = private / "agent"
        agent.write_text("#!/bin/sh\n")
        agent.chmod(0o755)
        private.chmod(0o700)
        assert first_blocked(str(private / "ws"), NOBODY) == str(private)
        with pytest.raises(UsageError) as caught:
            check_account_reaches(NOBODY, str(private / "ws"), str(agent))
        assert str(caught.value) == (
            f"--workspace {private / 'ws'}: --agent-user nobody cannot reach it: {private} "
            f"lacks the x permission for it; chmod o+x {private}, or chown/chgrp it"
        )
        private.chmod(0o711)
        check_account_reaches(NOBODY, str(private / "ws"), str(agent))
        agent.chmod(0o700)
        with pytest.raises(UsageError, match=f"^--agent {re.escape(str(agent))}: .* {agent} lacks"):
            check_account_reaches(NOBODY, str(private / "ws"), str(agent))
