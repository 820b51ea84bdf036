"""Tests for relay.client.link.editorerrors: the errors connect answers the editor's requests
with."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.client.link.editorerrors import (
    NOT_IN_CACERT,
    PLAIN_TO_A_TLS_PORT,
    TRUST_WITH_CACERT,
    Close,
    Failure,
    cannot_connect,
    certificate_unverified,
    connection_closed,
    http_refusal,
    reason_from_body,
    resumable,
    stopped_unanswered,
)

URL = "ws://127.0.0.1:9/acp"


# -- failures ---------------------------------------------------------------------------


def test_error_response_is_one_json_rpc_line() -> None:
    """The error response echoes the id, uses -32603 and carries message and data."""
    failure = cannot_connect(URL, "refused", "Connection refused")
    raw = failure.error_response("req-1")
    assert b"\n" not in raw
    assert json.loads(raw) == {
        "jsonrpc": "2.0",
        "id": "req-1",
        "error": {
            "code": -32603,
            "message": "cannot reach relay at ws://127.0.0.1:9/acp: connection refused",
            "data": {"url": URL, "cause": "refused", "detail": "Connection refused"},
        },
    }


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, b"ticket expired (issued 75 s ago, max age 60 s)\n", "relay refused the ticket "
         "(401): ticket expired (issued 75 s ago, max age 60 s)"),
        (403, b"origin https://e.example is not allowed: add it\n", "relay refused the "
         "connection (403): origin https://e.example is not allowed: add it"),
        (404, b"not found: the ACP endpoint is /acp\n", "relay has no ACP endpoint at "
         "ws://127.0.0.1:9/acp (404): not found: the ACP endpoint is /acp"),
        (503, b"relay is at its limit of 2 connections; retry in 5 s\n", "relay is busy (503): "
         "relay is at its limit of 2 connections; retry in 5 s"),
        (502, b"<html><body>Bad gateway</body></html>", "relay refused the connection (502): "
         "Bad Gateway"),
        (299, b"", "relay refused the connection (299): HTTP 299"),
    ],
)  # fmt: skip
def test_http_refusals_quote_the_relays_reason(status: int, body: bytes, message: str) -> None:
    """Each refusal names what was refused, with the status and the body's first line."""
    failure = http_refusal(URL, status, body, "5" if status == 503 else None)
    assert failure.message == message
    assert failure.data["status"] == status
    assert failure.data["url"] == URL
    assert ("retryAfter" in failure.data) == (status == 503)
    assert failure.exit_status == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"no connection c-1 on this relay: it ended, or never was\n", "nothing to watch at "
         "ws://127.0.0.1:9/acp (404): no connection c-1 on this relay: it ended, or never was"),
        (b"not found: the ACP endpoint is /acp\n", "nothing to watch at ws://127.0.0.1:9/acp "
         "(404): not found: the ACP endpoint is /acp"),
    ],
)  # fmt: skip
def test_a_watchers_404_names_nothing_to_watch(body: bytes, message: str) -> None:
    """A watcher's 404 says there is nothing to watch there, whichever the relay's reason."""
    assert http_refusal(URL, 404, body, watching=True).message == message
    assert http_refusal(URL, 401, b"ticket expired\n", watching=True).message == (
        "relay refused the ticket (401): ticket expired"
    )


@pytest.mark.parametrize(
    ("url", "body", "reason"),
    [
        (URL, b"<html><h1>The plain HTTP request was sent to HTTPS port</h1></html>",
         f"Bad Request; {PLAIN_TO_A_TLS_PORT}"),
        (URL, b"Client sent an HTTP request to an HTTPS server.\n",
         f"Client sent an HTTP request to an HTTPS server; {PLAIN_TO_A_TLS_PORT}"),
        (URL, b"bad request\n", "bad request"),
        ("wss://127.0.0.1:9/acp", b"<html>HTTPS port</html>", "Bad Request"),
    ],
)  # fmt: skip
def test_a_400_about_https_to_a_ws_url_says_the_port_speaks_tls(
    url: str, body: bytes, reason: str
) -> None:
    """A 400 whose body names HTTPS, answering a ws:// URL, is a TLS port's: use wss://."""
    failure = http_refusal(url, 400, body)
    assert failure.message == f"relay refused the connection (400): {reason}"
    assert failure.data["reason"] == reason


