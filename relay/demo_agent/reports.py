"""What the demo agent declares and reports: its capabilities, a session request as it
arrived, a prompt's blocks as echoed text.

The behaviour these serve is :mod:`relay.demo_agent.agent`'s.
"""

from __future__ import annotations

import os
import re
from typing import Any

from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    AudioContentBlock,
    EmbeddedResourceContentBlock,
    HttpMcpServer,
    ImageContentBlock,
    McpCapabilities,
    McpServerStdio,
    PermissionOption,
    PromptCapabilities,
    ResourceContentBlock,
    SessionAdditionalDirectoriesCapabilities,
    SessionCapabilities,
    SessionForkCapabilities,
    SessionResumeCapabilities,
    SseMcpServer,
    TextContentBlock,
)

AGENT_NAME = "acp-relay-demo"
META_KEY = "demo"
HANG_TEXT = "waiting for session/cancel"
ASK_COMMAND = "/ask"
ASK_TITLE = "Write notes.md"
ASK_FILE = "notes.md"
ASK_OPTIONS = (
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
)

McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio
ContentBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)

EXIT_COMMAND = re.compile(r"/exit (\d{1,3})")
STDERR_PREFIX = "/stderr "
_WORD = re.compile(r"\S+\s*|\s+")


def build_capabilities(
    *,
    mcp_http: bool = True,
    mcp_sse: bool = False,
    load_session: bool = True,
    additional_directories: bool = True,
) -> AgentCapabilities:
    """Return the capabilities the agent declares; every field is set so all reach the wire."""
    return AgentCapabilities(
        load_session=load_session,
        prompt_capabilities=PromptCapabilities(image=False, audio=False, embedded_context=False),
        mcp_capabilities=McpCapabilities(http=mcp_http, sse=mcp_sse),
        session_capabilities=SessionCapabilities(
            additional_directories=(
                SessionAdditionalDirectoriesCapabilities() if additional_directories else None
            ),
            resume=SessionResumeCapabilities(),
            fork=SessionForkCapabilities(),
        ),
    )


def session_report(
    method: str,
    session_id: str,
    cwd: str,
    additional_directories: list[str] | None,
    mcp_servers: list[McpServer] | None,
) -> dict[str, Any]:
    """Describe a session request as it arrived: the ``demo`` dict of the response's ``_meta``."""
    return {
        "method": method,
        "sessionId": session_id,
        "cwd": cwd,
        "cwdExists": os.path.isdir(cwd),
        "additionalDirectories": list(additional_directories or []),
        "mcpServers": [server.name for server in mcp_servers or []],
        "agentCwd": os.getcwd(),
    }


def report_text(report: dict[str, Any]) -> str:
    """Return the text of the update that follows a session response: a line of its own,
    so that a client showing the words of its first reply after it (a chat thread) does not
    run the two together."""
    names = ", ".join(report["mcpServers"]) or "(none)"
    return f"session started in {report['cwd']} with MCP servers: {names}\n"


def describe_block(block: ContentBlock) -> str:
    """Return the text a prompt block is echoed as."""
    if isinstance(block, TextContentBlock):
        return block.text
    if isinstance(block, ImageContentBlock):
        return "[image]"
    if isinstance(block, AudioContentBlock):
        return "[audio]"
    if isinstance(block, ResourceContentBlock):
        return f"[resource_link {block.uri}]"
    return f"[resource {block.resource.uri}]"


def split_words(text: str) -> list[str]:
    """Split text into chunks of one word plus its trailing whitespace; they join back to text."""
    return _WORD.findall(text)
