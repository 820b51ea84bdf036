"""A line echo agent with an optional first line: ``echo.py [HELLO]``; reports on stderr."""

import sys

if len(sys.argv) > 1:
    sys.stdout.buffer.write(sys.argv[1].encode() + b"\n")
    sys.stdout.flush()
sys.stderr.write("echo agent started\n")
sys.stderr.flush()
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(line)
    sys.stdout.flush()
