"""The relay's built-in demo agent: an ACP agent that reports what reached it and echoes prompts.

Run it as ``python -m relay.demo_agent`` (:mod:`relay.demo_agent.cli`). It speaks ACP over
stdin/stdout through the official ACP Python SDK (stdout is the protocol; logs go to
stderr only) and exits 0 when stdin closes.

``initialize``
    Answers protocolVersion 1, agentInfo ``acp-relay-demo`` (version ``relay.__version__``) and
    agentCapabilities ``{"loadSession": true, "promptCapabilities": {"image": false,
    "audio": false, "embeddedContext": false}, "mcpCapabilities": {"http": true, "sse": false},
    "sessionCapabilities": {"additionalDirectories": {}, "resume": {}, "fork": {}}}``.
    Flags change the declaration (for tests of the relay's capability gating):
    ``--[no-]mcp-http`` (default on), ``--[no-]mcp-sse`` (default off),
    ``--[no-]load-session`` (default on), ``--[no-]additional-directories`` (default on).
    A declaration only changes what is declared: every method below always works.
    ``--word-delay SECONDS`` (default 0) makes prompts stream slowly (see below).

``session/new``, ``session/load``, ``session/resume``, ``session/fork``
    Accept any request (any session id) and report what arrived. The response's ``_meta`` is
    ``{"demo": {"method", "sessionId", "cwd", "cwdExists", "additionalDirectories",
    "mcpServers", "agentCwd"}}`` (plus ``"forkedFrom"`` for a fork); see :func:`session_report`.
    Once that response is written, the agent sends one ``agent_message_chunk`` whose text is
    ``session started in <cwd> with MCP servers: <comma-separated names or (none)>`` and a
    newline.

``session/prompt``
    Streams the prompt back as several ``agent_message_chunk`` updates, one word (with its
    whitespace) per chunk (each after ``--word-delay`` seconds), so the chunks joined equal
    the prompt's text blocks concatenated;
    other blocks are echoed as ``[image]``, ``[audio]``, ``[resource_link <uri>]`` or
    ``[resource <uri>]``. Returns stopReason ``end_turn``, or ``cancelled`` after a
    ``session/cancel`` for that session. Prompt commands (the whole prompt text, surrounding
    whitespace ignored):

    ``/exit N``
        exit the process at once with status N (0-255), leaving the prompt unanswered.
    ``/stderr TEXT``
        write TEXT and a newline to stderr, then echo the prompt as usual.
    ``/hang``
        send one chunk ``waiting for session/cancel``, then block until the session is
        cancelled and return ``cancelled``.
    ``/ask``
        ask the client's permission for a pretend edit (nothing is written): a
        ``tool_call`` (id ``ask-N``, title ``Write notes.md``, kind ``edit``, status
        ``pending``, its location ``notes.md`` in the session's cwd), then a
        ``session/request_permission`` for it with the options ``allow`` (Allow) and
        ``reject`` (Reject); once answered, a ``tool_call_update`` (status ``completed``
        when allowed, else ``failed``) and one chunk ``permission: <optionId>`` (or
        ``permission: cancelled``, or ``permission: error <code> <message>`` when the client
        answered with an error). Returns ``end_turn`` (``cancelled`` when the answer was).

Any other method gets the SDK's answer: -32601 Method not found.

When stdin closes while a prompt streams (the relay's client left), the agent writes one
warning line to stderr saying so, and exits 0 like on any end of stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import uuid
from collections.abc import Awaitable
from typing import Any, NoReturn

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_tool_call,
)
from acp.connection import StreamDirection, StreamEvent
from acp.interfaces import Client
from acp.meta import AGENT_METHODS
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    AuthenticateResponse,
    ClientCapabilities,
    CloseSessionResponse,
    ForkSessionResponse,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    ResumeSessionResponse,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    ToolCallLocation,
    ToolCallUpdate,
)

from relay import __version__
from relay.demo_agent.reports import (
    AGENT_NAME,
    ASK_COMMAND,
    ASK_FILE,
    ASK_OPTIONS,
    ASK_TITLE,
    EXIT_COMMAND,
    HANG_TEXT,
    META_KEY,
    STDERR_PREFIX,
    ContentBlock,
    McpServer,
    build_capabilities,
    describe_block,
    report_text,
    session_report,
    split_words,
)

log = logging.getLogger("relay.demo_agent")


def _exit_now(status: int) -> NoReturn:
    sys.stderr.flush()
    os._exit(status)


class DemoAgent:
    """ACP agent that reports every session request and echoes prompts word by word."""

    def __init__(
        self, capabilities: AgentCapabilities | None = None, word_delay: float = 0.0
    ) -> None:
        self._capabilities = capabilities if capabilities is not None else build_capabilities()
        self._word_delay = word_delay
        self._client: Client | None = None
        # Report texts waiting for their response to be written, by session id.
        self._pending_reports: dict[str, list[str]] = {}
        # Cancel events of the prompts running in each session.
        self._prompts: dict[str, set[asyncio.Event]] = {}
        self._cwds: dict[str, str] = {}  # each session's cwd, as it arrived
        self._asks = 0

    async def serve(
        self, streams: tuple[asyncio.StreamWriter, asyncio.StreamReader] | None = None
    ) -> None:
        """Serve ACP until its input ends: on ``streams`` (what it writes to, what it reads
        from), else on stdin/stdout."""
        writer, reader = streams if streams is not None else (None, None)
        observers = [self.on_stream_event]
        await run_agent(self, writer, reader, use_unstable_protocol=True, observers=observers)

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    def on_stream_event(self, event: StreamEvent) -> Awaitable[None] | None:
        """Send a session's report update once its response has been written."""
        if event.direction is not StreamDirection.OUTGOING:
            return None
        result = event.message.get("result")
        meta = result.get("_meta") if isinstance(result, dict) else None
        report = meta.get(META_KEY) if isinstance(meta, dict) else None
        session_id = report.get("sessionId") if isinstance(report, dict) else None
        if not isinstance(session_id, str) or session_id not in self._pending_reports:
            return None
        texts = self._pending_reports[session_id]
        text = texts.pop(0)
        if not texts:
            del self._pending_reports[session_id]
        return self._send_report(session_id, text)

    async def _send_report(self, session_id: str, text: str) -> None:
        with contextlib.suppress(ConnectionError):
            await self._send_text(session_id, text)

    async def _send_text(self, session_id: str, text: str) -> None:
        if self._client is None:
            raise RuntimeError("demo agent is not connected")
        await self._client.session_update(
            session_id=session_id, update=update_agent_message_text(text)
        )

    def _report(
        self,
        method: str,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None,
        mcp_servers: list[McpServer] | None,
        **extra: Any,
    ) -> dict[str, Any]:
        report = session_report(method, session_id, cwd, additional_directories, mcp_servers)
        report.update(extra)
        self._cwds[session_id] = cwd
        self._pending_reports.setdefault(session_id, []).append(report_text(report))
        return {META_KEY: report}

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=self._capabilities,
            auth_methods=[],
            agent_info=Implementation(
                name=AGENT_NAME, title="acp-relay demo agent", version=__version__
            ),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        session_id = uuid.uuid4().hex
        meta = self._report(
            AGENT_METHODS["session_new"], session_id, cwd, additional_directories, mcp_servers
        )
        return NewSessionResponse(session_id=session_id, field_meta=meta)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        meta = self._report(
            AGENT_METHODS["session_load"], session_id, cwd, additional_directories, mcp_servers
        )
        return LoadSessionResponse(field_meta=meta)

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        meta = self._report(
            AGENT_METHODS["session_resume"], session_id, cwd, additional_directories, mcp_servers
        )
        return ResumeSessionResponse(field_meta=meta)

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        fork_id = uuid.uuid4().hex
        meta = self._report(
            AGENT_METHODS["session_fork"],
            fork_id,
            cwd,
            additional_directories,
            mcp_servers,
            forkedFrom=session_id,
        )
        return ForkSessionResponse(session_id=fork_id, field_meta=meta)

    async def prompt(
        self,
        session_id: str,
        prompt: list[ContentBlock],
        **kwargs: Any,
    ) -> PromptResponse:
        text = "".join(describe_block(block) for block in prompt)
        command = text.strip()
        if (match := EXIT_COMMAND.fullmatch(command)) and int(match[1]) <= 255:
            _exit_now(int(match[1]))
        if command.startswith(STDERR_PREFIX):
            print(command[len(STDERR_PREFIX) :], file=sys.stderr, flush=True)
        cancelled = asyncio.Event()
        running = self._prompts.setdefault(session_id, set())
        running.add(cancelled)
        try:
            if command == "/hang":
                await self._send_text(session_id, HANG_TEXT)
                await cancelled.wait()
                return PromptResponse(stop_reason="cancelled")
            if command == ASK_COMMAND:
                return await self._ask(session_id)
            for chunk in split_words(text):
                if self._word_delay:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(cancelled.wait(), self._word_delay)
                if cancelled.is_set():
                    break
                await self._send_text(session_id, chunk)
            return PromptResponse(stop_reason="cancelled" if cancelled.is_set() else "end_turn")
        except ConnectionError:  # stdin closed: the relay's client went; nobody reads the rest
            log.warning("the client left during a prompt of session %s: stopping it", session_id)
            return PromptResponse(stop_reason="cancelled")
        finally:
            running.discard(cancelled)
            if not running and self._prompts.get(session_id) is running:
                del self._prompts[session_id]

    async def _ask(self, session_id: str) -> PromptResponse:
        """/ask: a pretend edit announced, the client's permission asked, the answer reported."""
        if self._client is None:
            raise RuntimeError("demo agent is not connected")
        self._asks += 1
        call_id = f"ask-{self._asks}"
        where = [
            ToolCallLocation(path=os.path.join(self._cwds.get(session_id, os.getcwd()), ASK_FILE))
        ]
        start = start_tool_call(call_id, ASK_TITLE, kind="edit", status="pending", locations=where)
        await self._client.session_update(session_id=session_id, update=start)
        asked = ToolCallUpdate(
            tool_call_id=call_id, title=ASK_TITLE, kind="edit", status="pending", locations=where
        )
        try:
            answer = await self._client.request_permission(
                session_id=session_id, tool_call=asked, options=list(ASK_OPTIONS)
            )
        except RequestError as error:
            outcome, allowed, cancelled = f"error {error.code} {error}", False, False
        else:
            chosen = answer.outcome
            cancelled = not isinstance(chosen, AllowedOutcome)
            outcome = "cancelled" if cancelled else chosen.option_id
            allowed = outcome == "allow"
        done = update_tool_call(call_id, status="completed" if allowed else "failed")
        await self._client.session_update(session_id=session_id, update=done)
        await self._send_text(session_id, f"permission: {outcome}")
        return PromptResponse(stop_reason="cancelled" if cancelled else "end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        for event in self._prompts.get(session_id, ()):
            event.set()

    # Methods the demo does not support answer exactly as the SDK does for a missing handler.

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        raise RequestError.method_not_found(AGENT_METHODS["session_list"])

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_set_mode"])

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_set_config_option"])

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["authenticate"])

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        raise RequestError.method_not_found(AGENT_METHODS["session_close"])

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.debug("ignoring extension notification _%s", method)
