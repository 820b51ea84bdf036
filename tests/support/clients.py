"""ACP SDK clients for tests: one that keeps the agent's text, one that records everything,
an editor whose machine is one folder; and a transport that keeps the raw frames."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import RequestError
from acp.connection import StreamDirection, StreamEvent
from acp.interfaces import Agent
from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ClientCapabilities,
    ConfigOptionUpdate,
    CreateElicitationResponse,
    CreateTerminalResponse,
    CurrentModeUpdate,
    ElicitationMode,
    EnvVariable,
    FileSystemCapabilities,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    TerminalOutputResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed


class ChunkClient:
    """An ACP SDK client that keeps the text of the agent's ``agent_message_chunk``s."""

    def __init__(self) -> None:
        self.chunks: list[str] = []

    async def session_update(self, session_id: str, update: object, **_: object) -> None:
        content = getattr(update, "content", None)
        if getattr(update, "session_update", "") == "agent_message_chunk" and content:
            self.chunks.append(getattr(content, "text", ""))

    def __getattr__(self, name: str) -> object:
        raise AttributeError(name)


SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AgentPlanContentUpdate
    | AgentPlanRemovedUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)


class RecordingClient:
    """ACP client that records session updates and every raw message from the agent.

    ``permission``, when given, answers the agent's permission requests; without it they
    get -32601 like every other request to the client.
    """

    def __init__(self, permission: RequestPermissionResponse | None = None) -> None:
        self.updates: list[tuple[str, SessionUpdate]] = []
        self.incoming: list[dict[str, Any]] = []
        self.permission = permission
        self._changed = asyncio.Condition()

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            self.incoming.append(event.message)

    def texts(self, session_id: str) -> list[str]:
        return [
            update.content.text
            for sid, update in self.updates
            if sid == session_id
            and isinstance(update, AgentMessageChunk)
            and isinstance(update.content, TextContentBlock)
        ]

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def session_update(self, session_id: str, update: SessionUpdate, **kwargs: Any) -> None:
        async with self._changed:
            self.updates.append((session_id, update))
            self._changed.notify_all()

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        if self.permission is None:
            raise RequestError.method_not_found("session/request_permission")
        return self.permission

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        raise RequestError.method_not_found("fs/read_text_file")

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        raise RequestError.method_not_found("terminal/create")

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        raise RequestError.method_not_found("terminal/output")

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        raise RequestError.method_not_found("terminal/release")

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        raise RequestError.method_not_found("terminal/wait_for_exit")

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse | None:
        raise RequestError.method_not_found("terminal/kill")

    async def create_elicitation(
        self, message: str, mode: ElicitationMode, **kwargs: Any
    ) -> CreateElicitationResponse:
        raise RequestError.method_not_found("elicitation/create")

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    def on_connect(self, conn: Agent) -> None:
        return None


# -- an editor whose machine is one folder -------------------------------------------------

EDITOR_CAPABILITIES = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True
)
"""What Zed and VS Code's ACP client declare: the editor reads, writes and runs for the agent."""


@dataclass
class Terminal:
    """A command the editor runs for the agent, and what it printed so far."""

    process: asyncio.subprocess.Process
    output: bytearray = field(default_factory=bytearray)
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(65536):
            self.output.extend(chunk)


