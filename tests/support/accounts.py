"""Another account for the tests that switch users (run as root): nobody, and a Python it can run.

The tests' own interpreter may live where nobody cannot reach it (under /root, say);
then Debian's ``/usr/bin/python3`` of the same version serves, with this checkout and the
virtualenv's packages on its ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from relay.commands.preflight import first_blocked
from relay.config.account import Account

NOBODY = Account("nobody", 65534, 65534, (65534,), "/nonexistent")
ROOT = Path(__file__).resolve().parent.parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def is_root() -> bool:
    return os.geteuid() == 0


def python_for(account: Account = NOBODY) -> str | None:
    """A Python of this version that ``account`` can run, or None."""
    for python in (sys.executable, SYSTEM_PYTHON):
        runnable = os.path.exists(python) and first_blocked(python, account) is None
        if runnable and (python == sys.executable or _version(python) == VERSION):
            return python
    return None


def relay_for(account: Account = NOBODY) -> tuple[tuple[str, ...], dict[str, str]] | None:
    """How root runs ``python -m relay`` as ``account`` (through setpriv): the argv and the
    environment to add; None if it cannot (then skip)."""
    python = python_for(account)
    setpriv = shutil.which("setpriv")
    if python is None or setpriv is None:
        return None
    switch = (setpriv, f"--reuid={account.uid}", f"--regid={account.gid}", "--clear-groups")
    command = (*switch, "--", python, "-m", "relay")
    extra: dict[str, str] = {}
    if python != sys.executable:
        packages = [ROOT, *map(Path, site.getsitepackages())]
        if any(first_blocked(str(p), account) for p in packages):
            return None
        extra["PYTHONPATH"] = os.pathsep.join(map(str, packages))
    return command, extra


def _version(python: str) -> str:
    result = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2], sep='.')"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    return result.stdout.strip()
