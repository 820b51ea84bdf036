"""The documentation holds together: its relative links resolve, the README's set-up is CI's,
and its shell recipes for reading the relay's output return what they say.

Checks README.md, CONTRIBUTING.md, docs/*.md and deploy/README.md. A link to a file must
name one that exists; a ``#anchor`` into a markdown file must name one of its headings,
spelled as GitHub spells them (lower case, punctuation dropped, spaces as hyphens, ``-1``,
``-2`` for repeats). Code blocks and code spans are not markdown, so what they hold is
neither a link nor a heading.

The recipes (``jq`` on logs and traces, ``curl`` on the endpoints, ``grep``, ``comm``) are
code: each runs against the JSON logs, the trace and the endpoints of a live relay, with
the docs' placeholders (a connection id ``6f1c...``, ``my-agent --acp``, port 8765) filled in.
A recipe that reads the terminal after its own lines (``{ ...; cat; }``, the trace replayed
into an agent) runs as a person runs it: its output is watched until it holds what the
document says, then Ctrl-D ends it (its stdin closed).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.support.agents import DEMO_AGENT
from tests.support.cli import serve
from tests.support.env import clean_env, secret_env
from tests.support.http import busy
from tests.support.live import live_relay, make_ticket
from tests.support.waiting import until
from tests.system import require_packages

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


SHARED_PROMISES = {  # where the docs say what --files shared lets an agent reach
    "docs/security.md": "`--files shared` lets it",
    "docs/paths-and-mcp.md": "- **`shared`**",
}


@pytest.mark.parametrize("document", sorted(SHARED_PROMISES))
def test_the_shared_promise_says_a_terminal_runs_any_command(document: str) -> None:
    """Where the docs say which files --files shared lets an agent reach, the same paragraph
    says that with a terminal offered, terminal/create runs any command."""
    text = (ROOT / document).read_text(encoding="utf-8")
    paragraphs = re.split(r"\n\s*\n|\n(?=- )", text)
    [promise] = [p for p in paragraphs if SHARED_PROMISES[document] in p]
    assert "`terminal/create`" in promise
    assert "any command" in promise


MODULES = {
    path.stem: ".".join(path.relative_to(ROOT).with_suffix("").parts)
    for path in (ROOT / "relay").glob("*/**/*.py")
    if path.stem != "__init__" and path.parent.name != "commands"
}  # a module by its own name, where the data paths name it without its package
NAMED = re.compile(r"`([a-z]+\.[A-Za-z_.]+)`")


def public_name_problem(dotted: str) -> str | None:
    """Why ``dotted`` (``package.module.Name.attr`` or ``module.Name.attr`` of relay) names
    nothing public; None when it names something, or is no name of relay's."""
    parts = dotted.split(".")
    first, rest = parts[0], parts[1:]
    if (ROOT / "relay" / first).is_dir() and rest:
        depth = len(parts)  # the longest prefix that is a module or package of relay's
        while depth > 1 and not _is_module(parts[:depth]):
            depth -= 1
        module, names = ".".join(["relay", *parts[:depth]]), parts[depth:]
    elif first in MODULES:
        module, names = MODULES[first], rest
    else:
        return None  # not a name of relay's (a file name, a flag's value)
    try:
        found: object = importlib.import_module(module)
    except ModuleNotFoundError:
        return f"{dotted}: no module {module}"
    for name in names:
        if name.startswith("_"):
            return f"{dotted}: {name} is private"
        if not hasattr(found, name):
            return f"{dotted}: no {name} in {module}"
        found = getattr(found, name)
    return None


