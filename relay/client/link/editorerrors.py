"""What ``connect`` tells the editor when the relay connection fails, in words.

Pure: values in, values out. An editor that launched ``acp-relay connect`` as its agent
waits for an answer to every request it sent; when the relay cannot be reached, refuses
the upgrade, or the socket ends, each of those requests (and every later one) gets a
JSON-RPC error whose ``message`` says the cause in words and whose ``data`` carries the
details. Which requests still await an answer is :mod:`relay.client.link.inflight`'s job.

Error code: -32603 (internal error) for every cause. ACP's -32000 ("authentication
required") would make an editor offer the agent's sign-in methods, which cannot fix a
relay ticket; -32002 ("resource not found") is about sessions and files, not the relay's
URL. ``data.cause`` tells the causes apart for programs.
"""

from __future__ import annotations

import http
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from relay.client.link.inflight import RequestId
from relay.core.exits import signal_name
from relay.core.redaction import REDACTED

INTERNAL_ERROR = -32603
MAX_REASON_CHARS = 300  # how much of an HTTP body a message quotes

HEARTBEAT_REASON = "keepalive ping timeout"  # websockets' own close reason

# What a handshake that failed at the first answer probably means: the URL's scheme is not
# what the port speaks. A relay answers a TLS hello on its plain port with plain HTTP; a TLS
# port hangs up on plain HTTP, or answers it in HTTP/1.0 (Go's servers, Caddy) or with 400.
TLS_TO_A_PLAIN_PORT = "the server does not speak TLS (for a relay without TLS use ws://)"
PLAIN_TO_A_TLS_PORT = "the port probably speaks TLS (for a relay behind TLS use wss://)"
# OpenSSL's verify codes for a certificate signed by no CA trusted here: self-signed (18),
# a self-signed CA in the chain (19), an issuer not found locally (20), a leaf that
# cannot be verified (21).
UNTRUSTED_ISSUER = frozenset({18, 19, 20, 21})
TRUST_WITH_CACERT = (
    "if this relay's certificate is yours (self-signed, or from a private CA), trust it "
    "with --cacert FILE, the PEM of that CA or of the certificate"
)
NOT_IN_CACERT = "its issuer is not in the --cacert bundle: give the PEM of the CA that signed it"

Cause = Literal["ticket", "dns", "refused", "reset", "timeout", "network", "tls", "handshake"]

# connect's own close codes for a relay that broke the protocol: a frame websockets refused or
# the resume profile's rules (1002), text that is not UTF-8 (1007), a message over
# --max-message-bytes (1009). Resuming would bring the same frame again.
RELAY_BROKE = frozenset({1002, 1007, 1009})

_CLOSE_NAMES = {
    1000: "normal closure",
    1001: "going away",
    1002: "protocol error",
    1003: "unsupported data",
    1006: "abnormal closure",
    1007: "invalid data",
    1008: "policy violation",
    1009: "message too big",
    1011: "internal error",
    1012: "service restart",
    1013: "try again later",
}


