"""``python -m relay.demo_agent``'s command line: flags that change what the agent declares,
a check of its stdin and stdout (pipes, sockets, terminals or files:
:mod:`relay.demo_agent.stdio`), then the agent (:mod:`relay.demo_agent.agent`) until stdin
closes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from relay.demo_agent.agent import DemoAgent
from relay.demo_agent.reports import AGENT_NAME, build_capabilities
from relay.demo_agent.stdio import file_stdio, has_a_file, stdio_problem


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo agent on stdin/stdout; return the process exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s"
    )
    if (problem := stdio_problem()) is not None:
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
        asyncio.run(_serve(agent))
    except KeyboardInterrupt:
        return 130
    return 0


async def _serve(agent: DemoAgent) -> None:
    """Serve ``agent`` on stdin and stdout, opened by the SDK unless one of them is a file."""
    await agent.serve(await file_stdio() if has_a_file() else None)