def test_long_bodies_are_cut() -> None:
    """Only the first line of a body is quoted, at most 300 characters."""
    assert reason_from_body(400, b"first\nsecond") == "first"
    assert len(reason_from_body(400, b"y" * 1000)) == 300


@pytest.mark.parametrize(
    ("received", "sent", "relay_first", "message", "cause", "status"),
    [
        (Close(1011, "agent exited with status 3"), None, True, "agent exited with status 3",
         "closed", 1),
        (Close(1000, "agent exited"), Close(1000, "agent exited"), True, "agent exited",
         "closed", 0),
        (Close(1001), None, True, "relay closed the connection (1001 going away)", "closed", 1),
        (Close(1011, "keepalive ping timeout"), Close(1011, "keepalive ping timeout"), False,
         f"lost the relay at {URL}: no answer to a heartbeat ping within 0.5 s", "heartbeat", 1),
        (None, Close(1011, "keepalive ping timeout"), False,
         f"lost the relay at {URL}: no answer to a heartbeat ping within 0.5 s", "heartbeat", 1),
        (None, Close(1009, "frame with 9 bytes exceeds limit of 8 bytes"), False,
         "relay sent a message over --max-message-bytes (frame with 9 bytes exceeds limit of 8 "
         "bytes)", "closed", 1),
        (None, None, False, f"lost the connection to the relay at {URL} (no close frame)", "lost",
         1),
        (None, Close(1007, "invalid start byte at position 3"), False,
         f"relay at {URL} sent a text frame that is not UTF-8 (1007 invalid data: invalid start "
         "byte at position 3)", "protocol", 1),
        (Close(1002, "breaks acp-relay.resume.v1: a binary frame"),
         Close(1002, "breaks acp-relay.resume.v1: a binary frame"), False,
         f"relay at {URL} broke the protocol (1002 protocol error: breaks acp-relay.resume.v1: a "
         "binary frame)", "protocol", 1),
    ],
    ids=["agent-3", "agent-0", "going-away", "heartbeat-echoed", "heartbeat", "too-big", "lost",
         "not-utf8", "broken-profile"],
)  # fmt: skip
def test_closes_say_who_closed_and_why(
    received: Close | None,
    sent: Close | None,
    relay_first: bool,
    message: str,
    cause: str,
    status: int,
) -> None:
    """The relay's agent reasons pass through; heartbeat, size and lost sockets are named."""
    failure = connection_closed(
        URL, received=received, sent=sent, relay_first=relay_first, ping_timeout=0.5
    )
    assert (failure.message, failure.data["cause"], failure.exit_status) == (
        message,
        cause,
        status,
    )
    assert failure.data["url"] == URL


@pytest.mark.parametrize(
    ("received", "sent", "may_resume"),
    [
        (None, None, True),
        (None, Close(1011, "keepalive ping timeout"), True),
        (Close(1000, "agent exited"), None, False),
        (Close(1001), None, False),
        (Close(4404, "this relay no longer has the connection"), None, False),
        (None, Close(1002, "breaks acp-relay.resume.v1: a binary frame"), False),
        (None, Close(1007, "invalid start byte at position 0"), False),
        (None, Close(1009, "frame with 9 bytes exceeds limit of 8 bytes"), False),
        (Close(1002, "echoed"), Close(1002, "breaks acp-relay.resume.v1: x"), False),
    ],
    ids=["no-close", "heartbeat", "agent-exit", "going-away", "cannot-resume", "broken-profile",
         "not-utf8", "too-big", "echoed"],
)  # fmt: skip
def test_a_lost_socket_is_resumed_unless_a_close_said_it_is_over(
    received: Close | None, sent: Close | None, may_resume: bool
) -> None:
    """A relay's close ends the connection; so does connect's own for a frame the relay should
    not have sent (it would come again); no close, or a heartbeat's, may be resumed."""
    assert resumable(received, sent) is may_resume
    if sent is None:
        assert resumable(received) is may_resume