def _is_module(parts: list[str]) -> bool:
    path = ROOT.joinpath("relay", *parts)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_contributing_names_only_public_names_that_exist() -> None:
    """Each data path of CONTRIBUTING.md names modules, classes and methods that exist and
    are public, so that the page cannot drift from the code unnoticed."""
    text = section((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"), "Data paths")
    names = set(NAMED.findall(text))
    assert len(names) > 20
    problems = [why for name in sorted(names) if (why := public_name_problem(name))]
    assert not problems, "\n".join(problems)


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


# -- shell recipes --------------------------------------------------------------------------

RECIPE_COMMANDS = ("jq", "curl", "grep", "comm")  # what reads the relay's logs, traces, endpoints
SPAN_RECIPE = re.compile(r"(?<!`)`((?:\{ )?jq [^`]*'[^`]*)`(?!`)", re.S)
UNTIL_CTRL_D = "; cat; }"  # a recipe that passes on the terminal after its lines, until Ctrl-D
SUBJECT = "alice"  # the subject the docs' recipes look for


def shell_recipes() -> list[tuple[str, str]]:
    """(document, command) for every recipe: the lines of the fenced blocks that start with
    one of RECIPE_COMMANDS (or ``{ `` and one), and the ``jq ...`` (or ``{ jq ...``) code
    spans of the prose."""
    found: list[tuple[str, str]] = []
    for document in documents():
        text = document.read_text(encoding="utf-8")
        name = str(document.relative_to(ROOT))
        for block in fenced_blocks(text):
            for line in block.splitlines():
                if line.strip().removeprefix("{ ").split(" ", 1)[0] in RECIPE_COMMANDS:
                    found.append((name, line.strip()))
        for span in SPAN_RECIPE.finditer("\n".join(prose_lines(text))):
            found.append((name, re.sub(r"\s*\n\s*", " ", span[1])))
    return found


@dataclass
class Session:
    """What the test client did through the relay, for the recipes' outputs to be checked
    against: its connection, its frames as sent, the ids of its requests, the one the agent
    never answered."""

    connection_id: str
    frames: list[str]
    requests: list[int]
    unanswered: int
    port: int


Check = Callable[[str, Session], None]


def json_lines(output: str) -> list[dict[str, object]]:
    lines = output.splitlines()
    assert lines, "no output"
    return [json.loads(line) for line in lines]


def events_of_the_connection(output: str, session: Session) -> None:
    """Every line is the connection's, from its opening to its closing."""
    records = json_lines(output)
    assert {record.get("connection_id") for record in records} == {session.connection_id}
    events = [record["event"] for record in records]
    assert "connection opened" in events
    assert events[-1] == "connection closed"


def subject_summary(output: str, session: Session) -> None:
    """One {timestamp, event, connection_id} a line, for the subject's connection."""
    records = json_lines(output)
    assert all(set(r) == {"timestamp", "event", "connection_id"} for r in records), records
    events_of_the_connection(output, session)


def conversation(output: str, session: Session) -> None:
    """``TIME DIRECTION LINE``: the client's frames to the agent, the agent's lines back."""
    lines = output.splitlines()
    parsed = [re.fullmatch(r"(\S+Z) (to_agent|to_client) (.*)", line) for line in lines]
    assert all(parsed), lines
    sent = [match[3] for match in parsed if match and match[2] == "to_agent"]
    assert [json.loads(line)["id"] for line in sent] == session.requests
    assert any(match and match[2] == "to_client" for match in parsed)


def writes_nothing(output: str, session: Session) -> None:
    """Its output goes to a file."""
    assert output == ""


def unanswered_ids(output: str, session: Session) -> None:
    """The id of the request the agent never answered, and no other."""
    assert output.split() == [str(session.unanswered)]


def answers_before_the_hang(output: str, session: Session) -> None:
    """The agent's JSON-RPC messages, with its answers to every request but the one it never
    answered: initialize, session/new and a whole prompt (what the client received, or what
    the agent answers the trace's stdin replayed into it)."""
    answered = [r.get("id") for r in json_lines(output) if "result" in r]
    assert answered == [n for n in session.requests if n != session.unanswered]


def frames_as_sent(output: str, session: Session) -> None:
    """The client's frames, exactly as it sent them."""
    assert output.splitlines() == session.frames


def healthz(output: str, session: Session) -> None:
    """/healthz's body."""
    assert output.strip() == "ok"


def busy_report(output: str, session: Session) -> None:
    """/busy's report of an idle relay (its keys are test_busy_examples_are_what_busy_returns's)."""
    report = json.loads(output)
    assert (report["busy"], report["connections"]) == (False, 0)


CONVERSATION = (
    """jq -r 'select(.dir) | "\\(.t) \\(.dir) \\(.line // "(dropped)")"' """
    "DIR/*-6f1c*.ndjson"
)
REPLAY = """{{ jq -j 'select(.dir == "to_agent") | .line + "\\n"' {}; cat; }} | my-agent --acp"""
RECIPES: dict[str, Check] = {
    """jq -c 'select(.subject == "alice") | {timestamp, event, connection_id}' relay.log""":
        subject_summary,
    """jq -c 'select(.connection_id == "6f1c...")' relay.log""": events_of_the_connection,
    CONVERSATION: conversation,
    """jq -r 'select(.dir == "to_agent") | .line | fromjson | select(.method and .id) | .id' """
    "t.ndjson | sort > asked": writes_nothing,
    """jq -r 'select(.dir == "to_client") | .line | fromjson | select(.method | not) | .id' """
    "t.ndjson | sort > answered": writes_nothing,
    "comm -23 asked answered": unanswered_ids,
    REPLAY.format("t.ndjson"): answers_before_the_hang,
    REPLAY.format("trace.ndjson"): answers_before_the_hang,
    """jq -r 'select(.dir == "to_client") | .line' trace.ndjson""": answers_before_the_hang,
    """jq -r 'if .dir == "to_agent" then .before // .line elif .by == "relay" then .refused """
    """else empty end' trace.ndjson""": frames_as_sent,
    "curl -fsS http://127.0.0.1:8765/healthz              # ok": healthz,
    'curl -fsS http://127.0.0.1:8765/busy   # {"busy": false, "connections": 0, "detached": 0, '
    '"warm": 0, "watchers": 0, "idle_seconds": 3.2}': busy_report,
}  # fmt: skip


def runnable(recipe: str, session: Session) -> str:
    """The recipe with the docs' placeholders replaced by this session's values."""
    return (
        recipe.replace("6f1c...", session.connection_id)
        .replace("6f1c", session.connection_id[:8])
        .replace("my-agent --acp", shlex.join(DEMO_AGENT))
        .replace("127.0.0.1:8765", f"127.0.0.1:{session.port}")
    )


def test_every_shell_recipe_is_checked() -> None:
    """Each recipe of the docs has its check here, and each check a recipe in the docs."""
    found = {recipe for _, recipe in shell_recipes()}
    assert found - RECIPES.keys() == set(), "recipes without a check (add one to RECIPES)"
    assert RECIPES.keys() - found == set(), "checks of recipes no document has any more"


async def request(ws: ClientConnection, frame: str, request_id: int) -> None:
    """Send ``frame`` and read up to the answer to ``request_id``."""
    await ws.send(frame)
    async with asyncio.timeout(10):
        while json.loads(await ws.recv()).get("id") != request_id:
            pass


def prompt(request_id: int, session_id: str, text: str) -> str:
    """A session/prompt frame."""
    params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "session/prompt",
                       "params": params})  # fmt: skip