class FolderEditor(RecordingClient):
    """An editor whose machine is the folder ``root``: it offers fs and terminal
    (:data:`EDITOR_CAPABILITIES`), reads and writes real files and runs real commands there
    (a path outside ``root`` is not on its machine: -32002), allows each tool call once
    (never "always", which an agent may refuse in a folder it does not trust), and records
    each request it was sent as (method, params as the SDK read them)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root.resolve()
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.terminals: dict[str, Terminal] = {}

    def _local(self, path: str) -> Path:
        """``path`` on the editor's machine, or the error an editor answers for a path it has
        not got."""
        local = Path(path)
        if not local.is_absolute() or not local.resolve().is_relative_to(self.root):
            raise RequestError.resource_not_found(path)
        return local

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:  # fmt: skip
        self.calls.append(("fs/read_text_file", {"path": path}))
        local = self._local(path)
        try:
            return ReadTextFileResponse(content=await asyncio.to_thread(local.read_text))
        except OSError:
            raise RequestError.resource_not_found(path) from None

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        self.calls.append(("fs/write_text_file", {"path": path, "content": content}))
        await asyncio.to_thread(self._local(path).write_text, content)
        return WriteTextFileResponse()

    async def create_terminal(
        self, session_id: str, command: str, args: list[str] | None = None,
        env: list[EnvVariable] | None = None, cwd: str | None = None,
        output_byte_limit: int | None = None, **kwargs: Any,
    ) -> CreateTerminalResponse:  # fmt: skip
        self.calls.append(("terminal/create", {"command": command, "cwd": cwd}))
        where = self._local(cwd) if cwd is not None else self.root
        process = await asyncio.create_subprocess_exec(
            command, *(args or []), cwd=where,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        terminal = Terminal(process)
        terminal.reader = asyncio.create_task(terminal.read())
        terminal_id = f"term-{len(self.terminals) + 1}"
        self.terminals[terminal_id] = terminal
        return CreateTerminalResponse(terminal_id=terminal_id)

    def _terminal(self, terminal_id: str) -> Terminal:
        if terminal_id not in self.terminals:
            raise RequestError.resource_not_found(terminal_id)
        return self.terminals[terminal_id]

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        terminal = self._terminal(terminal_id)
        status = await terminal.process.wait()
        if terminal.reader is not None:
            await terminal.reader
        return WaitForTerminalExitResponse(exit_code=status)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        output = self._terminal(terminal_id).output.decode("utf-8", "replace")
        return TerminalOutputResponse(output=output, truncated=False)

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse | None:
        await self._stop(self.terminals.pop(terminal_id))
        return ReleaseTerminalResponse()

    async def _stop(self, terminal: Terminal) -> None:
        if terminal.process.returncode is None:
            terminal.process.kill()
        await terminal.process.wait()
        if terminal.reader is not None:
            await terminal.reader

    async def close(self) -> None:
        """Stop the terminals the agent never released."""
        while self.terminals:
            await self._stop(self.terminals.popitem()[1])

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:  # fmt: skip
        self.calls.append(("session/request_permission", {"toolCall": tool_call}))
        once = [option for option in options if option.kind == "allow_once"] or options
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=once[0].option_id)
        )

    def raw(self, method: str) -> list[dict[str, Any]]:
        """The params of every message of ``method`` the agent sent, as they arrived."""
        return [m["params"] for m in self.incoming if m.get("method") == method]

    def updates_of(self, *kinds: str) -> list[dict[str, Any]]:
        """The ``update`` of every ``session/update`` of these kinds, as it arrived."""
        updates = [params["update"] for params in self.raw("session/update")]
        return [u for u in updates if u.get("sessionUpdate") in kinds]


class RawFrames:
    """An ACP SDK transport over a WebSocket that keeps each text frame it received, as
    received (the SDK's own, :mod:`acp.ws`, parses and forgets them); one that is not a
    JSON object (a batch, which the SDK cannot take) is kept, not handed to the SDK."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[str] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message, separators=(",", ":")))

    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                frame = await self.ws.recv()
            except ConnectionClosed:
                return None
            if isinstance(frame, str):
                self.frames.append(frame)
                message = json.loads(frame)
                if isinstance(message, dict):
                    return message

    async def close(self) -> None:
        with suppress(ConnectionClosed):
            await self.ws.close()


class RawLines:
    """An ACP SDK transport over an agent command's stdio (``acp-relay connect``) that keeps
    each line it read from the command's stdout, as read (as :class:`RawFrames` does)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.stdin, self.stdout = process.stdin, process.stdout
        self.frames: list[str] = []

    async def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await self.stdin.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self.stdout.readline()
            if not line.endswith(b"\n"):
                return None
            self.frames.append(line[:-1].decode())
            message = json.loads(line)
            if isinstance(message, dict):
                return message

    async def close(self) -> None:
        if not self.stdin.is_closing():
            self.stdin.close()
