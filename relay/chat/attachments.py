"""Images and files sent in a thread, joining its next prompt as ACP content blocks.

Pure. An ``m.image`` or ``m.file`` in a thread is an :class:`Attachment`: its ``mxc://``
URI, its declared type and size, its name. It is admitted when the agent can take it (an
image when ``promptCapabilities.image``; a text file, as an embedded resource, when
``embeddedContext``), when its declared size is within ``--max-attachment-bytes``, and
when fewer than :data:`MAX_ATTACHED` wait; anything else is refused, with the reason.
Once fetched (the I/O's part, bounded by the same size), its bytes become the block:
an image as base64 with its MIME type, a text file as its UTF-8 text; bytes that turn out
over the bound, not UTF-8, or not what the agent can take refuse the whole prompt, which
is never sent half-built.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

from relay.chat.text import safe_line

MAX_ATTACHED = 4  # files waiting for the next prompt
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
TEXT_TYPES = (
    "application/json",
    "application/xml",
    "application/x-yaml",
    "application/yaml",
    "application/toml",
    "application/javascript",
    "application/x-sh",
    "application/sql",
)
TEXT_SUFFIXES = (
    ".txt",
    ".md",
    ".py",
    ".js",
    ".ts",
    ".tsx",
    ".json",
    ".yaml",
    ".yml",
    ".toml",
    ".rs",
    ".go",
    ".java",
    ".c",
    ".h",
    ".cpp",
    ".rb",
    ".sh",
    ".sql",
    ".csv",
    ".log",
    ".diff",
    ".patch",
    ".html",
    ".css",
    ".xml",
    ".ini",
    ".cfg",
)
MXC = re.compile(r"mxc://([A-Za-z0-9.:\[\]-]{1,255})/([A-Za-z0-9_-]{1,255})")


@dataclass(frozen=True)
class Attachment:
    """A file or image someone sent in a thread."""

    event_id: str
    sender: str
    thread: str | None
    url: str  # mxc://server/media-id
    kind: str  # "image", "file", or another msgtype's name (refused)
    mimetype: str
    size: int | None  # declared: a hint, checked against the bytes
    name: str
    # In an encrypted room: the file's AES key, the SHA-256 of its ciphertext and its IV
    # (unpadded base64, as the event's ``file`` gives them), to open it once fetched.
    sealed: tuple[str, str, str] | None = None


@dataclass(frozen=True)
class PromptCapabilities:
    """What the agent's prompts may hold beyond text (its ``initialize`` answer)."""

    image: bool = False
    embedded_context: bool = False


def capabilities_of(result: Any) -> PromptCapabilities:
    """The prompt capabilities of an ``initialize`` answer's ``agentCapabilities``."""
    agent = result.get("agentCapabilities") if isinstance(result, dict) else None
    prompt = agent.get("promptCapabilities") if isinstance(agent, dict) else None
    if not isinstance(prompt, dict):
        return PromptCapabilities()
    return PromptCapabilities(prompt.get("image") is True, prompt.get("embeddedContext") is True)


def read_attachment(
    event_id: str, sender: str, thread: str | None, content: Mapping[str, Any]
) -> Attachment:
    """An ``m.image``/``m.file`` content read within bounds (an unusable one is refused
    later, saying why)."""
    info = content.get("info")
    info = info if isinstance(info, dict) else {}
    size = info.get("size")
    name = content.get("filename") or content.get("body")
    msgtype = content.get("msgtype")
    sealed = _sealed(content.get("file"))
    url = content.get("url") if sealed is None else content["file"].get("url")
    return Attachment(
        event_id=event_id,
        sender=sender,
        thread=thread,
        url=url[:600] if isinstance(url, str) else "",
        kind={"m.image": "image", "m.file": "file"}.get(str(msgtype), str(msgtype)[:40]),
        mimetype=info["mimetype"][:100].lower() if isinstance(info.get("mimetype"), str) else "",
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        name=safe_line(name if isinstance(name, str) else "a file", 120),
        sealed=sealed,
    )


