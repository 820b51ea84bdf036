"""The account agents run as under ``--agent-user`` (the relay running as root): a value.

Pure and small, so that ``serve`` can check the account before it loads the server
(:mod:`relay.server.agents.process` starts agents as it says).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Account:
    """Another account the agents run as (``--agent-user``, the relay running as root).

    With ``setpriv`` (util-linux's, its path) the agent is started through it: the relay
    keeps its vfork spawn and setpriv switches ids before it execs the agent. Without it
    Popen switches them itself, which costs a fork of the relay (see docs/performance.md).
    """

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # the supplementary groups, as initgroups would set them
    home: str
    setpriv: str | None = None

    def environment(self) -> tuple[tuple[str, str], ...]:
        """HOME, USER and LOGNAME of the account, for the agent's environment."""
        return (("HOME", self.home), ("USER", self.name), ("LOGNAME", self.name))