async def hang_a_session(ws: ClientConnection, cwd: str) -> Session:
    """initialize, session/new, a prompt streamed back in full, and a prompt the demo agent
    holds until it is cancelled."""
    frames = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": 1}}),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                    "params": {"cwd": cwd, "mcpServers": []}}),
    ]  # fmt: skip
    await request(ws, frames[0], 1)
    await ws.send(frames[1])
    async with asyncio.timeout(10):
        while "result" not in (answer := json.loads(await ws.recv())):
            pass
    session_id = answer["result"]["sessionId"]
    frames.append(prompt(3, session_id, " ".join(f"word{n}" for n in range(100))))
    await request(ws, frames[2], 3)
    frames.append(prompt(4, session_id, "/hang"))
    await ws.send(frames[3])
    async with asyncio.timeout(10):
        await ws.recv()  # the agent's "waiting for session/cancel"
    assert ws.response is not None
    return Session(ws.response.headers["Acp-Connection-Id"], frames, [1, 2, 3, 4], 4, 0)


def run_recipe(command: str, cwd: Path) -> str:
    """The recipe's stdout, run by bash in ``cwd``; a failing command fails the test."""
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, f"{command}: exit {done.returncode}: {done.stderr}"
    return done.stdout


async def run_until_ctrl_d(command: str, cwd: Path, check: Check, session: Session) -> str:
    """A recipe that reads the terminal, run as a person runs it: its output watched until
    ``check`` holds, then Ctrl-D (its stdin closed); its whole stdout, once it exited 0."""
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", f"set -o pipefail; {command}", cwd=cwd, env=clean_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    output = bytearray()

    async def read(stdout: asyncio.StreamReader) -> None:
        while chunk := await stdout.read(65536):
            output.extend(chunk)

    reading = asyncio.create_task(read(proc.stdout))
    try:
        await until(lambda: holds(check, output.decode("utf-8", "replace"), session),
                    f"{command} to give what its document says", seconds=30)  # fmt: skip
        proc.stdin.close()  # Ctrl-D
        async with asyncio.timeout(30):
            _, err, status = await asyncio.gather(reading, proc.stderr.read(), proc.wait())
    finally:
        with suppress(ProcessLookupError):  # what is left of the pipeline, if the test failed
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        reading.cancel()
    assert status == 0, f"{command}: exit {status}: {err.decode()}"
    return output.decode()