@pytest.mark.parametrize(
    ("cause", "detail", "message"),
    [
        ("dns", "Name or service not known", "cannot reach relay at ws://127.0.0.1:9/acp: "
         "cannot resolve 127.0.0.1 (Name or service not known)"),
        ("tls", "certificate verify failed: self-signed certificate", "TLS handshake with relay "
         "at ws://127.0.0.1:9/acp failed: certificate verify failed: self-signed certificate"),
        ("ticket", "--ticket-command exited with status 1", "cannot get a ticket for relay at "
         "ws://127.0.0.1:9/acp: --ticket-command exited with status 1"),
        ("timeout", "no answer within 10 s (--open-timeout)", "cannot reach relay at "
         "ws://127.0.0.1:9/acp: no answer within 10 s (--open-timeout)"),
    ],
)  # fmt: skip
def test_cannot_connect_messages(cause: Any, detail: str, message: str) -> None:
    """Each cause has its sentence; data carries the cause and the raw detail."""
    failure = cannot_connect(URL, cause, detail)
    assert failure.message == message
    assert failure.data == {"url": URL, "cause": cause, "detail": detail}


def test_redacted_removes_the_ticket_everywhere() -> None:
    """A ticket quoted by a proxy's reason disappears from the message and the data."""
    failure = http_refusal(URL, 400, b"bad request for /acp?ticket=SECRET-TICKET")
    clean = failure.redacted("SECRET-TICKET")
    assert "SECRET-TICKET" not in clean.message + json.dumps(dict(clean.data))
    assert "[redacted]" in clean.message
    assert failure.redacted(None) is failure
    assert isinstance(clean, Failure)


@pytest.mark.parametrize(
    ("signal", "message", "data", "exit_status"),
    [
        (15, f"connect was stopped by SIGTERM before the agent behind {URL} answered",
         {"url": URL, "cause": "stopped", "signal": "SIGTERM"}, 143),
        (2, f"connect was stopped by SIGINT before the agent behind {URL} answered",
         {"url": URL, "cause": "stopped", "signal": "SIGINT"}, 130),
        (None, f"connect was stopped before the agent behind {URL} answered",
         {"url": URL, "cause": "stopped"}, 1),
    ],
)  # fmt: skip
def test_a_request_cut_short_by_a_signal_says_which(
    signal: int | None, message: str, data: dict[str, Any], exit_status: int
) -> None:
    """A request owed when a signal stops connect is answered saying so and by which signal;
    connect then exits as a process that signal interrupted (128 + its number)."""
    failure = stopped_unanswered(URL, signal)
    assert (failure.message, dict(failure.data), failure.exit_status) == (
        message,
        data,
        exit_status,
    )


@pytest.mark.parametrize(
    ("code", "message", "cacert", "said"),
    [
        (18, "self-signed certificate", False, f"self-signed certificate; {TRUST_WITH_CACERT}"),
        (19, "self-signed certificate in certificate chain", False,
         f"self-signed certificate in certificate chain; {TRUST_WITH_CACERT}"),
        (20, "unable to get local issuer certificate", False,
         f"unable to get local issuer certificate; {TRUST_WITH_CACERT}"),
        (18, "self-signed certificate", True, f"self-signed certificate; {NOT_IN_CACERT}"),
        (10, "certificate has expired", False, "certificate has expired"),
        (62, "hostname mismatch", True, "hostname mismatch"),
    ],
)  # fmt: skip
def test_an_untrusted_issuer_is_told_how_to_trust_it(
    code: int, message: str, cacert: bool, said: str
) -> None:
    """A certificate no trusted CA signed (self-signed, a private CA) is told with --cacert
    as the way to trust it, or, with --cacert given, that its issuer is not in it; other
    failures (expired, another name) with OpenSSL's words alone."""
    assert certificate_unverified(code, message, cacert) == f"certificate verify failed: {said}"
