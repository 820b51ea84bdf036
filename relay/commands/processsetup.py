"""``serve``'s own process, set up before it listens: non-dumpable, and its open-files limit.

Non-dumpable (Linux), other processes of the relay's user, its agents included, can read
neither its environment (the secret may be there) nor its memory in ``/proc``, nor trace
it. Each socket and each agent pipe is an open file: the soft limit is raised to the hard
one.
"""

from __future__ import annotations

import ctypes
import resource
import sys
from contextlib import suppress

PR_SET_DUMPABLE = 4  # linux/prctl.h
OPEN_FILES_CEILING = 1 << 20  # the soft limit asked for when the hard one is unlimited


def keep_memory_private() -> bool:
    """Make this process non-dumpable (Linux): other processes of the same user, agents
    included, can then read neither its environment nor its memory in /proc, nor ptrace
    it. Whether it worked."""
    if sys.platform != "linux":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard one (each socket and agent pipe is one);
    the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            return wanted
    return soft
