"""An ACP agent (Python SDK) that sends a path through every row of the relay's boundary.

Run it as ``python tests/agents/boundary.py [--ignore-capabilities]``; it needs no model.

``initialize``
    Keeps the client's capabilities; declares loadSession, sessionCapabilities.list and
    embedded context.
``session/new``
    Stores the session under its ``cwd`` and ``additionalDirectories`` as received (the box's
    paths, through the relay).
``session/list``
    Lists the stored sessions, filtered by exact ``cwd`` as real agents do.
``session/load``
    Replays the session's prompts as ``user_message_chunk`` updates, blocks as received.
``session/prompt``
    Runs the steps named in the prompt's text (all of them when it names none), then sends
    one ``agent_message_chunk`` whose text is ``REPORT_PREFIX`` + a JSON report of the
    session (``cwd``, ``additionalDirectories`` and MCP server names as received), the
    client capabilities ``initialize`` offered it (``offered``), and what each step sent
    and what came back:

    ``tools``
        ``tool_call`` and ``tool_call_update`` with ``locations`` (``<cwd>/notes.txt`` line 1
        and ``/etc/hostname``), a diff of ``<cwd>/notes.txt``, a ``resource_link`` to it and
        an embedded ``resource`` of it in tool content, and ``rawInput`` naming the box path
        (never translated).
    ``permission``
        ``session/request_permission`` whose ``toolCall`` has the same locations, diff,
        link and resource.
    ``read``, ``write``
        ``fs/read_text_file`` of ``<cwd>/notes.txt`` and of ``/etc/hostname``;
        ``fs/write_text_file`` of ``<cwd>/notes.txt``, when the client offered them (or
        with ``--ignore-capabilities``); otherwise, as real agents do, the agent reads and
        writes the same files on its own filesystem. The report says which (``by``:
        ``client`` or ``agent``).
    ``terminal``
        ``terminal/create`` of ``pwd`` in ``<cwd>``, then waits for its exit, reads its
        output and releases it, when offered (or with ``--ignore-capabilities``);
        otherwise the agent runs ``pwd`` in ``<cwd>`` itself. ``by`` as above.
    ``links``
        Echoes each ``resource_link`` and ``resource`` block of the prompt back as an
        ``agent_message_chunk`` (the URI as received).

    Only when the prompt names them:

    ``forms``
        Writes ``<cwd>/notes.txt`` and ``OUTSIDE_KEYS`` (under no mapping) and creates a
        terminal running ``pwd`` in ``<cwd>``, each in three forms: as requests (through
        the SDK; whatever was offered), as notifications (the same without an id) and as
        one batch (a JSON array of the three requests), the last two written raw. Then a
        permission request, answered by the client after anything the relay answered
        to the lines before it, and the report: each request's outcome and the errors
        with id null the agent received (``answers``).
    ``read:NAME``, ``write:NAME``, ``terminal:NAME``
        ``fs/read_text_file`` of ``<cwd>/NAME``, ``fs/write_text_file`` of NEW_TEXT to it,
        ``terminal/create`` of ``pwd`` in it, through the client whatever was offered;
        reported under the word itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    embedded_text_resource,
    resource_block,
    resource_link_block,
    run_agent,
    start_tool_call,
    tool_content,
    tool_diff_content,
    update_agent_message,
    update_agent_message_text,
    update_tool_call,
    update_user_message,
)
from acp.connection import StreamDirection, StreamEvent
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    ClientCapabilities,
    CloseSessionResponse,
    EmbeddedResourceContentBlock,
    ForkSessionResponse,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    TextContentBlock,
    ToolCallLocation,
    ToolCallUpdate,
)
from acp.stdio import stdio_streams

from relay.demo_agent.reports import ContentBlock, McpServer

AGENT_NAME = "acp-relay-boundary-test"
REPORT_PREFIX = "boundary report: "
STEPS = ("tools", "permission", "read", "write", "terminal", "links")
NOTES = "notes.txt"
OUTSIDE = "/etc/hostname"  # a box path no mapping is expected to hold
OUTSIDE_KEYS = "/root/.ssh/authorized_keys"  # another, for writing
NAMED = ("read:", "write:", "terminal:")  # steps of a path the prompt names
NEW_TEXT = "written by the boundary agent\n"


@dataclass
class Session:
    session_id: str
    cwd: str
    additional_directories: list[str]
    mcp_servers: list[str]
    prompts: list[list[ContentBlock]] = field(default_factory=list)


def file_uri(path: str) -> str:
    return PurePosixPath(path).as_uri()


def failure(exc: RequestError) -> dict[str, Any]:
    """An error answer as the report shows it."""
    return {"error": {"code": exc.code, "message": str(exc), "data": exc.data}}


class BoundaryAgent:
    """See the module's doc."""

    def __init__(
        self, ignore_capabilities: bool = False, raw: asyncio.StreamWriter | None = None
    ) -> None:
        self.ignore_capabilities = ignore_capabilities
        self.raw = raw  # the agent's stdout, for lines the SDK would not write
        self.client: Client | None = None
        self.offered = ClientCapabilities()
        self.sessions: dict[str, Session] = {}
        self.answers: list[dict[str, Any]] = []  # errors with id null, as received

    def observe(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.INCOMING and message.get("id", 0) is None:
            self.answers.append(message.get("error", {}))

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    def _conn(self) -> Client:
        if self.client is None:
            raise RuntimeError("not connected")
        return self.client

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self.offered = client_capabilities or ClientCapabilities()
        capabilities = AgentCapabilities(
            load_session=True,
            prompt_capabilities=PromptCapabilities(embedded_context=True),
            session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
        )
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=capabilities,
            auth_methods=[],
            agent_info=Implementation(name=AGENT_NAME, version="1"),
        )

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        names = [server.name for server in mcp_servers or []]
        session = Session(uuid.uuid4().hex, cwd, list(additional_directories or []), names)
        self.sessions[session.session_id] = session
        return NewSessionResponse(session_id=session.session_id)

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[McpServer] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse | None:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        for prompt in session.prompts:
            for block in prompt:
                await self._conn().session_update(session_id, update_user_message(block))
        return LoadSessionResponse()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        infos = [
            SessionInfo(
                session_id=s.session_id,
                cwd=s.cwd,
                additional_directories=s.additional_directories or None,
                title=f"session in {s.cwd}",
            )
            for s in self.sessions.values()
            if cwd is None or s.cwd == cwd
        ]
        return ListSessionsResponse(sessions=infos)

    async def prompt(
        self, session_id: str, prompt: list[ContentBlock], **kwargs: Any
    ) -> PromptResponse:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        session.prompts.append(prompt)
        words = " ".join(b.text for b in prompt if isinstance(b, TextContentBlock)).split()
        steps = [step for step in STEPS if step in words]
        named = [word for word in words if word == "forms" or word.startswith(NAMED)]
        if not steps and not named:
            steps = list(STEPS)
        report: dict[str, Any] = {
            "cwd": session.cwd,
            "additionalDirectories": session.additional_directories,
            "mcpServers": session.mcp_servers,
            "offered": self._offered(),
            "steps": steps,
        }
        for step in steps:
            report[step] = await getattr(self, f"_{step}")(session, prompt)
        for word in named:
            report[word] = await self._named(session, word)
        text = REPORT_PREFIX + json.dumps(report, sort_keys=True)
        await self._conn().session_update(session_id, update_agent_message_text(text))
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None

    def _offered(self) -> dict[str, Any]:
        """The client capabilities as ``initialize`` carried them (the SDK's defaults left out)."""
        return self.offered.model_dump(mode="json", by_alias=True, exclude_unset=True)

    # The rest of an agent's methods answer as the SDK does for a missing handler.

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        raise RequestError.method_not_found("authenticate")

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        raise RequestError.method_not_found("session/resume")

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[McpServer] | None = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        raise RequestError.method_not_found("session/fork")

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse | None:
        raise RequestError.method_not_found("session/close")

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse | None:
        raise RequestError.method_not_found("session/set_mode")

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        raise RequestError.method_not_found("session/set_config_option")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    # -- the steps -------------------------------------------------------------------------

    def _notes(self, session: Session) -> str:
        return str(PurePosixPath(session.cwd) / NOTES)

    def _locations(self, session: Session) -> list[ToolCallLocation]:
        return [ToolCallLocation(path=self._notes(session), line=1), ToolCallLocation(path=OUTSIDE)]

    def _content(self, session: Session) -> list[Any]:
        """A tool call's content: a diff of the notes, a link to them and the notes embedded."""
        notes = self._notes(session)
        embedded = resource_block(embedded_text_resource(file_uri(notes), "old\n"))
        return [
            tool_diff_content(notes, NEW_TEXT, "old\n"),
            tool_content(resource_link_block(NOTES, file_uri(notes))),
            tool_content(embedded),
        ]

    async def _tools(self, session: Session, _prompt: list[ContentBlock]) -> dict[str, Any]:
        notes = self._notes(session)
        diff = tool_diff_content(notes, NEW_TEXT, "old\n")
        start = start_tool_call(
            "call-1",
            f"Edit {notes}",
            kind="edit",
            status="pending",
            content=self._content(session),
            locations=self._locations(session),
            raw_input={"path": notes},
        )
        conn = self._conn()
        await conn.session_update(session.session_id, start)
        done = update_tool_call(
            "call-1",
            status="completed",
            content=[diff],
            locations=self._locations(session),
            raw_output={"path": notes},
        )
        await conn.session_update(session.session_id, done)
        uri = file_uri(notes)
        return {"locations": [notes, OUTSIDE], "diff": notes, "link": uri, "resource": uri}

    async def _permission(self, session: Session, _prompt: list[ContentBlock]) -> dict[str, Any]:
        notes = self._notes(session)
        call = ToolCallUpdate(
            tool_call_id="call-1",
            title=f"Edit {notes}",
            locations=self._locations(session),
            content=self._content(session),
        )
        options = [
            PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
            PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
        ]
        try:
            answer = await self._conn().request_permission(
                options=options, session_id=session.session_id, tool_call=call
            )
        except RequestError as exc:
            return failure(exc)
        return {"outcome": answer.outcome.model_dump(mode="json", by_alias=True, exclude_none=True)}

    def _may(self, offered: bool | None) -> bool:
        return bool(offered) or self.ignore_capabilities

    async def _read(self, session: Session, _prompt: list[ContentBlock]) -> dict[str, Any]:
        fs = self.offered.fs
        paths = (self._notes(session), OUTSIDE)
        if not self._may(fs.read_text_file if fs else None):
            return {"by": "agent", **{path: own_read(path) for path in paths}}
        out: dict[str, Any] = {"by": "client"}
        for path in paths:
            try:
                answer = await self._conn().read_text_file(path=path, session_id=session.session_id)
                out[path] = {"content": answer.content}
            except RequestError as exc:
                out[path] = failure(exc)
        return out

    async def _write(self, session: Session, _prompt: list[ContentBlock]) -> dict[str, Any]:
        fs = self.offered.fs
        path = self._notes(session)
        if not self._may(fs.write_text_file if fs else None):
            return {"by": "agent", path: own_write(path)}
        try:
            await self._conn().write_text_file(
                content=NEW_TEXT, path=path, session_id=session.session_id
            )
        except RequestError as exc:
            return {"by": "client", path: failure(exc)}
        return {"by": "client", path: {"written": NEW_TEXT}}

    async def _terminal(self, session: Session, _prompt: list[ContentBlock]) -> dict[str, Any]:
        if not self._may(self.offered.terminal):
            return {"by": "agent", "cwd": session.cwd, **await own_pwd(session.cwd)}
        conn, sid = self._conn(), session.session_id
        ran: dict[str, Any] = {"by": "client", "cwd": session.cwd}
        try:
            created = await conn.create_terminal(command="pwd", session_id=sid, cwd=session.cwd)
            term = created.terminal_id
            exited = await conn.wait_for_terminal_exit(session_id=sid, terminal_id=term)
            output = await conn.terminal_output(session_id=sid, terminal_id=term)
            await conn.release_terminal(session_id=sid, terminal_id=term)
        except RequestError as exc:
            return {**ran, **failure(exc)}
        return {**ran, "exit": exited.exit_code, "output": output.output}

    async def _named(self, session: Session, word: str) -> dict[str, Any]:
        """A step the prompt names with its path, through the client whatever was offered."""
        if word == "forms":
            return await self._forms(session)
        step, _, name = word.partition(":")
        path, sid, conn = str(PurePosixPath(session.cwd) / name), session.session_id, self._conn()
        try:
            if step == "read":
                return {"content": (await conn.read_text_file(path=path, session_id=sid)).content}
            if step == "write":
                await conn.write_text_file(content=NEW_TEXT, path=path, session_id=sid)
                return {"written": NEW_TEXT}
            created = await conn.create_terminal(command="pwd", session_id=sid, cwd=path)
            await conn.release_terminal(session_id=sid, terminal_id=created.terminal_id)
        except RequestError as exc:
            return failure(exc)
        return {"created": True}

    def _calls(self, session: Session) -> list[tuple[str, dict[str, Any]]]:
        """What ``forms`` sends in each form: two writes, one outside every mapping, and a
        terminal."""
        sid = session.session_id
        return [
            ("fs/write_text_file", {"sessionId": sid, "path": self._notes(session),
                                    "content": NEW_TEXT}),
            ("fs/write_text_file", {"sessionId": sid, "path": OUTSIDE_KEYS, "content": NEW_TEXT}),
            ("terminal/create", {"sessionId": sid, "command": "pwd", "cwd": session.cwd}),
        ]  # fmt: skip

    async def _forms(self, session: Session) -> dict[str, Any]:
        calls = self._calls(session)
        requests = [await self._request(session, method, params) for method, params in calls]
        notifications = [{"jsonrpc": "2.0", "method": m, "params": p} for m, p in calls]
        batch = [{"jsonrpc": "2.0", "id": f"batch-{i}", "method": m, "params": p}
                 for i, (m, p) in enumerate(calls)]  # fmt: skip
        await self._write_raw([*notifications, batch])
        barrier = await self._permission(session, [])
        return {"requests": requests, "answers": list(self.answers), "barrier": barrier}

    async def _request(self, session: Session, method: str, params: dict[str, Any]) -> Any:
        """One of ``forms``'s calls as a request through the SDK: its answer as reported."""
        conn, sid = self._conn(), session.session_id
        try:
            if method == "terminal/create":
                created = await conn.create_terminal(
                    command=params["command"], session_id=sid, cwd=params["cwd"]
                )
                await conn.release_terminal(session_id=sid, terminal_id=created.terminal_id)
                return {"created": True}
            await conn.write_text_file(
                content=params["content"], path=params["path"], session_id=sid
            )
        except RequestError as exc:
            return failure(exc)
        return {"written": params["content"]}

    async def _write_raw(self, messages: list[Any]) -> None:
        """Each of ``messages`` on its own line of the agent's stdout, as the SDK never would."""
        if self.raw is None:
            raise RuntimeError("no raw stdout")
        for message in messages:
            self.raw.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await self.raw.drain()

    async def _links(self, session: Session, prompt: list[ContentBlock]) -> list[str]:
        echoed = []
        for block in prompt:
            if isinstance(block, ResourceContentBlock):
                echoed.append(block.uri)
            elif isinstance(block, EmbeddedResourceContentBlock):
                echoed.append(block.resource.uri)
            else:
                continue
            await self._conn().session_update(session.session_id, update_agent_message(block))
        return echoed


