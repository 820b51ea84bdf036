"""The documentation holds together: its relative links resolve and the README's set-up is CI's.

Checks README.md, CONTRIBUTING.md, docs/*.md and deploy/README.md. A link to a file must
name one that exists; a ``#anchor`` into a markdown file must name one of its headings,
spelled as GitHub spells them (lower case, punctuation dropped, spaces as hyphens, ``-1``,
``-2`` for repeats). Code blocks and code spans are not markdown, so what they hold is
neither a link nor a heading.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[demo]' && .venv/bin/acp-relay serve --dev"
)

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE_LINK = re.compile(
    r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^\s)>]*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?(\S+?)>?(?:\s|$)", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def documents() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "deploy" / "README.md",
        ROOT / "deploy" / "kubernetes" / "README.md",
    ]


def prose_lines(text: str) -> list[str]:
    """The lines of a markdown text outside fenced code blocks."""
    lines: list[str] = []
    fence = ""
    for line in text.splitlines():
        opening = FENCE.match(line)
        if fence:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = ""
        elif opening:
            fence = opening.group(1)
        else:
            lines.append(line)
    return lines


def fenced_blocks(text: str) -> list[str]:
    """The contents of the fenced code blocks of a markdown text, in order."""
    blocks: list[str] = []
    fence = ""
    body: list[str] = []
    for line in text.splitlines():
        opening = FENCE.match(line)
        if not fence and opening:
            fence, body = opening.group(1), []
        elif (
            fence
            and opening
            and opening.group(1)[0] == fence[0]
            and len(opening.group(1)) >= len(fence)
        ):
            blocks.append("\n".join(body))
            fence = ""
        elif fence:
            body.append(line)
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's markdown text."""
    text = INLINE_LINK.sub(lambda link: link.group(1), heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def link_targets(path: Path) -> list[str]:
    """The targets of a markdown file's inline links, images and link definitions."""
    prose = CODE_SPAN.sub("code", "\n".join(prose_lines(path.read_text(encoding="utf-8"))))
    found = [(link.start(), link.group(2)) for link in INLINE_LINK.finditer(prose)]
    found += [(ref.start(), ref.group(1)) for ref in REFERENCE.finditer(prose)]
    return [target for _, target in sorted(found)]


def shown(path: Path) -> str:
    """A path as a message names it: from the project root when it lies inside."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_link(source: Path, target: str) -> str | None:
    """Why a relative link from ``source`` leads nowhere, or None when it holds."""
    if SCHEME.match(target):
        return None
    name, _, anchor = target.partition("#")
    destination = (source.parent / unquote(name)).resolve() if name else source
    if not destination.exists():
        return f"{target}: no file {shown(destination)}"
    if anchor and destination.suffix == ".md" and anchor not in anchors(destination):
        return f"{target}: no heading #{anchor} in {shown(destination)}"
    return None


def section(text: str, heading: str) -> str:
    """The text under a level-2 heading, up to the next level-2 heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section ## {heading}"
    return match.group(1)


def ci_test_command() -> str:
    """The command .ci/run runs: its last line that is not blank, a comment or shell set-up."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [
        line.strip()
        for line in lines
        if line.strip() and not line.lstrip().startswith(("#", "set ", "cd "))
    ]
    return commands[-1]


@pytest.mark.parametrize("document", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve(document: Path) -> None:
    """Every relative link and #anchor in the document leads to a file and a heading."""
    assert document.exists(), f"{document.relative_to(ROOT)} is missing"
    broken = [why for target in link_targets(document) if (why := broken_link(document, target))]
    assert not broken, "\n".join(broken)


def test_setup_is_the_two_commands() -> None:
    """The README's Set up section shows the demo command and the exact command CI runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert fenced_blocks(section(readme, "Set up")) == [DEMO_COMMAND, ci_test_command()]


def test_slug_follows_github() -> None:
    """Headings become anchors as on GitHub: code marks and punctuation go, spaces hyphenate."""
    assert slug("What `serve --dev` gives you") == "what-serve---dev-gives-you"
    assert slug("Format, for a control plane in another language") == (
        "format-for-a-control-plane-in-another-language"
    )
    assert slug("Path mapping and [MCP](https://x.example) servers") == (
        "path-mapping-and-mcp-servers"
    )


def test_anchors_skip_code_and_number_repeats(tmp_path: Path) -> None:
    """A '#' line inside a code block is no heading, and a repeated heading gets -1."""
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n```sh\n# a comment\n```\n\n## Notes\n\n## Notes\n", encoding="utf-8")
    assert anchors(page) == {"top", "notes", "notes-1"}


def test_links_in_code_are_not_links(tmp_path: Path) -> None:
    """Links in code are not links; real ones are found, even with their text across lines."""
    page = tmp_path / "page.md"
    page.write_text(
        "`[x](gone.md)`\n\n```\n[y](gone.md)\n```\n\n"
        "[z](there.md#top) ![i](pic.png) [a\nb](ab.md)\n\n[ref]: other.md\n",
        encoding="utf-8",
    )
    assert link_targets(page) == ["there.md#top", "pic.png", "ab.md", "other.md"]


def test_broken_links_are_named(tmp_path: Path) -> None:
    """A link to a missing file or a missing heading is reported; an external one is not."""
    (tmp_path / "there.md").write_text("## Top\n", encoding="utf-8")
    page = tmp_path / "page.md"
    assert broken_link(page, "there.md#top") is None
    assert broken_link(page, "https://example.com/gone.md") is None
    assert "no file" in (broken_link(page, "gone.md") or "")
    assert "no heading #bottom" in (broken_link(page, "there.md#bottom") or "")
