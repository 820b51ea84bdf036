"""An agent that writes the given lines to stdout, then exits with the given status.

Usage: exit_with.py STATUS [LINE ...]
"""

import sys

for line in sys.argv[2:]:
    sys.stdout.write(line + "\n")
sys.stdout.flush()
sys.exit(int(sys.argv[1]))
