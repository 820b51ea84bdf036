"""``python -m relay.demo_agent``'s command line: flags that change what the agent declares,
a check of its stdin and stdout, then the agent (:mod:`relay.demo_agent.agent`) until
stdin closes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import stat
import sys
from collections.abc import Sequence

from relay.demo_agent.agent import DemoAgent
from relay.demo_agent.reports import AGENT_NAME, build_capabilities


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="python -m relay.demo_agent",
        description="acp-relay demo ACP agent (speaks ACP on stdin/stdout).",
    )
    flag = argparse.BooleanOptionalAction
    parser.add_argument(
        "--mcp-http", action=flag, default=True, help="declare mcpCapabilities.http"
    )
    parser.add_argument("--mcp-sse", action=flag, default=False, help="declare mcpCapabilities.sse")
    parser.add_argument("--load-session", action=flag, default=True, help="declare loadSession")
    parser.add_argument(
        "--additional-directories",
        action=flag,
        default=True,
        help="declare sessionCapabilities.additionalDirectories",
    )
    parser.add_argument(
        "--word-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long before each streamed word (a slow answer)",
    )
    return parser


def _stdio_problem() -> str | None:
    """Say why stdin/stdout cannot carry ACP, or None: the SDK needs pipes, sockets or ttys."""
    for fd, name in ((0, "stdin"), (1, "stdout")):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return f"{name} is closed"
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            return f"{name} must be a pipe, a socket or a terminal, not a file"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo agent on stdin/stdout; return the process exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s"
    )
    if (problem := _stdio_problem()) is not None:
        print(f"{AGENT_NAME}: {problem}", file=sys.stderr)
        return 2
    agent = DemoAgent(
        build_capabilities(
            mcp_http=args.mcp_http,
            mcp_sse=args.mcp_sse,
            load_session=args.load_session,
            additional_directories=args.additional_directories,
        ),
        word_delay=args.word_delay,
    )
    try:
        asyncio.run(agent.serve())
    except KeyboardInterrupt:
        return 130
    return 0