def _sealed(file: Any) -> tuple[str, str, str] | None:
    """An encrypted file's key, ciphertext hash and IV (None: not one, or not readable)."""
    if not isinstance(file, dict):
        return None
    key, hashes, iv = file.get("key"), file.get("hashes"), file.get("iv")
    k = key.get("k") if isinstance(key, dict) else None
    sha = hashes.get("sha256") if isinstance(hashes, dict) else None
    parts = (k, sha, iv)
    if not all(isinstance(p, str) and 0 < len(p) <= 200 for p in parts):
        return None
    return cast(tuple[str, str, str], parts)


def media_of(url: str) -> tuple[str, str] | None:
    """The server name and media id of an ``mxc://`` URI (None if it is not one)."""
    found = MXC.fullmatch(url)
    return (found[1], found[2]) if found else None


def is_text(attachment: Attachment) -> bool:
    """Whether the file is text by its type, or by its name when its type says nothing."""
    if attachment.mimetype.startswith("text/") or attachment.mimetype in TEXT_TYPES:
        return True
    vague = attachment.mimetype in ("", "application/octet-stream")
    return vague and attachment.name.lower().endswith(TEXT_SUFFIXES)


def refusal(
    attachment: Attachment, capabilities: PromptCapabilities, limit: int, waiting: int
) -> str | None:
    """Why ``attachment`` cannot join the next prompt (None: it can)."""
    name = attachment.name
    if media_of(attachment.url) is None:
        return f"{name}: not a file the bot can fetch (no mxc:// URI, or encrypted and unreadable)"
    if attachment.kind == "image":
        if not capabilities.image:
            return f"{name}: this agent takes no images in prompts"
        if attachment.mimetype not in IMAGE_TYPES:
            return (
                f"{name}: an image of type {attachment.mimetype or 'unknown'}; the agent "
                f"is sent {', '.join(IMAGE_TYPES)}"
            )
    elif attachment.kind == "file":
        if not is_text(attachment):
            return (
                f"{name}: only text files join a prompt (this is "
                f"{attachment.mimetype or 'of an unknown type'})"
            )
        if not capabilities.embedded_context:
            return f"{name}: this agent takes no files in prompts (no embeddedContext)"
    else:
        return f"{name}: a {attachment.kind} cannot join a prompt (images and text files can)"
    if attachment.size is not None and attachment.size > limit:
        return f"{name}: {attachment.size:,} bytes, over --max-attachment-bytes ({limit:,})"
    if waiting >= MAX_ATTACHED:
        return f"{name}: {MAX_ATTACHED} files already wait for the next prompt"
    return None


def block_of(attachment: Attachment, data: bytes, limit: int) -> dict[str, Any] | str:
    """The ACP content block of the fetched ``data``, or why the prompt cannot take it."""
    if len(data) > limit:
        return f"{attachment.name}: over --max-attachment-bytes ({limit:,} bytes)"
    if attachment.kind == "image":
        return {
            "type": "image",
            "mimeType": attachment.mimetype,
            "data": base64.b64encode(data).decode(),
        }
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"{attachment.name}: not UTF-8 text"
    mimetype = attachment.mimetype if attachment.mimetype.startswith("text/") else "text/plain"
    # Named by the file's name, not by its media URL: what the agent echoes shows no link.
    resource = {"uri": f"attachment:{quote(attachment.name)}", "mimeType": mimetype, "text": text}
    return {"type": "resource", "resource": resource}


def attachment_state(attachment: Attachment) -> list[Any]:
    """The attachment as JSON values (kept with the session's snapshot until its prompt)."""
    a = attachment
    sealed = list(a.sealed) if a.sealed is not None else None
    return [a.event_id, a.sender, a.thread, a.url, a.kind, a.mimetype, a.size, a.name, sealed]


def attachment_of(kept: list[Any]) -> Attachment:
    event_id, sender, thread, url, kind, mimetype, size, name, *rest = kept
    sealed = rest[0] if rest else None
    return Attachment(
        event_id,
        sender,
        thread,
        url,
        kind,
        mimetype,
        size,
        name,
        cast(tuple[str, str, str], tuple(sealed)) if sealed else None,
    )