def own_read(path: str) -> dict[str, Any]:
    """A file read on the agent's own filesystem, as the report shows it."""
    try:
        return {"content": Path(path).read_text()}
    except OSError as exc:
        return {"error": {"message": str(exc)}}


def own_write(path: str) -> dict[str, Any]:
    """NEW_TEXT written on the agent's own filesystem, as the report shows it."""
    try:
        Path(path).write_text(NEW_TEXT)
    except OSError as exc:
        return {"error": {"message": str(exc)}}
    return {"written": NEW_TEXT}


async def own_pwd(cwd: str) -> dict[str, Any]:
    """``pwd`` run by the agent itself in ``cwd``: its exit status and output."""
    try:
        process = await asyncio.create_subprocess_exec(
            "pwd", cwd=cwd, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
        )
    except OSError as exc:
        return {"error": {"message": str(exc)}}
    output, _ = await process.communicate()
    return {"exit": process.returncode, "output": output.decode()}


def last_report(texts: Sequence[str]) -> dict[str, Any]:
    """The agent's last report among the texts of its ``agent_message_chunk`` updates."""
    reports = [text for text in texts if text.startswith(REPORT_PREFIX)]
    assert reports, "the agent sent no report"
    report: dict[str, Any] = json.loads(reports[-1].removeprefix(REPORT_PREFIX))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--ignore-capabilities",
        action="store_true",
        help="call fs/* and terminal/* even when the client did not offer them",
    )
    args = parser.parse_args(argv)
    asyncio.run(serve_stdio(args.ignore_capabilities))


async def serve_stdio(ignore_capabilities: bool) -> None:
    """The agent on its stdin and stdout, which it may also write raw lines to."""
    reader, writer = await stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    agent = BoundaryAgent(ignore_capabilities, raw=writer)
    await run_agent(agent, writer, reader, use_unstable_protocol=True, observers=[agent.observe])


if __name__ == "__main__":
    main(sys.argv[1:])
