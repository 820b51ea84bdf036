"""``python -m relay.demo_agent``: the built-in demo agent on stdin/stdout."""

import sys

from relay.demo_agent.cli import main

sys.exit(main())
