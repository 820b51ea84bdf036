"""Images and files joining a prompt: read within bounds, admitted by the agent's
capabilities and the size bound, made ACP blocks from their bytes."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.chat.attachments import (
    MAX_ATTACHED,
    Attachment,
    PromptCapabilities,
    attachment_of,
    attachment_state,
    block_of,
    capabilities_of,
    media_of,
    read_attachment,
    refusal,
)

BOTH = PromptCapabilities(image=True, embedded_context=True)
LIMIT = 1000


def attached(**more: Any) -> Attachment:
    content = {"msgtype": "m.image", "body": "shot.png", "url": "mxc://hs.org/abc_D-1",
               "info": {"mimetype": "image/png", "size": 10}} | more  # fmt: skip
    return read_attachment("$e", "@a:t", "$root", content)


def test_capabilities_are_read_from_the_initialize_answer() -> None:
    """Only literal true counts; anything else is no capability."""
    answer = {"agentCapabilities": {"promptCapabilities": {"image": True,
                                                           "embeddedContext": "yes"}}}  # fmt: skip
    assert capabilities_of(answer) == PromptCapabilities(image=True)
    assert capabilities_of(None) == PromptCapabilities()


def test_an_attachment_is_read_field_by_field_within_bounds() -> None:
    """Hostile fields become safe defaults: no URL, unknown type, no size, a safe name."""
    content = {"msgtype": "m.file", "url": 3, "body": "a\u202e\nb" * 100,
               "info": {"size": -4, "mimetype": 7}}  # fmt: skip
    hostile = read_attachment("$e", "@a:t", None, content)
    assert (hostile.url, hostile.mimetype, hostile.size, hostile.kind) == ("", "", None, "file")
    assert "\n" not in hostile.name
    assert len(hostile.name) < 200
    assert attached().kind == "image"


@pytest.mark.parametrize(
    ("url", "media"),
    [("mxc://hs.org/abc_D-1", ("hs.org", "abc_D-1")), ("mxc://hs.org:8448/x", ("hs.org:8448", "x")),
     ("mxc://hs.org/../etc", None), ("https://hs.org/x", None), ("mxc://hs.org/a?b", None)],
)  # fmt: skip
def test_only_a_well_formed_mxc_uri_names_media(url: str, media: tuple[str, str] | None) -> None:
    """A media id with a slash, a query or another scheme is not fetched."""
    assert media_of(url) == media


@pytest.mark.parametrize(
    ("attachment", "capabilities", "waiting", "why"),
    [
        (attached(), BOTH, 0, None),
        (attached(), PromptCapabilities(embedded_context=True), 0, "takes no images"),
        (attached(info={"mimetype": "image/svg+xml"}), BOTH, 0, "an image of type image/svg+xml"),
        (attached(msgtype="m.file", body="n.md", info={"mimetype": "text/markdown"}), BOTH, 0,
         None),
        (attached(msgtype="m.file", body="n.py", info={}), BOTH, 0, None),
        (attached(msgtype="m.file", body="n.md", info={"mimetype": "text/markdown"}),
         PromptCapabilities(image=True), 0, "no embeddedContext"),
        (attached(msgtype="m.file", body="a.zip", info={"mimetype": "application/zip"}), BOTH,
         0, "only text files join a prompt"),
        (attached(msgtype="m.video"), BOTH, 0, "a m.video cannot join a prompt"),
        (attached(info={"mimetype": "image/png", "size": LIMIT + 1}), BOTH, 0,
         "1,001 bytes, over --max-attachment-bytes (1,000)"),
        (attached(url="mxc://hs.org/a/b"), BOTH, 0, "not a file the bot can fetch"),
        (attached(), BOTH, MAX_ATTACHED, f"{MAX_ATTACHED} files already wait"),
    ],
)  # fmt: skip
def test_an_attachment_is_admitted_only_when_the_agent_can_take_it(
    attachment: Attachment, capabilities: PromptCapabilities, waiting: int, why: str | None
) -> None:
    """Each refusal names the file and the reason."""
    found = refusal(attachment, capabilities, LIMIT, waiting)
    assert (found is None) == (why is None)
    if why is not None:
        assert found is not None
        assert why in found
        assert found.startswith(attachment.name)


@given(st.binary(max_size=2 * LIMIT))
def test_an_image_block_carries_exactly_the_bytes_fetched(data: bytes) -> None:
    """Base64 of the bytes, with the image's type; over the bound: refused."""
    block = block_of(attached(), data, LIMIT)
    if len(data) > LIMIT:
        assert isinstance(block, str)
        return
    assert isinstance(block, dict)
    assert block["mimeType"] == "image/png"
    assert base64.b64decode(block["data"]) == data


def test_a_text_file_is_an_embedded_resource_and_a_binary_one_is_refused() -> None:
    """UTF-8 text in a resource named by the file (never by its media URL)."""
    notes = attached(msgtype="m.file", body="my notes.md", info={"mimetype": "text/markdown"})
    block = block_of(notes, "# ✓\n".encode(), LIMIT)
    resource = {"uri": "attachment:my%20notes.md", "mimeType": "text/markdown", "text": "# ✓\n"}
    assert block == {"type": "resource", "resource": resource}
    assert block_of(notes, b"\xff\xfe", LIMIT) == "my notes.md: not UTF-8 text"
    assert attachment_of(attachment_state(notes)) == notes


def test_an_encrypted_rooms_file_is_read_from_its_file_object_with_its_key() -> None:
    """The URL, key, hash and IV come from `file`; a malformed `file` is no key at all (the
    attachment then has no URL and is refused)."""
    file = {"url": "mxc://hs.org/enc1", "key": {"k": "KEY"}, "iv": "IV", "hashes": {"sha256": "H"},
            "v": "v2"}  # fmt: skip
    sealed = attached(file=file, url=None)
    assert (sealed.url, sealed.sealed) == ("mxc://hs.org/enc1", ("KEY", "H", "IV"))
    assert attachment_of(attachment_state(sealed)) == sealed
    broken = attached(file={**file, "key": "KEY"}, url=None)
    assert (broken.url, broken.sealed) == ("", None)
    assert refusal(broken, BOTH, LIMIT, 0) is not None
    older = attachment_state(attached())[:8]  # kept by the release before: no key field
    assert attachment_of(older) == attached()
