"""The session-opening requests: their paths mapped, the relay's MCP servers merged in.

Pure. The boundary (:mod:`relay.acp.boundary`) hands these requests, parsed, to
:meth:`SessionRewriter.rewrite_parsed`, and the agent's ``initialize`` reply to
:meth:`SessionRewriter.learn_capabilities`. On its own, client-to-agent lines pass through
:meth:`SessionRewriter.client_line` (the connection's interface before the boundary); only lines
whose raw bytes could hold a session-opening method (``session/new``, ``session/load``,
``session/resume``, ``session/fork``) are ever parsed, and only those requests are
rewritten: ``cwd`` and ``additionalDirectories`` translated to the agent's filesystem
(:mod:`relay.acp.paths`), the relay's MCP servers merged in (:mod:`relay.acp.mcp`). Every other
field keeps its value and place. A path that cannot be given to the agent is answered
by the relay with a -32602 error and nothing reaches the agent. Agent-to-client lines
are only looked at until the agent's ``initialize`` reply says which MCP transports it
takes.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relay.acp.mcp import Capabilities, McpPolicy, MergeReport, merge
from relay.acp.paths import CwdPolicy, CwdRule, PathRefused, describe_rules, translate
from relay.core import strictjson
from relay.core.framing import FrameRefused, error_reply


class Files(enum.StrEnum):
    """Who serves files and terminals to the agent (``--files``), parsed once by the
    configuration. A string, so that logs and JSON write it as its name."""

    BOX = "box"  # the editor's fs and terminal capabilities withheld: the box's own
    SHARED = "shared"  # the editor's, reached through --cwd-map
    PASS = "pass"  # capabilities and the agent's paths pass unchanged


SHOWN_CHARS = 512  # of a path a reply echoes
SESSION_OPENING_METHODS = ("session/new", "session/load", "session/resume", "session/fork")
MCP_REQUIRED = ("session/new", "session/load")  # mcpServers optional on resume and fork
_MARKER = b'"session/'
_METHOD_BYTES = tuple(m.encode() for m in SESSION_OPENING_METHODS)
_CAPS_MARKER = b'"agentCapabilities"'
# ``marker in line`` on bytes first tries the marker as an integer, making and dropping a
# TypeError each time (CPython 3.11): the byte tests use find(), and a code for one byte.
_BACKSLASH = 0x5C
METHOD_ESCAPE = re.compile(rb"\\(?:/|u00(?:2[fF]|[67][0-9a-fA-F]))")  # '/' or 'a'-'z' escaped


def might_open_session(line: bytes) -> bool:
    """Cheap test on raw bytes: False means the line certainly opens no session."""
    if line.find(_MARKER) == -1 and _BACKSLASH not in line:
        return False  # nearly every line: two scans, nothing else
    if line.find(_MARKER) != -1 and any(line.find(m) != -1 for m in _METHOD_BYTES):
        return True
    # JSON may spell the method with escapes ("session\/new", "\u0073ession/new"): any
    # escape of '/' or of a lowercase ASCII letter makes the line a candidate.
    return _BACKSLASH in line and METHOD_ESCAPE.search(line) is not None


@dataclass(frozen=True)
class RewritePolicy:
    """Everything the boundary needs: path mapping, MCP servers, and who serves files
    and terminals to the agent (``--files``)."""

    cwd: CwdPolicy
    mcp: McpPolicy
    files: Files = Files.BOX


@dataclass(frozen=True)
class Translation:
    """One path or URI translated where it crossed: the field (``params.cwd``,
    ``params.update.locations[0].path``), its value as it came and as it went on."""

    field: str
    before: str
    after: str

    def __str__(self) -> str:
        return f"{self.field}: {self.before} -> {self.after}"


@dataclass
class RewriteReport:
    """What the relay changed in one message, for its trace record and log line.

    A session-opening request fills ``cwd_from``/``cwd_to``, ``directories`` and ``mcp``;
    every other crossing fills ``translations``. ``withheld`` names the editor's
    capabilities taken out of ``initialize``; ``left`` the box paths under no mapping that
    went on as they were; ``refused`` the field a request was answered for instead.
    """

    method: str
    cwd_from: str | None = None
    cwd_to: str | None = None
    directories: list[tuple[str, str]] = field(default_factory=list)
    mcp: MergeReport | None = None
    withheld_because: str | None = None  # set on the first withholding of a connection
    translations: list[Translation] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)
    refused: str | None = None

    @property
    def opens_session(self) -> bool:
        """Whether the message is a session-opening request (logged as such, with its paths)."""
        return self.method in SESSION_OPENING_METHODS

    def crossings(self) -> list[Translation]:
        """Every translation of this message, the session-opening ones included."""
        out = []
        if self.cwd_from is not None and self.cwd_to is not None:
            out.append(Translation("params.cwd", self.cwd_from, self.cwd_to))
        out.extend(
            Translation(f"params.additionalDirectories[{i}]", a, b)
            for i, (a, b) in enumerate(self.directories)
        )
        return out + self.translations

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method}
        if self.cwd_from is not None or not (self.translations or self.withheld or self.left):
            out.update(cwd_from=self.cwd_from, cwd_to=self.cwd_to)
        if self.directories:
            out["additional_directories"] = [f"{a} -> {b}" for a, b in self.directories]
        if self.mcp is not None:
            out.update(
                mcp_injected=self.mcp.injected,
                mcp_dropped=self.mcp.dropped,
                mcp_overridden=self.mcp.overridden,
                mcp_withheld=self.mcp.withheld,
            )
        if self.withheld_because:
            out["withheld_because"] = self.withheld_because
        if self.translations:
            out["translations"] = [str(t) for t in self.translations]
        if self.withheld:
            out["withheld_capabilities"] = self.withheld
        if self.left:
            out["left_unmapped"] = [f"{where}: {value}" for where, value in self.left]
        if self.refused is not None:
            out["refused"] = self.refused
        return out


@dataclass(frozen=True)
class Rewritten:
    """The line to send instead, and what changed."""

    line: bytes
    report: RewriteReport


class SessionRewriter:
    """Rewrites the session-opening requests of one connection."""

    def __init__(
        self,
        policy: RewritePolicy | None = None,
        exists: Callable[[str], bool] = lambda _path: True,
    ) -> None:
        self.policy = policy
        self.exists = exists
        self.capabilities = Capabilities()
        self.initialized = False  # the agent's initialize reply was seen
        self.last_rule: CwdRule | None = None  # the rule the last cwd was translated by
        self._told_withheld = False

    @property
    def watches_agent(self) -> bool:
        """Whether agent lines must be shown to :meth:`agent_line` (until ``initialize``)."""
        return self.policy is not None and bool(self.policy.mcp.servers) and not self.initialized

    def agent_line(self, line: bytes) -> bool:
        """Look for the agent's ``initialize`` reply; False once seen (stop showing lines)."""
        if line.find(_CAPS_MARKER) == -1:
            return True
        try:
            message = strictjson.loads(line)
        except strictjson.JsonRefused:  # unreadable, or too large or deep to be the reply
            return True
        return not self.learn_capabilities(message)

    def learn_capabilities(self, message: Any) -> bool:
        """Take the MCP transports from the agent's ``initialize`` reply; whether it was."""
        result = message.get("result") if isinstance(message, dict) else None
        if not isinstance(result, dict) or "agentCapabilities" not in result:
            return False
        self.capabilities = Capabilities.from_initialize(result)
        self.initialized = True
        return True

    def client_line(self, line: bytes) -> bytes | FrameRefused | Rewritten:
        """The line for the agent, a refusal to answer the client with, or a rewrite."""
        if self.policy is None or (line.find(_MARKER) == -1 and _BACKSLASH not in line):
            return line  # nearly every line (might_open_session's first test, inlined)
        if not might_open_session(line):
            return line
        try:
            # Read whole and unambiguously, or refused: passing on a line the relay could
            # not read would let a session request dodge the rewrite.
            message = strictjson.loads(line)
        except strictjson.JsonRefused as exc:
            return unreadable(exc)
        return self.rewrite_parsed(line, message)

    def rewrite_parsed(self, line: bytes, message: Any) -> bytes | FrameRefused | Rewritten:
        """:meth:`client_line` for a line already read (``message``)."""
        if self.policy is None:
            return line
        if not isinstance(message, dict) or message.get("method") not in SESSION_OPENING_METHODS:
            return line
        params = message.get("params")
        if "id" not in message or not isinstance(params, dict):
            return line  # a notification, or no params: the agent answers it as it must
        return self._rewrite(line, message, params, self.policy)

    def _rewrite(
        self, line: bytes, message: dict[str, Any], params: dict[str, Any], policy: RewritePolicy
    ) -> bytes | FrameRefused | Rewritten:
        report = RewriteReport(message["method"])
        refused = self._paths(params, policy.cwd, report)
        if refused is not None:
            return refusal(message["id"], refused, policy.cwd)
        changed = self._servers(message["method"], params, policy.mcp, report)
        changed = changed or report.cwd_from != report.cwd_to
        changed = changed or any(a != b for a, b in report.directories)
        if not changed:
            return line
        return Rewritten(strictjson.dumps(message), report)

    def _paths(
        self, params: dict[str, Any], cwd: CwdPolicy, report: RewriteReport
    ) -> PathProblem | None:
        if isinstance(params.get("cwd"), str):
            result = translate(params["cwd"], cwd, self.exists)
            if isinstance(result, PathRefused):
                return PathProblem("cwd", params["cwd"], result)
            report.cwd_from, report.cwd_to = params["cwd"], result.path
            params["cwd"] = result.path
            self.last_rule = result.rule or self.last_rule
        directories = params.get("additionalDirectories")
        if isinstance(directories, list):
            return self._directories(directories, cwd, report)
        return None

    def _directories(
        self, directories: list[Any], cwd: CwdPolicy, report: RewriteReport
    ) -> PathProblem | None:
        for i, entry in enumerate(directories):
            if not isinstance(entry, str):
                continue
            result = translate(entry, cwd, self.exists)
            if isinstance(result, PathRefused):
                return PathProblem(f"additionalDirectories[{i}]", entry, result)
            report.directories.append((entry, result.path))
            directories[i] = result.path
        return None

    def _servers(
        self, method: str, params: dict[str, Any], mcp: McpPolicy, report: RewriteReport
    ) -> bool:
        if not mcp.servers and mcp.merge == "append" and not mcp.drop_client_stdio:
            return False
        client = params.get("mcpServers")
        if not isinstance(client, list):
            if method not in MCP_REQUIRED and not mcp.servers:
                return False
            client = []
        merged, report.mcp = merge(client, mcp, self.capabilities)
        if report.mcp.withheld and not self._told_withheld:
            self._told_withheld = True
            report.withheld_because = (
                f"the agent declared mcpCapabilities http={self.capabilities.http} "
                f"sse={self.capabilities.sse} in its initialize reply"
            )
        if method not in MCP_REQUIRED and "mcpServers" not in params and not merged:
            return False
        if merged == params.get("mcpServers"):
            return False
        params["mcpServers"] = merged
        return True


