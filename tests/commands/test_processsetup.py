"""relay.commands.processsetup: serve's own process, non-dumpable and with room for open files."""

from __future__ import annotations

import subprocess
import sys

import pytest

SNIPPET = """
import ctypes, resource
from relay.commands.processsetup import keep_memory_private, raise_open_files_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
made_private = keep_memory_private()
dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
limit = raise_open_files_limit()
print(made_private, dumpable, limit == resource.getrlimit(resource.RLIMIT_NOFILE)[0],
      limit >= min(hard, 1 << 20))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="prctl and /proc are Linux's")
def test_the_relay_makes_itself_non_dumpable_and_raises_its_open_files_limit() -> None:
    """In a process of its own: non-dumpable afterwards, and the soft open-files limit raised
    from 256 to the hard one (or the ceiling)."""
    done = subprocess.run(
        [sys.executable, "-c", SNIPPET], capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.split() == ["True", "0", "True", "True"]
