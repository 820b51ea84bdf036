"""Tests for relay.cli.files: the files and folders flags name, checked at start-up."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from relay.cli.files import (
    Kind,
    check_agent_program,
    check_workspace,
    demo_sdk_installed,
    load_secrets,
    private_directory,
    program_problem,
    read_named,
)
from relay.errors import UsageError


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


def test_a_file_is_no_directory(tmp_path: Path) -> None:
    """A path that is a file cannot be a state or trace directory: the flag is named."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="cannot use --state-dir"):
        private_directory(str(tmp_path / "file"), "--state-dir")


def test_an_unreadable_file_names_its_flag(tmp_path: Path) -> None:
    """A file that cannot be read is a UsageError naming the flag and the path."""
    with pytest.raises(UsageError, match=r"cannot read --config .*missing\.toml"):
        read_named(str(tmp_path / "missing.toml"), "--config")


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
    """The agent's own PATH decides; without one, the system's default path."""
    program = tmp_path / "my-agent"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    check_agent_program(["my-agent"], {"PATH": str(tmp_path)}, str(tmp_path))
    check_agent_program(["sh", "-c", "true"], {}, str(tmp_path))  # os.defpath has /bin
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
