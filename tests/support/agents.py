"""The agent commands tests run: the demo agent, the programs of tests/agents/, and scripts.

Each is an argv tuple for ``--agent`` (``shlex.join`` it for the command line) or for
:func:`tests.support.live.live_relay`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from relay.server.agents.process import PIPE_LIMIT
from relay.streams.pump import READ_CHUNK

AGENTS = Path(__file__).resolve().parent.parent / "agents"
DEMO_AGENT = (sys.executable, "-m", "relay.demo_agent")
ECHO_AGENT = (sys.executable, str(AGENTS / "echo.py"))
STREAM = (sys.executable, str(AGENTS / "stream.py"))  # + COUNT [DELAY]
STUBBORN = (sys.executable, str(AGENTS / "stubborn.py"))
ASKS = (sys.executable, str(AGENTS / "asks.py"))  # asks permission once, reports answers
CHATTY = (sys.executable, str(AGENTS / "chatty.py"))  # plans, thinks, runs a tool, asks, says
# An SDK agent offering modes, options, commands, images, usage and sessions: + STORE_DIR
CONTROLS = (sys.executable, str(AGENTS / "controls.py"))
SLOW_START = (sys.executable, str(AGENTS / "slow_start.py"))  # + SECONDS [STDERR_BYTES]
# An ACP SDK agent sending a path through every row of relay.acp.boundary (see its doc).
BOUNDARY_AGENT = (sys.executable, str(AGENTS / "boundary.py"))  # [--ignore-capabilities]
# A start-up failure: one long stderr line, the reason last (or the lines given), exit 1.
FAILS_LOUDLY = (sys.executable, str(AGENTS / "fails_loudly.py"))  # [LINE ...]
DIES_BY_SIGNAL = (sys.executable, str(AGENTS / "dies_by_signal.py"))  # + SIGNAL [--stdout-first]

# An agent that reads one JSON line {"exec": ARGV} byte by byte, then becomes ARGV:
# lets one relay run different agents on different sockets.
CHOOSER = (
    sys.executable,
    "-c",
    "import json, os\n"
    "line = b''\n"
    "while not line.endswith(b'\\n'):\n"
    "    byte = os.read(0, 1)\n"
    "    if not byte:\n"
    "        raise SystemExit(0)\n"
    "    line += byte\n"
    "argv = json.loads(line)['exec']\n"
    "os.execvp(argv[0], argv)\n",
)

# docs/behaviour.md, "How a connection goes": an unterminated last line is forwarded as it
# is, then the close carries the exit status. The relay never judges JSON; a client gets the
# bytes it would have read from the agent's stdout. Its argument: an exit status, or "kill".
CRASH_MID_LINE = """
import os, signal, sys
sys.stdout.write('{"jsonrpc":"2.0","method":"a"}\\n{"jsonrpc":"2.0","id":1,"result":{"stopRe')
sys.stdout.flush()
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
os._exit(int(sys.argv[1]))
"""


def python_agent(script: str) -> tuple[str, ...]:
    """An agent that is ``script``, run by this Python."""
    return (sys.executable, "-c", script)


# COUNT lines of SIZE bytes each (a JSON object), written 64 KiB at a time (so that
# /proc/PID/io counts what the relay took from the pipe to within 64 KiB), then silence;
# with a third argument "signal", only once it gets SIGUSR1 (it catches it from the moment
# /proc shows it caught: tests.support.processes.catches_signal).
LONG_LINES = python_agent(
    "import os, signal, sys, time\n"
    "if sys.argv[3:] == ['signal']:\n"
    "    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
    "    signal.signal(signal.SIGUSR1, lambda *_: None)\n"
    "    signal.sigwait({signal.SIGUSR1})\n"
    "count, size = int(sys.argv[1]), int(sys.argv[2])\n"
    "line = memoryview(b'{\"x\":\"' + b'a' * (size - 9) + b'\"}\\n')\n"
    "for _ in range(count):\n"
    "    for start in range(0, len(line), 65536):\n"
    "        os.write(1, line[start : start + 65536])\n"
    "time.sleep(60)\n"
)  # + COUNT SIZE [signal]
# What a relay may have taken of LONG_LINES' pipe past the lines it keeps: one read, the
# pipe reader's buffer (which pauses the pipe past twice its limit, after one more read),
# and the agent's last write of 64 KiB, counted before the pipe took all of it.
READ_AHEAD = READ_CHUNK + 3 * PIPE_LIMIT + 65536