# -- failures ---------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """Why the relay connection is unusable: the error every editor request now gets.

    ``exit_status`` is what ``connect`` exits with once the editor closes its stdin.
    """

    message: str
    data: Mapping[str, Any]
    code: int = INTERNAL_ERROR
    exit_status: int = 1

    def error_response(self, request_id: RequestId) -> bytes:
        """The JSON-RPC error response to request ``request_id``, one line without ``\\n``."""
        error = {"code": self.code, "message": self.message, "data": dict(self.data)}
        response = {"jsonrpc": "2.0", "id": request_id, "error": error}
        return json.dumps(response, ensure_ascii=False, separators=(",", ":")).encode()

    def log_fields(self) -> dict[str, Any]:
        """The failure as log keys: ``reason`` its words, its data's keys in snake_case
        (``cause`` as ``kind``, the relay's own ``reason`` as ``status_reason``)."""
        fields: dict[str, Any] = {"reason": self.message}
        for key, value in self.data.items():
            fields[_LOG_KEYS.get(key) or _snake_case(key)] = value
        return fields

    def redacted(self, secret: str | None) -> Failure:
        """This failure with every occurrence of ``secret`` (the ticket) replaced."""
        if not secret:
            return self

        def scrub(value: Any) -> Any:
            return value.replace(secret, REDACTED) if isinstance(value, str) else value

        data = {key: scrub(value) for key, value in self.data.items()}
        return replace(self, message=scrub(self.message), data=data)


@dataclass(frozen=True)
class Close:
    """A close frame: code and reason."""

    code: int
    reason: str = ""


def cannot_connect(url: str, cause: Cause, detail: str) -> Failure:
    """The connection could not be made (no HTTP answer): DNS, TCP, TLS, handshake, ticket."""
    host = urlsplit(url).hostname or url
    message = _CANNOT_CONNECT[cause].format(url=url, host=host, detail=detail)
    return Failure(message, {"url": url, "cause": cause, "detail": detail})


_CANNOT_CONNECT: dict[Cause, str] = {
    "ticket": "cannot get a ticket for relay at {url}: {detail}",
    "dns": "cannot reach relay at {url}: cannot resolve {host} ({detail})",
    "refused": "cannot reach relay at {url}: connection refused",
    "reset": "cannot reach relay at {url}: {detail}",
    "timeout": "cannot reach relay at {url}: {detail}",
    "network": "cannot reach relay at {url}: {detail}",
    "tls": "TLS handshake with relay at {url} failed: {detail}",
    "handshake": "relay at {url} did not accept a WebSocket: {detail}",
}


def certificate_unverified(verify_code: int, verify_message: str, cacert_given: bool) -> str:
    """Why the relay's certificate was refused, with how to trust it when the cause is its
    issuer (``cacert_given``: the trust is ``--cacert``'s bundle, not the system's)."""
    detail = f"certificate verify failed: {verify_message}"
    if verify_code not in UNTRUSTED_ISSUER:
        return detail
    return f"{detail}; {NOT_IN_CACERT if cacert_given else TRUST_WITH_CACERT}"


def http_refusal(
    url: str, status: int, body: bytes, retry_after: str | None = None, *, watching: bool = False
) -> Failure:
    """The relay (or a proxy) answered the upgrade with ``status`` and a reason in ``body``;
    ``watching`` for a watcher's upgrade (``acp-relay watch``), whose 404 names no endpoint
    but a connection it cannot watch."""
    reason = reason_from_body(status, body)
    if status == 400 and url.startswith("ws:") and b"https" in body.lower():
        # nginx's and Go's answer to plain HTTP on a TLS port
        reason = f"{reason.rstrip('.')}; {PLAIN_TO_A_TLS_PORT}"
    if status == 401:
        message = f"relay refused the ticket (401): {reason}"
    elif status == 404 and watching:
        message = f"nothing to watch at {url} (404): {reason}"
    elif status == 404:
        message = f"relay has no ACP endpoint at {url} (404): {reason}"
    elif status == 503:
        message = f"relay is busy (503): {reason}"
    else:
        message = f"relay refused the connection ({status}): {reason}"
    data: dict[str, Any] = {"url": url, "cause": "http", "status": status, "reason": reason}
    if retry_after is not None:
        data["retryAfter"] = retry_after
    return Failure(message, data)


def reason_from_body(status: int, body: bytes) -> str:
    """The first line of a plain-text body, or the status phrase for an empty or HTML body."""
    text = body.decode("utf-8", "replace").strip()
    if not text or text.startswith("<"):
        try:
            return http.HTTPStatus(status).phrase
        except ValueError:
            return f"HTTP {status}"
    line = text.splitlines()[0].strip()
    if len(line) > MAX_REASON_CHARS:
        return line[: MAX_REASON_CHARS - 3] + "..."
    return line


def connection_closed(
    url: str,
    *,
    received: Close | None,
    sent: Close | None,
    relay_first: bool,
    ping_timeout: float,
) -> Failure:
    """The open socket ended; who closed it and how decides the words.

    ``received``/``sent`` are the close frames received from and sent to the relay
    (None when there was none); ``relay_first`` is True when the relay's came first.
    """
    if received is not None and (sent is None or relay_first):
        return _closed_by_relay(url, received)
    if sent is not None:
        return _closed_by_connect(url, sent, ping_timeout)
    data = {"url": url, "cause": "lost", "closeCode": 1006, "closeReason": ""}
    return Failure(f"lost the connection to the relay at {url} (no close frame)", data)


def closing_unanswered(url: str, why: str) -> Failure:
    """The editor closed stdin and connect is closing before the agent answered this request."""
    message = f"connect is closing (stdin ended) and the agent behind {url} did not answer: {why}"
    return Failure(message, {"url": url, "cause": "closing", "detail": why}, exit_status=0)


def stopped_unanswered(url: str, signal: int | None) -> Failure:
    """``signal`` (SIGTERM, SIGINT; None: another stop) ended connect before the agent
    answered this request. connect then exits as a process that signal interrupted, 128 +
    its number: the editor's requests were cut short."""
    by = f" by {signal_name(signal)}" if signal is not None else ""
    message = f"connect was stopped{by} before the agent behind {url} answered"
    data: dict[str, Any] = {"url": url, "cause": "stopped"}
    if signal is not None:
        data["signal"] = signal_name(signal)
    return Failure(message, data, exit_status=1 if signal is None else 128 + signal)


def could_not_resume(url: str, lost_at: str, grace: float, why: Failure) -> Failure:
    """The socket was lost and no resume succeeded: when, for how long it was tried, why."""
    message = f"lost the relay at {url} at {lost_at} and could not resume within {grace:g} s: "
    data = {**why.data, "url": url, "cause": "resume", "lostAt": lost_at, "grace": grace}
    data["lastError"] = why.message
    return Failure(message + why.message, data)


def resumable(received: Close | None, sent: Close | None = None) -> bool:
    """Whether a lost socket may be resumed: the relay sent no close frame (it did not end
    it), and connect did not close it for what the relay sent.

    A close from the relay always says why the connection is over (the agent's exit, a
    refusal, a fencing socket, shutdown); a reset, an EOF or a heartbeat that went
    unanswered come without one. A close of connect's for a frame the relay should not have
    sent (:data:`RELAY_BROKE`) is final too: the frame would come again.
    """
    return received is None and (sent is None or sent.code not in RELAY_BROKE)


def _closed_by_relay(url: str, close: Close) -> Failure:
    if close.reason.startswith("agent "):
        message = close.reason  # the relay's words: "agent exited with status 3", ...
    else:
        message = f"relay closed the connection ({_describe(close)})"
    data = {
        "url": url,
        "cause": "closed",
        "closedBy": "relay",
        "closeCode": close.code,
        "closeReason": close.reason,
    }
    return Failure(message, data, exit_status=0 if close.code == 1000 else 1)


def _closed_by_connect(url: str, close: Close, ping_timeout: float) -> Failure:
    data: dict[str, Any] = {
        "url": url,
        "cause": "closed",
        "closedBy": "connect",
        "closeCode": close.code,
        "closeReason": close.reason,
    }
    if close.code == 1011 and close.reason == HEARTBEAT_REASON:
        data.update(cause="heartbeat", pingTimeout=ping_timeout)
        message = (
            f"lost the relay at {url}: no answer to a heartbeat ping within {ping_timeout:g} s"
        )
    elif close.code == 1009:
        message = f"relay sent a message over --max-message-bytes ({close.reason})"
    elif close.code == 1007:
        data["cause"] = "protocol"
        message = f"relay at {url} sent a text frame that is not UTF-8 ({_describe(close)})"
    elif close.code == 1002:
        data["cause"] = "protocol"
        message = f"relay at {url} broke the protocol ({_describe(close)})"
    else:
        message = f"connection to the relay at {url} failed ({_describe(close)})"
    return Failure(message, data)


_LOG_KEYS = {"cause": "kind", "reason": "status_reason", "lastError": "last_reason"}


def _snake_case(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def _describe(close: Close) -> str:
    name = _CLOSE_NAMES.get(close.code, "close code")
    return f"{close.code} {name}" + (f": {close.reason}" if close.reason else "")
