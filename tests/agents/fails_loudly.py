"""An agent that fails at start-up as a Python agent run without its venv does: one long
stderr line whose reason comes last, then exit 1.

Usage: fails_loudly.py [LINE ...]: the lines to write to stderr instead (the last one
last), e.g. one holding a secret the relay must redact.
"""

import sys

MISSING_MODULE = (
    "/home/alice/src/acp-relay/.venv-that-was-not-activated/bin/python3: Error while finding "
    "module specification for 'relay.demo_agent' (ModuleNotFoundError: No module named 'relay')"
)

for line in sys.argv[1:] or [MISSING_MODULE]:
    sys.stderr.write(line + "\n")
sys.stderr.flush()
sys.exit(1)
