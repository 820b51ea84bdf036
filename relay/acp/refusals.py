"""The relay's own answers where a path cannot cross the boundary, and what it sends back.

Pure. When :class:`relay.acp.boundary.Boundary` must not pass a message on (an agent's
``fs/*`` or ``terminal/*`` request under ``--files box``, a box path no ``--cwd-map`` rule
maps in a request under ``shared``, a line it must read but cannot), the relay answers
it itself: to the agent as a :class:`ToAgent`, to the editor as a
:class:`relay.core.framing.FrameRefused`. Each answer is a JSON-RPC error whose ``data``
says what was wrong and what to do; an echoed path is bounded
(:data:`relay.acp.rewrite.SHOWN_CHARS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from relay.acp.paths import CwdPolicy, CwdRule, PathRefused
from relay.acp.rewrite import Files, PathProblem, RewriteReport, bounded, refusal
from relay.core import strictjson
from relay.core.framing import FrameRefused, error_reply


@dataclass(frozen=True)
class ToAgent:
    """Send ``reply`` (a JSON-RPC error line, no ``\\n``) back to the agent instead of
    forwarding its line to the editor; ``reason`` is for the log."""

    reply: bytes
    reason: str
    report: RewriteReport


def unreadable_request(problem: strictjson.JsonRefused) -> ToAgent:
    """The answer to an agent line that may be an fs/ or terminal/ request, unreadable."""
    reason = f"an agent line that may be an fs/ or terminal/ request is unreadable: {problem}"
    reply = error_reply(
        -32600,
        "Invalid request: the relay cannot read this request, so it did not pass it on",
        reason,
        "write each request as one JSON object per line, each key once, with valid Unicode text",
    )
    return ToAgent(reply, reason, RewriteReport("(unreadable)", refused="(the line)"))


def too_many_values(limit: int) -> FrameRefused:
    """The relay's -32600 to an editor's line it must read whole that may hold more than
    ``limit`` JSON values: reading it would cost every connection's turn."""
    reason = (
        f"a line that may be initialize, session/list or open a session may hold more than "
        f"{limit} JSON values (counted from its commas and brackets, those in text included)"
    )
    reply = error_reply(
        -32600,
        "Invalid request: the relay cannot check this session request",
        reason,
        "send it with fewer values: the relay reads these requests whole, to translate "
        "their paths, and bounds what reading one may cost",
    )
    return FrameRefused(reply, reason)


def batch_request() -> ToAgent:
    """The answer to an agent's batch (a JSON array line; ACP v1 has none) that may hold an
    fs/ or terminal/ message: none of it reaches the editor."""
    reason = "an agent line that may hold an fs/ or terminal/ message is a batch (a JSON array)"
    reply = error_reply(
        -32600,
        "Invalid request: ACP has no batches, and the relay does not pass on one that may "
        "hold an fs/ or terminal/ message",
        reason,
        "send each request and notification on its own line, as one JSON object",
    )
    return ToAgent(reply, reason, RewriteReport("(batch)", refused="(the batch)"))


def refused_filter(
    message: dict[str, Any], where: str, value: str, refused: PathRefused, cwd: CwdPolicy
) -> FrameRefused:
    """The answer to an editor's request whose path cannot be given to the agent."""
    name = where.removeprefix("params.")
    return refusal(message.get("id"), PathProblem(name, value, refused), cwd)


def withheld_method(message: dict[str, Any], report: RewriteReport) -> ToAgent:
    """The answer to an agent's request for a capability the relay withheld (--files box)."""
    method = str(message.get("method"))
    capability = method.split("/")[0]
    report.refused = method
    text = (
        f"Method not found: {method} is not available: the relay withheld the editor's "
        f"{capability} capability (--files box)"
    )
    data = {
        "method": method,
        "withheld": capability,
        "files": Files.BOX.value,
        "hint": "use the box's own filesystem and terminal (the session's cwd is a folder "
        "of the box); to use the editor's instead, the relay's operator sets --files "
        "shared and maps the folders with --cwd-map",
    }
    reply = error(message.get("id"), -32601, text, data)
    return ToAgent(reply, f"{method} answered by the relay: {capability} withheld", report)


def unmapped_request(
    message: dict[str, Any],
    where: str,
    value: str,
    report: RewriteReport,
    rules: Sequence[CwdRule],
) -> ToAgent:
    """The answer to an agent's request whose box path no rule maps to the editor's."""
    method = str(message.get("method"))
    shown = bounded(value)
    report.refused = where
    report.left.append((where, value))
    text = (
        f"Invalid params: {where} {shown} is not under a folder the relay maps to the "
        "editor's machine (--cwd-map), so the editor cannot use it"
    )
    data = {
        "method": method,
        "field": where,
        "boxPath": shown,
        "mappings": [rule.text for rule in rules] or ["none"],
        "hint": "use a path under one of the mapped folders (after '=' in each mapping), "
        "or read, write and run it with the box's own tools; the relay's operator can add "
        "a --cwd-map rule for it",
    }
    reply = error(message.get("id"), -32602, text, data)
    return ToAgent(reply, f"{method} answered by the relay: {where} is under no mapping", report)


def linked_out(
    message: dict[str, Any], where: str, value: str, real: str, rule: CwdRule, report: RewriteReport
) -> ToAgent:
    """The answer to an agent's request whose box path, under a rule, leads out of the
    rule's folder through a symbolic link (--files shared)."""
    method = str(message.get("method"))
    shown = bounded(value)
    report.refused = where
    text = (
        f"Invalid params: {where} {shown} leads out of the mapped folder {rule.agent_path} "
        "through a symbolic link, so the relay did not pass it to the editor"
    )
    data = {
        "method": method,
        "field": where,
        "boxPath": shown,
        "realPath": bounded(real),
        "mappedFolder": rule.agent_path,
        "hint": "name a file whose real path is inside the mapped folder, or read, write and "
        "run it with the box's own tools",
    }
    reply = error(message.get("id"), -32602, text, data)
    return ToAgent(
        reply, f"{method} answered by the relay: {where} links out of its mapping", report
    )


def too_many_pending(request_id: Any, method: str, limit: int) -> FrameRefused:
    """The answer to an editor's request past the bound of those awaiting the agent."""
    reason = f"{limit} {method} requests of this connection are still waiting for the agent"
    data = {"detail": reason, "hint": f"wait for the answers to earlier {method} requests"}
    message = f"Invalid request: too many {method} requests waiting for an answer"
    return FrameRefused(error(request_id, -32600, message, data), reason)


def error(request_id: Any, code: int, message: str, data: dict[str, Any]) -> bytes:
    """A JSON-RPC error answering ``request_id`` (spelled as it came)."""
    body = {"code": code, "message": message, "data": data}
    return strictjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": body})


def id_key(request_id: Any) -> tuple[str, object] | None:
    """A request id as the key it is matched by: a string as it is, a number by its value
    (``1E2`` and ``100`` are one id, as agents read them); None for what cannot be an id."""
    if isinstance(request_id, str):
        return ("s", request_id)
    if isinstance(request_id, bool):
        return None
    text = request_id.text if isinstance(request_id, strictjson.Number) else None
    if isinstance(request_id, int):
        text = str(request_id)
    if text is None:
        return None
    try:
        return ("n", Decimal(text))
    except InvalidOperation:
        return None
