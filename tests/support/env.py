"""Environments for the relay's subprocesses: this one, without what would change their run.

A developer's shell may hold ``ACP_RELAY_*`` settings or a ``PYTHONPATH``; a subprocess
given either would not run the configuration a test means (``PYTHONPATH`` can put another
``relay`` package ahead of the one installed where the subprocess's Python looks).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.live import SECRET

VENV_BIN = Path(sys.executable).parent
DROPPED = ("PYTHONPATH",)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any ACP_RELAY_* variable or PYTHONPATH, the venv first on
    PATH, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("ACP_RELAY_") and k not in DROPPED
    }
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def secret_env(**extra: str) -> dict[str, str]:
    """:func:`clean_env` with ACP_RELAY_SECRET set to the tests' secret."""
    return clean_env(ACP_RELAY_SECRET=SECRET, **extra)


def connect_env(ticket: str | None = None) -> dict[str, str]:
    """:func:`clean_env`, plus ACP_RELAY_TICKET when given (for ``acp-relay connect``)."""
    return clean_env() if ticket is None else clean_env(ACP_RELAY_TICKET=ticket)
