"""The files and folders the commands' flags name: read or made ready once at start-up.

Each problem is a UsageError naming the flag, so the relay stops with exit status 2 and
the fix instead of failing at the first connection.
"""

from __future__ import annotations

import os
from pathlib import Path

from relay.config import SECRET_ENV, parse_secrets
from relay.errors import UsageError


def read_named(path: str, flag: str) -> str:
    """The text of the file ``flag`` names; a UsageError naming both if it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {flag} {path}: {exc.strerror}") from exc


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