@dataclass(frozen=True)
class PathProblem:
    """Which field of the request held a path the agent cannot be given."""

    field: str
    client_path: str
    refused: PathRefused


def bounded(text: str) -> str:
    """``text`` as a reply echoes it: at most :data:`SHOWN_CHARS` characters, saying how long
    it was (a request cannot make the relay's answer as large as itself)."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}…({len(text)} chars)"


def refusal(request_id: Any, problem: PathProblem, cwd: CwdPolicy) -> FrameRefused:
    """The relay's own -32602 answer to a session request whose path cannot be mapped."""
    mappings = describe_rules(cwd)
    agent = problem.refused.agent_path
    client_path = bounded(problem.client_path)
    why = bounded(problem.refused.why)
    message = (
        f"{problem.field} {client_path} cannot be used on the agent's machine: "
        f"{why}. Mappings in force: {'; '.join(mappings)}"
    )
    data = {
        "field": problem.field,
        "clientPath": client_path,
        "agentPath": None if agent is None else bounded(agent),
        "mappings": mappings,
        "hint": "open a folder the relay maps, or ask its operator for a --cwd-map rule",
    }
    error = {"code": -32602, "message": message, "data": data}
    reply = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return FrameRefused(strictjson.dumps(reply), message)  # the id exactly as it came


def unreadable(problem: strictjson.JsonRefused, what: str = "may open a session") -> FrameRefused:
    """The relay's -32600 to a line it must read (``what`` it may be) but cannot in full."""
    how = (
        "nested too deeply for the relay to read"
        if isinstance(problem, strictjson.TooDeep)
        else f"not readable as one unambiguous JSON object: {problem}"
    )
    reason = f"a line that {what} is {how}"
    reply = error_reply(
        -32600,
        "Invalid request: the relay cannot check this session request",
        reason,
        "send initialize, session/new, session/load, session/resume, session/fork and "
        f"session/list as compact JSON under {strictjson.MAX_BYTES} bytes, each key once, "
        "with valid Unicode text",
    )
    return FrameRefused(reply, reason)