def holds(check: Check, output: str, session: Session) -> bool:
    """Whether ``output`` (so far) passes ``check``."""
    try:
        check(output, session)
    except (AssertionError, ValueError, KeyError):
        return False
    return True


async def run_any_recipe(recipe: str, cwd: Path, session: Session) -> str:
    """A recipe's output, run in ``cwd`` with the session's values, as a person runs it."""
    command = runnable(recipe, session)
    if UNTIL_CTRL_D in recipe:
        return await run_until_ctrl_d(command, cwd, RECIPES[recipe], session)
    return await asyncio.to_thread(run_recipe, command, cwd)


@pytest.mark.slow
async def test_shell_recipes_return_what_the_docs_say(tmp_path: Path) -> None:
    """Every recipe, run on a live relay's JSON log, its trace and its endpoints, gives what
    its document says it gives (non-empty, the right lines)."""
    require_packages("jq", "curl", commands=("jq", "curl"))
    traces = tmp_path / "DIR"
    args = ("--agent", shlex.join(DEMO_AGENT), "--trace-dir", str(traces), "--kill-grace", "0.5")
    async with serve(*args, env=secret_env()) as relay:
        ticket = make_ticket(subject=SUBJECT)
        async with connect(relay.ticket_url(ticket)) as ws:
            session = await hang_a_session(ws, str(tmp_path))
        session.port = relay.port
        await relay.wait_event("connection closed")
        (tmp_path / "relay.log").write_text("\n".join(relay.stderr) + "\n", encoding="utf-8")
        (trace,) = traces.glob(f"*-{session.connection_id}.ndjson")
        for name in ("t.ndjson", "trace.ndjson"):
            shutil.copy(trace, tmp_path / name)
        failed = []
        for document, recipe in shell_recipes():
            output = await run_any_recipe(recipe, tmp_path, session)
            try:
                RECIPES[recipe](output, session)
            except (AssertionError, ValueError, KeyError) as exc:
                failed.append(f"{document}: {recipe}\n  gave {output!r}\n  {exc!r}")
    assert not failed, "\n".join(failed)


# -- /busy --------------------------------------------------------------------------------

BUSY_EXAMPLE = re.compile(r'\{"busy"[^}]*\}')


def busy_examples() -> list[tuple[str, str]]:
    """(page, example) for every /busy report a page shows, in prose, tables or code."""
    pages = dict.fromkeys([*documents(), *sorted((ROOT / "deploy").rglob("*.md"))])
    return [
        (str(page.relative_to(ROOT)), example[0])
        for page in pages
        for example in BUSY_EXAMPLE.finditer(page.read_text(encoding="utf-8"))
    ]


async def test_busy_examples_are_what_busy_returns() -> None:
    """Each /busy example of the docs has the keys a live relay's /busy returns, in its order."""
    async with live_relay() as live:
        keys = list(await busy(live.relay.port))
    examples = busy_examples()
    assert len(examples) >= 4
    wrong = [
        f"{page}: {example}"
        for page, example in examples
        if re.findall(r'"(\w+)"\s*[:,}]', example) != keys
    ]
    assert not wrong, f"/busy returns {keys}; these examples differ:\n" + "\n".join(wrong)
