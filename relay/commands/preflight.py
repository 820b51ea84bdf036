"""The files and folders the commands' flags name: read, made ready or checked once at start-up.

The config, secret and MCP files; the trace and state folders; the workspace and the
agent's program (found as exec would find it, by the pure :func:`program_problem`), and
the ACP SDK the demo agent needs. Each problem is a UsageError naming the flag, so the
relay stops with exit status 2 and the fix instead of failing at the first connection.
"""

from __future__ import annotations

import grp
import importlib.util
import os
import pwd
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from relay.config.account import Account
from relay.config.errors import UsageError
from relay.config.settings import SECRET_ENV, parse_secrets
from relay.config.startupchecks import may_search
from relay.streams.filereader import read_named

Kind = Literal["missing", "directory", "not executable", "executable"]


PRIVATE_DIR_MODE = 0o700


def private_directory(path: str | None, flag: str) -> str | None:
    """The folder ``flag`` names, created (mode 0700) if missing; a UsageError if unusable."""
    if path is None:
        return None
    try:
        os.makedirs(path, mode=PRIVATE_DIR_MODE, exist_ok=True)
        if not os.path.isdir(path):
            raise NotADirectoryError(f"{path} is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"{path} is not writable")
    except OSError as exc:
        raise UsageError(f"cannot use {flag} {path}: {exc.strerror or exc}") from exc
    return path


def state_directory(path: str | None) -> str | None:
    """The ``--state-dir`` folder, as :func:`private_directory` makes it, and writable by
    the relay's user only: whoever else may write it could plant or replace the spent
    tickets file (a used ticket accepted again). A UsageError with the fix otherwise."""
    made = private_directory(path, "--state-dir")
    if made is None:
        return None
    problem = shared_directory_problem(os.stat(made), os.geteuid())
    if problem is not None:
        raise UsageError(f"--state-dir {made} {problem}")
    return made


def shared_directory_problem(info: os.stat_result, uid: int) -> str | None:
    """Why a folder with ``info`` is not the relay's (running as ``uid``) alone, with the
    fix, or None."""
    if info.st_uid != uid:
        return (
            f"is owned by uid {info.st_uid}, not by the relay's user (uid {uid}), who may "
            f"change it: chown {uid} it, or give a folder of the relay's own"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"can be written by {_writers(info.st_mode)}: chmod go-w it (or chmod 700), "
            "or give a folder of the relay's own"
        )
    return None


def _writers(mode: int) -> str:
    who = [
        name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if mode & bit
    ]
    return " and ".join(who)


def load_secrets(secret_file: str | None, secret_env: str | None) -> tuple[str, ...]:
    """Secrets from the file, else from $ACP_RELAY_SECRET; a UsageError says how to give one."""
    if secret_file:
        text = read_named(secret_file, "--secret-file")
        return parse_secrets(text, source=f"--secret-file {secret_file}")
    if secret_env:
        return parse_secrets(secret_env, source=SECRET_ENV)
    raise UsageError(
        "no secret: give --secret-file FILE (one secret a line, the first signs) "
        f"or set {SECRET_ENV}; for a throwaway local setup use `acp-relay serve --dev`"
    )


# --- the agent and its workspace


def check_workspace(path: str) -> None:
    """A UsageError unless ``path`` is a directory the agent can be started in."""
    if not os.path.exists(path):
        raise UsageError(f"--workspace {path} does not exist; create it or give another one")
    if not os.path.isdir(path):
        raise UsageError(f"--workspace {path} is not a directory")
    if not os.access(path, os.X_OK):
        raise UsageError(f"--workspace {path} cannot be entered by this user (no x permission)")


def check_agent_program(argv: Sequence[str], env: Mapping[str, str], workspace: str) -> str:
    """The file exec will run for the agent's program; a UsageError unless there is one:
    found on the agent's ``PATH`` (``env``'s), or, for a path, there; a relative path is
    taken against ``workspace``, where the agent starts."""
    search_path = env.get("PATH", os.defpath)
    candidates = program_candidates(argv[0], search_path, workspace)
    kinds = {path: kind_of(path) for path in candidates}
    problem = program_problem(argv[0], search_path, workspace, kinds.__getitem__)
    if problem is not None:
        raise UsageError(f"--agent: {problem}")
    return next(path for path, kind in kinds.items() if kind == "executable")


def program_problem(
    program: str, search_path: str, cwd: str, kind: Callable[[str], Kind]
) -> str | None:
    """Why ``program`` cannot be run from ``cwd`` with ``PATH=search_path``, or None.

    Pure but for ``kind`` (what each candidate file is). A name is looked up in each
    ``search_path`` entry, as exec does; anything with a ``/`` is one path.
    """
    candidates = program_candidates(program, search_path, cwd)
    kinds = [kind(path) for path in candidates]
    if "executable" in kinds:
        return None
    if "/" in program:
        (path,), (found,) = candidates, kinds
        if found == "missing":
            return f"{path} does not exist"
        if found == "directory":
            return f"{path} is a directory, not a program"
        return f"{path} is not executable (chmod +x {path}?)"
    plain_files = [
        path for path, found in zip(candidates, kinds, strict=True) if found == "not executable"
    ]
    if plain_files:
        return f"program {program!r} found on PATH as {plain_files[0]}, which is not executable"
    return (
        f"program {program!r} not found on PATH; install it, give its full path, "
        "or give the agent a PATH with --agent-env PATH=..."
    )


def program_candidates(program: str, search_path: str, cwd: str) -> list[str]:
    """The files exec would try for ``program``, in order (relative entries against cwd)."""
    if "/" in program:
        return [os.path.normpath(os.path.join(cwd, program))]
    return [os.path.normpath(os.path.join(cwd, entry, program)) for entry in search_path.split(":")]


def kind_of(path: str) -> Kind:
    """What ``path`` is, for running it: missing, a directory, or a file runnable or not."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "missing"
    if stat.S_ISDIR(mode):
        return "directory"
    return "executable" if os.access(path, os.X_OK) else "not executable"


def demo_sdk_installed() -> bool:
    """Whether the ACP Python SDK, which the demo agent is written with, can be imported."""
    return importlib.util.find_spec("acp") is not None


# --- the agents' account


def agent_account(user: str | None, group: str | None) -> Account | None:
    """The account of ``--agent-user`` (and ``--agent-group``), checked: it exists and the
    relay runs as root. None without ``--agent-user``."""
    if user is None:
        if group is not None:
            raise UsageError(f"--agent-group {group} needs --agent-user USER too; add it")
        return None
    entry = _user_entry(user)
    gid = entry.pw_gid if group is None else _group_id(group)
    if os.geteuid() != 0:
        raise UsageError(
            f"--agent-user {user}: only a relay running as root can start agents as another "
            f"user (this one runs as uid {os.geteuid()}); start the relay as root, or drop "
            "--agent-user"
        )
    return Account(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=gid,
        groups=tuple(sorted(set(os.getgrouplist(entry.pw_name, gid)))),
        home=entry.pw_dir,
        setpriv=shutil.which("setpriv"),
    )


def _user_entry(user: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise UsageError(
            f"--agent-user {user}: no such user; create it (useradd --system {user}) "
            "or name an existing one"
        ) from None


def _group_id(group: str) -> int:
    try:
        return grp.getgrgid(int(group)).gr_gid if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise UsageError(
            f"--agent-group {group}: no such group; create it (groupadd --system {group}) "
            "or name an existing one"
        ) from None


def check_account_reaches(account: Account, workspace: str, program: str) -> None:
    """A UsageError unless ``account`` can enter the workspace and run the agent's program
    (``program``, as found on its PATH): every directory on the way needs its x bit."""
    for flag, path in (("--workspace", workspace), ("--agent", program)):
        blocked = first_blocked(path, account)
        if blocked is not None:
            raise UsageError(
                f"{flag} {path}: --agent-user {account.name} cannot reach it: {blocked} "
                f"lacks the x permission for it; chmod o+x {blocked}, or chown/chgrp it"
            )


def first_blocked(path: str, account: Account) -> str | None:
    """The first of ``path`` and the directories above it that ``account`` may not search
    (or, for the last, run), or None; along the path as given, then where its symbolic
    links lead."""
    groups = (account.gid, *account.groups)
    for way in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
        parts = way.split(os.sep)
        for end in range(1, len(parts) + 1):
            here = os.sep.join(parts[:end]) or os.sep
            try:
                info = os.stat(here)
            except OSError:
                return None  # missing: the other start-up checks say so
            if not may_search(info.st_mode, info.st_uid, info.st_gid, account.uid, groups):
                return here
    return None
