"""The files the commands' flags name: read once at start-up, a UsageError if unreadable."""

from __future__ import annotations

from pathlib import Path

from relay.config import SECRET_ENV, parse_secrets
from relay.errors import UsageError


def read_named(path: str, flag: str) -> str:
    """The text of the file ``flag`` names; a UsageError naming both if it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {flag} {path}: {exc.strerror}") from exc


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
