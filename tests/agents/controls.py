"""An agent that offers what an editor can use beyond text: modes, a model and a reasoning
option, slash commands, images and embedded resources in prompts, usage, and sessions to
come back to. Built on the official ACP Python SDK.

``initialize``: loadSession, ``promptCapabilities`` image and embeddedContext,
``sessionCapabilities`` list and resume. ``session/new``: modes ``default``, ``plan``
and ``yolo`` (current ``default``), options ``model`` (category model: ``fast``,
``deep``) and ``effort`` (``low``, ``high``), and an ``available_commands_update`` with
``/review``. ``session/set_mode`` sends a ``current_mode_update``;
``session/set_config_option`` answers the options as they now are. Each prompt is
answered with one line per block (``text: …``, ``image MIME BYTES sha256:HEX``,
``resource URI MIME BYTES sha256:HEX``), then ``settings: mode=… model=… effort=…``,
a ``usage_update`` and ``end_turn``.

Sessions are kept as JSON files in the folder given as its first argument (one process
serves one connection, so a later connection's agent finds them there; ``--no-resume``
leaves resume out of its capabilities): ``session/list`` lists them
for a cwd, newest first; ``session/load`` replays a session's prompts and answers as
``user_message_chunk`` and ``agent_message_chunk``; ``session/resume`` takes it back
without replaying.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from acp import PROTOCOL_VERSION, run_agent, update_agent_message_text
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandsUpdate,
    Cost,
    CurrentModeUpdate,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    TextContentBlock,
    UsageUpdate,
    UserMessageChunk,
)

MODES = (("default", "Default"), ("plan", "Plan"), ("yolo", "Yolo: approves every tool"))
Category = Literal["model", "thought_level"]
OPTIONS: dict[str, tuple[Category, tuple[str, ...]]] = {
    "model": ("model", ("fast", "deep")),
    "effort": ("thought_level", ("low", "high")),
}
STORE = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
RESUME = "--no-resume" not in sys.argv  # without resume: brought back by session/load


class ControlsAgent:
    """One connection's agent: its sessions' settings and histories."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.settings: dict[str, dict[str, str]] = {}

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        capabilities = AgentCapabilities(
            load_session=True,
            prompt_capabilities=PromptCapabilities(image=True, embedded_context=True),
            session_capabilities=SessionCapabilities(
                list=SessionListCapabilities(),
                resume=SessionResumeCapabilities() if RESUME else None,
            ),
        )
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=capabilities,
            agent_info=Implementation(name="controls-agent", version="1"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = f"sess-{uuid.uuid4().hex[:12]}"
        self.settings[session_id] = {"mode": "default", "model": "fast", "effort": "low"}
        _save(session_id, {"cwd": cwd, "title": "", "history": [], "at": time.time()})
        await self._commands(session_id)
        return NewSessionResponse(session_id=session_id, modes=self._modes(session_id),
                                  config_options=self._options(session_id))  # fmt: skip

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        kept = _load(session_id)
        self.settings.setdefault(session_id, {"mode": "default", "model": "fast", "effort": "low"})
        for said, answered in kept["history"]:
            block = TextContentBlock(type="text", text=said)
            chunk = UserMessageChunk(session_update="user_message_chunk", content=block)
            await self._send(session_id, chunk)
            await self._send(session_id, update_agent_message_text(answered))
        await self._commands(session_id)
        return LoadSessionResponse(modes=self._modes(session_id),
                                   config_options=self._options(session_id))  # fmt: skip

    async def resume_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> ResumeSessionResponse:
        _load(session_id)
        self.settings.setdefault(session_id, {"mode": "default", "model": "fast", "effort": "low"})
        return ResumeSessionResponse(modes=self._modes(session_id),
                                     config_options=self._options(session_id))  # fmt: skip

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        found = []
        for path in sorted(STORE.glob("sess-*.json")):  # noqa: ASYNC240  a test's few files
            kept = json.loads(path.read_text())
            if cwd is None or kept["cwd"] == cwd:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(kept["at"]))
                found.append((kept["at"], SessionInfo(session_id=path.stem, cwd=kept["cwd"],
                                                      title=kept["title"] or None,
                                                      updated_at=stamp)))  # fmt: skip
        found.sort(key=lambda pair: -pair[0])
        return ListSessionsResponse(sessions=[info for _, info in found])

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        self.settings[session_id]["mode"] = mode_id
        await self._send(session_id, CurrentModeUpdate(session_update="current_mode_update",
                                                       current_mode_id=mode_id))  # fmt: skip
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        self.settings[session_id][config_id] = str(value)
        return SetSessionConfigOptionResponse(config_options=self._options(session_id))

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        lines = [_describe(block) for block in prompt]
        now = self.settings[session_id]
        lines.append(f"settings: mode={now['mode']} model={now['model']} effort={now['effort']}")
        answer = "\n".join(lines)
        await self._send(session_id, update_agent_message_text(answer))
        kept = _load(session_id)
        said = " ".join(getattr(block, "text", "") for block in prompt).strip()
        kept["history"].append([said, answer])
        kept["title"] = kept["title"] or said[:40]
        kept["at"] = time.time()
        _save(session_id, kept)
        usage = UsageUpdate(session_update="usage_update", used=1234 * len(kept["history"]),
                            size=200000, cost=Cost(amount=0.01, currency="USD"))  # fmt: skip
        await self._send(session_id, usage)
        return PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Nothing runs long enough to cancel."""

    def _modes(self, session_id: str) -> SessionModeState:
        return SessionModeState(
            current_mode_id=self.settings[session_id]["mode"],
            available_modes=[SessionMode(id=mode, name=name) for mode, name in MODES],
        )

    def _options(self, session_id: str) -> list[Any]:
        return [
            SessionConfigOptionSelect(
                id=option, name=option.capitalize(), category=category, type="select",
                current_value=self.settings[session_id][option],
                options=[SessionConfigSelectOption(value=v, name=v.capitalize()) for v in values],
            )
            for option, (category, values) in OPTIONS.items()
        ]  # fmt: skip

    async def _commands(self, session_id: str) -> None:
        review = AvailableCommand(name="review", description="Review the diff")
        await self._send(session_id, AvailableCommandsUpdate(
            session_update="available_commands_update", available_commands=[review]))  # fmt: skip

    async def _send(self, session_id: str, update: Any) -> None:
        assert self.client is not None
        await self.client.session_update(session_id=session_id, update=update)


def _describe(block: Any) -> str:
    """One prompt block as the agent received it (bytes counted, hashed)."""
    kind = getattr(block, "type", "?")
    if kind == "text":
        return f"text: {block.text}"
    if kind == "image":
        data = base64.b64decode(block.data)
        return f"image {block.mime_type} {len(data)} sha256:{hashlib.sha256(data).hexdigest()}"
    if kind == "resource":
        text = getattr(block.resource, "text", "")
        digest = hashlib.sha256(text.encode()).hexdigest()
        return f"resource {block.resource.uri} {block.resource.mime_type} {len(text.encode())} " \
               f"sha256:{digest}"  # fmt: skip
    return f"{kind}"


def _load(session_id: str) -> dict[str, Any]:
    return dict(json.loads((STORE / f"{session_id}.json").read_text()))


def _save(session_id: str, kept: dict[str, Any]) -> None:
    (STORE / f"{session_id}.json").write_text(json.dumps(kept))


if __name__ == "__main__":
    asyncio.run(run_agent(ControlsAgent(), use_unstable_protocol=True))  # type: ignore[arg-type]
