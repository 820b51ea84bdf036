"""Tickets in WebSocket URLs: add one, find one, remove one.

Pure. A ticket travels in the ``ticket`` query parameter (browsers cannot set headers);
every URL that is shown or logged goes through :func:`without_ticket` first. The one reader
of that parameter, :func:`ticket_in`, serves both sides: ``connect``'s URL and the relay's
upgrade request (:func:`relay.core.admission.ticket_from_request`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

TICKET_PARAM = "ticket"


def with_ticket(url: str, ticket: str) -> str:
    """``url`` with ``ticket=`` (percent-quoted) added to its query string."""
    parts = urlsplit(url)
    query = (parts.query + "&" if parts.query else "") + f"{TICKET_PARAM}={quote(ticket, safe='')}"
    return urlunsplit(parts._replace(query=query))


def without_ticket(url: str) -> str:
    """``url`` without any ``ticket`` query parameter: safe to show and to log."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k != TICKET_PARAM]
    return urlunsplit(parts._replace(query=urlencode(kept)))


def ticket_in(url: str) -> str | None:
    """The value of the first non-empty ``ticket`` query parameter of ``url`` (a URL, or a
    request's path and query), if it has one."""
    for key, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if key == TICKET_PARAM and value:
            return value
    return None
