"""What ``serve`` says about its own set-up before it listens: warnings, and refusals.

Pure: the environment, the secrets, file modes and accounts come in as values. Each
warning is a :class:`StartupWarning` (an event and its fields) that the CLI logs once at
start-up; a refusal is a :class:`relay.config.errors.UsageError` (exit status 2) with the fix.
"""

from __future__ import annotations

import difflib
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relay.config.errors import UsageError
from relay.config.settings import known_env_names, unknown_env_names

MIN_SECRET_BYTES = 16  # below this a secret is refused: it can be guessed
GOOD_SECRET_BYTES = 32  # below this a secret is accepted with a warning
NEW_SECRET = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
EXPOSED_BITS = stat.S_IRGRP | stat.S_IROTH  # a secret file others than its owner can read


@dataclass(frozen=True)
class StartupWarning:
    """One log line at warning level: its event and its fields."""

    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)


def environment_warnings(env: Mapping[str, str]) -> list[StartupWarning]:
    """One warning per ``ACP_RELAY_*`` variable that ``serve`` does not read (a typo is
    otherwise silently ignored), with the known name it most likely meant."""
    return [
        StartupWarning(
            "unknown environment variable ignored",
            {"name": name, "did_you_mean": closest_env_name(name)},
        )
        for name in unknown_env_names(env)
    ]


def closest_env_name(name: str) -> str | None:
    """The known ``ACP_RELAY_*`` name closest to ``name``, if one is close enough."""
    known = sorted(known_env_names())
    found = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.8)
    return found[0] if found else None


def secret_warnings(secrets: Sequence[str], source: str) -> list[StartupWarning]:
    """A warning for each secret shorter than 32 bytes; a UsageError for one under 16.

    ``source`` names where the secrets came from (``--secret-file FILE`` or the
    variable); secrets are counted from 1 in the order given, the first one signing.
    """
    warnings = []
    for position, secret in enumerate(secrets, start=1):
        size = len(secret.encode())
        if size < MIN_SECRET_BYTES:
            raise UsageError(
                f"{source}: secret {position} is {size} bytes, under the {MIN_SECRET_BYTES} "
                f"a ticket secret needs; make a new one with {NEW_SECRET}"
            )
        if size < GOOD_SECRET_BYTES:
            warnings.append(
                StartupWarning(
                    "short ticket secret",
                    {
                        "source": source,
                        "secret": position,
                        "bytes": size,
                        "fix": f"use {GOOD_SECRET_BYTES} bytes or more: {NEW_SECRET}",
                    },
                )
            )
    return warnings


def secret_file_warnings(path: str, mode: int) -> list[StartupWarning]:
    """A warning when the secret file (of permission bits ``mode``) is readable by its
    group or by others, with the ``chmod`` that fixes it."""
    if not mode & EXPOSED_BITS:
        return []
    return [
        StartupWarning(
            "secret file readable by group or others",
            {"file": path, "mode": f"{stat.S_IMODE(mode):04o}", "fix": f"chmod 600 {path}"},
        )
    ]


def may_search(mode: int, owner: int, group: int, uid: int, gids: Sequence[int]) -> bool:
    """Whether the account ``uid`` (in groups ``gids``) may enter a directory, or run a
    file, of permission bits ``mode`` owned by ``owner``:``group``."""
    if uid == 0:
        return bool(mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
    if owner == uid:
        return bool(mode & stat.S_IXUSR)
    if group in gids:
        return bool(mode & stat.S_IXGRP)
    return bool(mode & stat.S_IXOTH)
