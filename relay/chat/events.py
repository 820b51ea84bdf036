"""The Matrix events the bot sends and reads, as plain dicts: threads, edits, reactions.

Pure. What goes out: a message (``m.notice`` for the bot's own lines, ``m.text`` for the
agent's words) with ``m.mentions`` empty (it pings nobody, whatever its text says; only a
permission request's message names, on purpose, the people who may answer it),
placed in a thread (``m.thread``, with the reply fallback for clients without threads),
an edit (``m.replace`` with ``m.new_content``) and a reaction (``m.annotation``). What
comes in: a timeline event from ``/sync`` read into :class:`Message` (text and notices),
an :class:`relay.chat.attachments.Attachment` (images, files and other media),
:class:`Reaction` or :class:`Other`, each field checked, since any room member can send
anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from relay.chat.attachments import Attachment, read_attachment
from relay.chat.text import CONTENT_BYTES, fit_bytes, json_size

NOTICE = "m.notice"
TEXT = "m.text"
HTML = "org.matrix.custom.html"
EDIT_OVERHEAD = 512  # an edit's own fields and the shortest fallback body, with room to spare
MAX_BODY_BYTES = 65536  # an incoming body is read up to this (an event is at most 64 KiB)


def message(
    body: str, *, html: str | None = None, msgtype: str = NOTICE, mentions: Sequence[str] = ()
) -> dict[str, Any]:
    """A message's content: ``body`` (safe text), with ``html`` (built safe) when given;
    pinging nobody but the ``mentions`` (user ids, on purpose: a request's approvers)."""
    pinged = {"user_ids": list(mentions)} if mentions else {}
    content: dict[str, Any] = {"msgtype": msgtype, "body": body, "m.mentions": pinged}
    if html is not None:
        content["format"] = HTML
        content["formatted_body"] = html
    return bounded(content)


def bounded(content: dict[str, Any], limit: int = CONTENT_BYTES) -> dict[str, Any]:
    """``content`` within ``limit`` bytes: the HTML dropped first, then the body cut with a
    note."""
    if json_size(content) <= limit:
        return content
    content = {k: v for k, v in content.items() if k not in ("format", "formatted_body")}
    return _body_within(content, limit)


def _body_within(content: dict[str, Any], limit: int) -> dict[str, Any]:
    over = json_size(content) - limit
    if over <= 0:
        return content
    budget = max(json_size(content["body"]) - 2 - over, 0)
    return {**content, "body": fit_bytes(content["body"], budget)}


def in_thread(content: dict[str, Any], root: str, latest: str) -> dict[str, Any]:
    """``content`` as a reply in the thread of ``root`` (``latest``: the thread's last event,
    which clients without threads show it as replying to)."""
    relates = {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": latest},
    }
    return {**content, "m.relates_to": relates}


def replacing(original: str, content: dict[str, Any]) -> dict[str, Any]:
    """An edit of the bot's event ``original`` to ``content`` (its fallback: ``* body``).

    Both copies of the text fit one event: the fallback body is cut first, then the new
    content itself if it alone takes nearly all of it."""
    new = {k: v for k, v in content.items() if k != "m.relates_to"}
    new = bounded(new, CONTENT_BYTES - EDIT_OVERHEAD)
    edit: dict[str, Any] = {
        "msgtype": new["msgtype"],
        "body": "* " + new["body"],
        "m.mentions": {},
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": original},
    }
    return _body_within(edit, CONTENT_BYTES)


def reaction(target: str, key: str) -> dict[str, Any]:
    """A reaction ``key`` (an emoji) on ``target``."""
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": key}}


# -- what comes in ------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """An ``m.room.message`` of someone: its text, where it is, whom it mentions."""

    event_id: str
    sender: str
    body: str
    thread: str | None  # the thread's root, when in a thread
    mentions: frozenset[str]  # m.mentions user_ids (empty when absent)
    edit: bool  # an edit (m.replace) of an earlier message: never a prompt
    msgtype: str


@dataclass(frozen=True)
class Reaction:
    """An ``m.reaction``: who put which key on which event."""

    event_id: str
    sender: str
    target: str
    key: str


@dataclass(frozen=True)
class Encryption:
    """The room turned on end-to-end encryption (``m.room.encryption``), or an encrypted event."""

    event_id: str
    sender: str


@dataclass(frozen=True)
class Other:
    """Anything else (a state change, a redaction, a malformed event): not acted on."""

    event_id: str


Incoming = Message | Reaction | Encryption | Attachment | Other
MEDIA = ("m.image", "m.file", "m.audio", "m.video")  # an attachment (only images and files join)


def rooms_of(answer: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """A ``/sync`` answer's rooms of ``kind`` (``join``, ``invite``), each with its data (an
    empty object where it is not one)."""
    rooms = answer.get("rooms")
    found = rooms.get(kind) if isinstance(rooms, dict) else None
    if not isinstance(found, dict):
        return {}
    return {
        room: data if isinstance(data, dict) else {}
        for room, data in found.items()
        if isinstance(room, str)
    }


def events_of(block: Any) -> list[dict[str, Any]]:
    """The events of a ``/sync`` block (``{"events": [...]}``), each an object."""
    events = block.get("events") if isinstance(block, dict) else None
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


def read_event(event: Mapping[str, Any]) -> Incoming:
    """What one timeline event of ``/sync`` is, each field checked."""
    event_id, sender = _text(event.get("event_id")), _text(event.get("sender"))
    kind, content = event.get("type"), event.get("content")
    if not isinstance(content, dict) or not event_id or not sender:
        return Other(event_id)
    if kind in ("m.room.encryption", "m.room.encrypted"):
        return Encryption(event_id, sender)
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    if kind == "m.reaction":
        target, key = _text(relates.get("event_id")), _text(relates.get("key"))
        if relates.get("rel_type") == "m.annotation" and target and key:
            return Reaction(event_id, sender, target, key[:64])
        return Other(event_id)
    if kind != "m.room.message" or not isinstance(content.get("body"), str):
        return Other(event_id)
    thread = _text(relates.get("event_id")) if relates.get("rel_type") == "m.thread" else ""
    if content.get("msgtype") in MEDIA and "m.new_content" not in content:
        return read_attachment(event_id, sender, thread or None, content)
    if content.get("msgtype") not in (TEXT, NOTICE):
        return Other(event_id)  # an emote, an unknown type: no prompt (notices: bots')
    return Message(
        event_id=event_id,
        sender=sender,
        body=content["body"][:MAX_BODY_BYTES],
        thread=thread or None,
        mentions=_mentions(content.get("m.mentions")),
        edit=relates.get("rel_type") == "m.replace" or "m.new_content" in content,
        msgtype=_text(content.get("msgtype")),
    )


def _mentions(value: Any) -> frozenset[str]:
    users = value.get("user_ids") if isinstance(value, dict) else None
    if not isinstance(users, list):
        return frozenset()
    return frozenset(user for user in users[:100] if isinstance(user, str))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
