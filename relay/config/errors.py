"""The one error a user can fix by changing how acp-relay is run.

Pure. Raised by the configuration, the command line and the bridge; ``acp-relay``
prints it as ``acp-relay: <message>`` and exits with status 2.
"""

from __future__ import annotations


class UsageError(Exception):
    """A problem the user can fix; printed as ``acp-relay: <message>``, exit status 2."""
