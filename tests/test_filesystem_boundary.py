"""The filesystem boundary end to end: the boundary test agent behind a live relay, an editor
of its own folder on the ACP SDK, every row of relay.acp.boundary.CROSSINGS under each
``--files`` policy, checked on both sides.

The editor's machine is ``tmp_path/editor``, the box's ``tmp_path/box``, mapped by
``--cwd-map <editor>=<box>``; each holds its own copy of ``project/notes.txt``. The editor
(:class:`tests.support.clients.FolderEditor`) serves files and terminals from its folder
only, so a box path that reaches it is a file it has not got, as on a real laptop.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import acp
import pytest
from acp import resource_block, resource_link_block, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import ListSessionsResponse, McpServerStdio, TextResourceContents
from websockets.asyncio.client import connect

from relay.acp.mcp import McpPolicy
from relay.acp.paths import CwdPolicy, parse_rule
from relay.acp.rewrite import Files, RewritePolicy
from tests.agents.boundary import NEW_TEXT, OUTSIDE, OUTSIDE_KEYS, last_report
from tests.support.agents import BOUNDARY_AGENT
from tests.support.audit import LogAudit
from tests.support.cli import parse_json_lines, serve
from tests.support.clients import EDITOR_CAPABILITIES, FolderEditor, RawFrames, RawLines
from tests.support.connect import CONNECT, TICKET_COMMAND, log_records
from tests.support.env import connect_env, secret_env
from tests.support.live import LiveRelay, live_relay, make_ticket, until_idle

pytestmark = pytest.mark.slow  # each test starts the boundary agent, the ACP SDK with it

TIMEOUT = 20.0  # seconds for one editor's whole exchange
POLICIES: tuple[Files, ...] = (Files.BOX, Files.SHARED, Files.PASS)
RELAY_MCP = {"name": "files", "command": "/usr/local/bin/mcp-files", "args": [], "env": []}
EDITOR_MCP = McpServerStdio(name="editor-notes", command="/usr/bin/notes", args=[], env=[])
EDITOR_COPY = "the editor's copy\n"
BOX_COPY = "the box's copy\n"


@dataclass(frozen=True)
class Machines:
    """The editor's folder and the box's, each with its copy of the project."""

    editor: Path
    box: Path

    @property
    def rule(self) -> str:
        return f"{self.editor}={self.box}"

    def project(self, side: Path) -> Path:
        return side / "project"

    def notes(self, side: Path) -> Path:
        return side / "project" / "notes.txt"

    def seen(self, files: Files, path: Path) -> str:
        """A box path as the editor sees it under ``files``: its own name for it, but
        under ``pass``."""
        if files is Files.PASS:
            return str(path)
        return str(self.editor / path.relative_to(self.box))


@pytest.fixture
def machines(tmp_path: Path) -> Machines:
    """Two folders standing for two machines, each with the project and its notes."""
    found = Machines(tmp_path / "editor", tmp_path / "box")
    for side, copy in ((found.editor, EDITOR_COPY), (found.box, BOX_COPY)):
        (side / "docs").mkdir(parents=True)
        found.project(side).mkdir()
        found.notes(side).write_text(copy)
    return found


def policy(machines: Machines, files: Files) -> RewritePolicy:
    """``--cwd-map <editor>=<box> --files FILES`` and one MCP server of the relay's."""
    cwd = CwdPolicy((parse_rule(machines.rule),), "reject", str(machines.box), True)
    return RewritePolicy(cwd, McpPolicy((RELAY_MCP,)), files)


@asynccontextmanager
async def boundary_relay(
    machines: Machines, files: Files, *flags: str, trace_dir: Path | None = None
) -> AsyncIterator[LiveRelay]:
    """A live relay running the boundary agent under ``files``."""
    async with live_relay(
        (*BOUNDARY_AGENT, *flags),
        rewrite=policy(machines, files),
        workspace=str(machines.box),
        trace_dir=None if trace_dir is None else str(trace_dir),
    ) as live:
        yield live


@asynccontextmanager
async def initialized(
    editor: FolderEditor, transport: RawFrames | RawLines
) -> AsyncIterator[ClientSideConnection]:
    """The editor's SDK client on ``transport``, initialized with fs and terminal, for the
    block (bounded); closed after it, the editor's terminals stopped."""
    conn = acp.connect_to_agent(editor, transport, observers=[editor.observe])
    try:
        async with asyncio.timeout(TIMEOUT):
            await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION, client_capabilities=EDITOR_CAPABILITIES
            )
            yield conn
    finally:
        await conn.close()
        await editor.close()


@asynccontextmanager
async def editor_over_ws(
    live: LiveRelay, editor: FolderEditor
) -> AsyncIterator[tuple[ClientSideConnection, RawFrames]]:
    """The editor's SDK client on a socket to ``live`` (:func:`initialized`); the relay idle
    again once it leaves."""
    transport = RawFrames(await connect(live.ticket_url(), max_size=None))
    async with initialized(editor, transport) as conn:
        yield conn, transport
    await until_idle(live.relay)


async def open_session(conn: ClientSideConnection, machines: Machines) -> str:
    """session/new in the editor's project, its docs as an additional directory."""
    session = await conn.new_session(
        cwd=str(machines.project(machines.editor)),
        additional_directories=[str(machines.editor / "docs")],
        mcp_servers=[EDITOR_MCP],
    )
    return session.session_id


async def one_prompt(
    live: LiveRelay, machines: Machines, words: str, *blocks: Any
) -> tuple[FolderEditor, dict[str, Any]]:
    """An editor opens a session and sends one prompt of ``words`` (the agent's steps) and
    ``blocks``; the editor and the agent's report."""
    editor = FolderEditor(machines.editor)
    async with editor_over_ws(live, editor) as (conn, _):
        sid = await open_session(conn, machines)
        done = await conn.prompt(session_id=sid, prompt=[text_block(words), *blocks])
    assert done.stop_reason == "end_turn"
    return editor, last_report(editor.texts(sid))


# -- initialize and the session-opening requests --------------------------------------------


@pytest.mark.parametrize("files", POLICIES)
async def test_capabilities_and_session_paths_as_the_agent_got_them(
    machines: Machines, files: Files
) -> None:
    """Under box the agent is offered neither fs nor terminal; under shared and pass all the
    editor declared. Under every policy its session opens in the box's project, the docs
    mapped too, with the relay's MCP server merged in."""
    async with boundary_relay(machines, files) as live:
        _, report = await one_prompt(live, machines, "links")
    offered = report["offered"]
    if files is Files.BOX:
        assert ("fs" in offered, "terminal" in offered) == (False, False)
    else:
        assert offered["fs"] == {"readTextFile": True, "writeTextFile": True}
        assert offered["terminal"] is True
    assert report["cwd"] == str(machines.project(machines.box))
    assert report["additionalDirectories"] == [str(machines.box / "docs")]
    assert report["mcpServers"] == ["editor-notes", "files"]


# -- the agent's fs and terminal requests ----------------------------------------------------


@pytest.mark.parametrize("files", POLICIES)
async def test_an_edit_lands_in_the_copy_the_policy_names(machines: Machines, files: Files) -> None:
    """box: the agent reads, writes and runs in the box and the editor is never asked;
    shared: the editor is asked with its own paths, the edit lands in its copy and a path
    under no mapping is answered by the relay; pass: the editor is asked with the box's
    paths, which it has not got."""
    box_notes, editor_notes = machines.notes(machines.box), machines.notes(machines.editor)
    async with boundary_relay(machines, files) as live:
        editor, report = await one_prompt(live, machines, "read write terminal")
    by = "agent" if files is Files.BOX else "client"
    assert (report["read"]["by"], report["write"]["by"], report["terminal"]["by"]) == (by,) * 3
    asked = [(method, params.get("path", params.get("cwd"))) for method, params in editor.calls]
    if files is Files.BOX:
        assert asked == []
        assert report["read"][str(box_notes)] == {"content": BOX_COPY}
        assert report["terminal"]["output"] == f"{machines.project(machines.box)}\n"
        assert (box_notes.read_text(), editor_notes.read_text()) == (NEW_TEXT, EDITOR_COPY)
    elif files is Files.SHARED:
        assert asked == [
            ("fs/read_text_file", str(editor_notes)),
            ("fs/write_text_file", str(editor_notes)),
            ("terminal/create", str(machines.project(machines.editor))),
        ]
        assert report["read"][str(box_notes)] == {"content": EDITOR_COPY}
        refused = report["read"][OUTSIDE]["error"]
        assert (refused["code"], refused["data"]["boxPath"]) == (-32602, OUTSIDE)
        assert refused["data"]["mappings"] == [machines.rule]
        assert report["terminal"]["output"] == f"{machines.project(machines.editor)}\n"
        assert (box_notes.read_text(), editor_notes.read_text()) == (BOX_COPY, NEW_TEXT)
    else:
        assert asked == [
            ("fs/read_text_file", str(box_notes)),
            ("fs/read_text_file", OUTSIDE),
            ("fs/write_text_file", str(box_notes)),
            ("terminal/create", str(machines.project(machines.box))),
        ]
        assert report["read"][str(box_notes)]["error"]["code"] == -32002  # not on its machine
        assert report["write"][str(box_notes)]["error"]["code"] == -32002
        assert report["terminal"]["error"]["code"] == -32002
        assert (box_notes.read_text(), editor_notes.read_text()) == (BOX_COPY, EDITOR_COPY)


async def test_under_box_an_agent_that_asks_anyway_is_answered_by_the_relay(
    machines: Machines,
) -> None:
    """An agent that calls fs/* and terminal/* though they were withheld gets -32601 from the
    relay for each; the editor is never asked and neither copy changes."""
    async with boundary_relay(machines, Files.BOX, "--ignore-capabilities") as live:
        editor, report = await one_prompt(live, machines, "read write terminal")
    box_notes = str(machines.notes(machines.box))
    answers = [
        report["read"][box_notes],
        report["read"][OUTSIDE],
        report["write"][box_notes],
        report["terminal"],
    ]
    withheld = [(a["error"]["code"], a["error"]["data"]["withheld"]) for a in answers]
    assert withheld == [(-32601, "fs")] * 3 + [(-32601, "terminal")]
    assert editor.calls == []
    assert machines.notes(machines.box).read_text() == BOX_COPY
    assert machines.notes(machines.editor).read_text() == EDITOR_COPY


LINKS = {  # in the project, on both sides: name -> where it leads
    "app/notes.md": "../../home/.ssh/id_rsa",
    "keys": "../home/.ssh",
    "dangling.md": "../home/.ssh/new_key",
    "out": "../home",
    "inner.md": "notes.txt",
}


def linked_tree(machines: Machines) -> None:
    """On each side, a private key beside the project and the LINKS in it; a real sub/."""
    for side in (machines.editor, machines.box):
        (side / "home" / ".ssh").mkdir(parents=True)
        (side / "home" / ".ssh" / "id_rsa").write_text(f"the private key of {side.name}\n")
        project = machines.project(side)
        (project / "app").mkdir()
        (project / "sub").mkdir()
        for name, target in LINKS.items():
            (project / name).symlink_to(target)


async def test_symbolic_links_out_of_the_shared_folder_are_refused(machines: Machines) -> None:
    """--files shared maps the project only: a read, a write (to a file not there yet, under
    a linked folder or through a dangling link) and a terminal's cwd whose symbolic links
    lead out of it are answered -32602 by the relay, naming the real path, and the editor is
    never asked; links and new files inside it reach the editor."""
    linked_tree(machines)
    e_project, b_project = machines.project(machines.editor), machines.project(machines.box)
    cwd = CwdPolicy((parse_rule(f"{e_project}={b_project}"),), "reject", str(b_project), True)
    words = ("read:app/notes.md write:keys/authorized_keys write:dangling.md terminal:out "
             "read:inner.md write:sub/new.md")  # fmt: skip
    editor = FolderEditor(machines.editor)
    async with (
        live_relay(BOUNDARY_AGENT, rewrite=RewritePolicy(cwd, McpPolicy(), Files.SHARED),
                   workspace=str(b_project)) as live,
        editor_over_ws(live, editor) as (conn, _),
    ):  # fmt: skip
        session = await conn.new_session(cwd=str(e_project), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[text_block(words)])
        report = last_report(editor.texts(session.session_id))
    ssh = (machines.box / "home" / ".ssh").resolve()
    refused = {
        "read:app/notes.md": ssh / "id_rsa",
        "write:keys/authorized_keys": ssh / "authorized_keys",
        "write:dangling.md": ssh / "new_key",
        "terminal:out": ssh.parent,
    }
    for word, real in refused.items():
        error = report[word].get("error", report[word])
        assert (error.get("code"), error.get("data", {}).get("realPath")) == (-32602, str(real))
        assert error["data"]["mappedFolder"] == str(b_project)
    assert report["read:inner.md"] == {"content": EDITOR_COPY}
    assert report["write:sub/new.md"] == {"written": NEW_TEXT}
    assert editor.calls == [
        ("fs/read_text_file", {"path": str(e_project / "inner.md")}),
        ("fs/write_text_file", {"path": str(e_project / "sub" / "new.md"), "content": NEW_TEXT}),
    ]
    for side in (machines.editor, machines.box):
        assert sorted(p.name for p in (side / "home" / ".ssh").iterdir()) == ["id_rsa"]


def fs_and_terminal(frames: list[str]) -> list[tuple[str, str, str | None]]:
    """Each frame the editor received that is a batch or an fs/ or terminal/ message:
    ("batch", "", None), or its form, method and path (or cwd)."""
    found: list[tuple[str, str, str | None]] = []
    for frame in frames:
        message = json.loads(frame)
        if not isinstance(message, dict):
            found.append(("batch", "", None))
            continue
        method = str(message.get("method"))
        if method.startswith(("fs/", "terminal/")):
            params = message.get("params", {})
            form = "request" if "id" in message else "notification"
            found.append((form, method, params.get("path", params.get("cwd"))))
    return found


@pytest.mark.parametrize("files", POLICIES)
async def test_no_form_of_fs_or_terminal_dodges_the_policy(
    machines: Machines, files: Files
) -> None:
    """The agent writes its notes, a file under no mapping and runs a terminal as requests,
    as notifications (no id) and in a batch. box: nothing of them reaches the editor, the
    relay answers each (id null for the notifications and the batch); shared: requests and
    notifications alike reach it with the editor's paths, those under no mapping and the
    batch are answered by the relay; pass: everything reaches it as the agent wrote it."""
    editor = FolderEditor(machines.editor)
    async with (
        boundary_relay(machines, files, "--ignore-capabilities") as live,
        editor_over_ws(live, editor) as (conn, transport),
    ):
        sid = await open_session(conn, machines)
        await conn.prompt(session_id=sid, prompt=[text_block("forms")])
        report = last_report(editor.texts(sid))["forms"]
    reached = fs_and_terminal(transport.frames)
    codes = [answer.get("error", {}).get("code") for answer in report["requests"]]
    answered = [answer["code"] for answer in report["answers"]]
    assert report["barrier"]["outcome"]["optionId"] == "allow"  # the answers came before it
    notes, project = machines.notes(machines.box), machines.project(machines.box)
    if files is Files.BOX:
        assert (reached, codes, answered) == ([], [-32601] * 3, [-32601] * 3 + [-32600])
        assert machines.notes(machines.editor).read_text() == EDITOR_COPY
    elif files is Files.SHARED:
        mine = [("fs/write_text_file", machines.seen(files, notes)),
                ("terminal/create", machines.seen(files, project))]  # fmt: skip
        assert reached == [
            ("request", *mine[0]), ("request", *mine[1]), ("request", "terminal/release", None),
            ("notification", *mine[0]), ("notification", *mine[1]),
        ]  # fmt: skip
        assert (codes, answered) == ([None, -32602, None], [-32602, -32600])
        assert report["answers"][0]["data"]["boxPath"] == OUTSIDE_KEYS
        assert machines.notes(machines.editor).read_text() == NEW_TEXT
    else:
        calls = [("fs/write_text_file", str(notes)), ("fs/write_text_file", OUTSIDE_KEYS),
                 ("terminal/create", str(project))]  # fmt: skip
        assert reached == [*(("request", *c) for c in calls),
                           *(("notification", *c) for c in calls), ("batch", "", None)]  # fmt: skip
        assert (codes, answered) == ([-32002] * 3, [])
    assert notes.read_text() == BOX_COPY


# -- what the agent shows the editor ---------------------------------------------------------


def content_paths(content: list[dict[str, Any]]) -> list[str]:
    """The diff path, link URI and resource URI of a tool call's content, in order."""
    found = []
    for item in content:
        if item["type"] == "diff":
            found.append(item["path"])
        elif item["content"]["type"] == "resource_link":
            found.append(item["content"]["uri"])
        else:
            found.append(item["content"]["resource"]["uri"])
    return found


@pytest.mark.parametrize("files", POLICIES)
async def test_tool_calls_and_permission_requests_name_the_editors_files(
    machines: Machines, files: Files
) -> None:
    """Locations, diffs, links and resources of tool calls and of the permission request reach
    the editor with its own paths (box's under pass); a path under no mapping and rawInput
    stay as the agent wrote them."""
    async with boundary_relay(machines, files) as live:
        editor, report = await one_prompt(live, machines, "tools permission")
    notes = machines.seen(files, machines.notes(machines.box))
    box_notes = str(machines.notes(machines.box))
    uri = Path(notes).as_uri()
    start, done = editor.updates_of("tool_call", "tool_call_update")
    for update in (start, done):
        assert update["locations"] == [{"path": notes, "line": 1}, {"path": OUTSIDE}]
    assert content_paths(start["content"]) == [notes, uri, uri]
    assert content_paths(done["content"]) == [notes]
    assert start["rawInput"] == {"path": box_notes}
    assert done["rawOutput"] == {"path": box_notes}
    [asked] = editor.raw("session/request_permission")
    assert asked["toolCall"]["locations"] == [{"path": notes, "line": 1}, {"path": OUTSIDE}]
    assert content_paths(asked["toolCall"]["content"]) == [notes, uri, uri]
    assert report["permission"] == {"outcome": {"outcome": "selected", "optionId": "allow"}}
    assert report["tools"]["locations"] == [box_notes, OUTSIDE]


@pytest.mark.parametrize("files", POLICIES)
async def test_prompt_links_cross_both_ways_and_come_back_in_a_load(
    machines: Machines, files: Files
) -> None:
    """The file: URIs of a prompt's resource_link and resource reach the agent as the box's
    (percent-encoding kept; untouched under pass); echoed back, and replayed by
    session/load, they reach the editor as its own."""
    project = machines.project(machines.editor)
    link = resource_link_block("a b.py", (project / "a b.py").as_uri())
    embedded = resource_block(TextResourceContents(uri=(project / "b.md").as_uri(), text="# b"))
    sent = [link.uri, embedded.resource.uri]
    editor = FolderEditor(machines.editor)
    async with (
        boundary_relay(machines, files) as live,
        editor_over_ws(live, editor) as (conn, _),
    ):
        sid = await open_session(conn, machines)
        await conn.prompt(session_id=sid, prompt=[text_block("links"), link, embedded])
        report = last_report(editor.texts(sid))
        echoed = len(editor.updates_of("agent_message_chunk"))
        await conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
    box_project = machines.project(machines.box)
    in_box = [(box_project / "a b.py").as_uri(), (box_project / "b.md").as_uri()]
    expected = sent if files is Files.PASS else in_box
    assert report["links"] == expected
    assert "a%20b.py" in report["links"][0]
    chunks = [u["content"] for u in editor.updates_of("agent_message_chunk")]
    assert [c["uri"] for c in chunks[:echoed] if c["type"] == "resource_link"] == sent[:1]
    assert [c["resource"]["uri"] for c in chunks[:echoed] if c["type"] == "resource"] == sent[1:]
    replayed = [u["content"] for u in editor.updates_of("user_message_chunk")]
    assert [c["type"] for c in replayed] == ["text", "resource_link", "resource"]
    assert [replayed[1]["uri"], replayed[2]["resource"]["uri"]] == sent


@pytest.mark.parametrize("files", POLICIES)
async def test_session_list_finds_the_session_by_the_editors_cwd(
    machines: Machines, files: Files
) -> None:
    """session/list with the editor's cwd finds the session opened through the relay and
    shows the editor's paths (under pass: finds nothing, and the unfiltered list shows the
    box's paths)."""
    editor = FolderEditor(machines.editor)
    async with (
        boundary_relay(machines, files) as live,
        editor_over_ws(live, editor) as (conn, _),
    ):
        sid = await open_session(conn, machines)
        found = await conn.list_sessions(cwd=str(machines.project(machines.editor)))
        everything = await conn.list_sessions()
    listed = [(s.session_id, s.cwd, s.additional_directories) for s in everything.sessions]
    project, docs = machines.project(machines.box), machines.box / "docs"
    assert listed == [(sid, machines.seen(files, project), [machines.seen(files, docs)])]
    if files is Files.PASS:
        assert found.sessions == []
    else:
        editors = str(machines.project(machines.editor))
        assert [(s.session_id, s.cwd) for s in found.sessions] == [(sid, editors)]


# -- seen by a person: the trace and the log -------------------------------------------------


async def everything(
    conn: ClientSideConnection, machines: Machines
) -> tuple[str, ListSessionsResponse]:
    """Every row at once: a session, a prompt running every step with a link and a resource,
    session/list with and without the editor's cwd, and session/load; the session's id and
    what session/list with the editor's cwd found."""
    project = machines.project(machines.editor)
    link = resource_link_block("notes.txt", (project / "notes.txt").as_uri())
    embedded = resource_block(TextResourceContents(uri=(project / "b.md").as_uri(), text="# b"))
    sid = await open_session(conn, machines)
    await conn.prompt(session_id=sid, prompt=[text_block("go"), link, embedded])
    found = await conn.list_sessions(cwd=str(project))
    await conn.list_sessions()
    await conn.load_session(cwd=str(project), session_id=sid, mcp_servers=[])
    return sid, found


def trace_records(folder: Path) -> list[dict[str, Any]]:
    """The records of the one trace file in ``folder``."""
    [trace] = folder.iterdir()
    return [json.loads(line) for line in trace.read_text().splitlines()]


Crossed = tuple[str, str, str, str]  # direction, field, from, to


def expected_crossings(machines: Machines, files: Files) -> Counter[Crossed]:
    """What :func:`everything` translates under ``files``: (direction, field, from, to)."""
    e_project, b_project = machines.project(machines.editor), machines.project(machines.box)
    e_docs, b_docs = str(machines.editor / "docs"), str(machines.box / "docs")
    e_notes, b_notes = str(e_project / "notes.txt"), str(b_project / "notes.txt")
    e_link, b_link = Path(e_notes).as_uri(), Path(b_notes).as_uri()
    e_md, b_md = (e_project / "b.md").as_uri(), (b_project / "b.md").as_uri()
    cwd = ("params.cwd", str(e_project), str(b_project))
    to_agent = [cwd, ("params.additionalDirectories[0]", e_docs, b_docs), cwd]  # new, load
    if files is Files.PASS:
        return Counter(("to_agent", *row) for row in to_agent)
    to_agent += [
        ("params.prompt[1].uri", e_link, b_link),
        ("params.prompt[2].resource.uri", e_md, b_md),
        cwd,  # session/list's filter
    ]
    update, call = "params.update", "params.toolCall"
    tool_call = [
        (f"{update}.locations[0].path", b_notes, e_notes),
        (f"{update}.content[0].path", b_notes, e_notes),
    ]
    chunks = [
        (f"{update}.content.uri", b_link, e_link),
        (f"{update}.content.resource.uri", b_md, e_md),
    ]
    listed = [
        ("result.sessions[0].cwd", str(b_project), str(e_project)),
        ("result.sessions[0].additionalDirectories[0]", b_docs, e_docs),
    ]
    to_editor = [
        *tool_call,  # tool_call, then tool_call_update
        (f"{update}.content[1].content.uri", b_link, e_link),
        (f"{update}.content[2].content.resource.uri", b_link, e_link),
        *tool_call,
        (f"{call}.locations[0].path", b_notes, e_notes),
        (f"{call}.content[0].path", b_notes, e_notes),
        (f"{call}.content[1].content.uri", b_link, e_link),
        (f"{call}.content[2].content.resource.uri", b_link, e_link),
        *chunks,  # echoed by the agent, then replayed by session/load
        *chunks,
        *listed,  # with the filter, then without
        *listed,
    ]
    if files is Files.SHARED:
        to_editor += [
            ("params.path", b_notes, e_notes),  # fs/read_text_file
            ("params.path", b_notes, e_notes),  # fs/write_text_file
            ("params.cwd", str(b_project), str(e_project)),  # terminal/create
        ]
    to_client = [("to_client", *row) for row in to_editor]
    return Counter([("to_agent", *row) for row in to_agent] + to_client)


def crossed_in(records: list[dict[str, Any]]) -> Counter[Crossed]:
    """Every translation the trace recorded: (direction, field, from, to)."""
    return Counter(
        (record["dir"], c["field"], c["from"], c["to"])
        for record in records
        for c in record.get("crossed", ())
    )


@pytest.mark.parametrize("files", POLICIES)
async def test_a_trace_records_each_translation_and_the_log_counts_them(
    machines: Machines, files: Files, tmp_path: Path, audit: LogAudit
) -> None:
    """Each path the relay translated is in the trace as field, from and to; the closing
    "paths crossed" line counts them (and what was withheld, answered and left), and the
    withheld capabilities are logged once."""
    traces = tmp_path / "traces"
    traces.mkdir(mode=0o700)
    editor = FolderEditor(machines.editor)
    async with (
        boundary_relay(machines, files, trace_dir=traces) as live,
        editor_over_ws(live, editor) as (conn, _),
    ):
        await everything(conn, machines)
    records = trace_records(traces)
    crossings = crossed_in(records)
    assert crossings == expected_crossings(machines, files)
    logged = parse_json_lines(audit.lines())
    [counted] = [r for r in logged if r["event"] == "paths crossed"]
    answered = [r for r in records if r.get("dir") == "to_agent" and r.get("by") == "relay"]
    assert {name: counted[name] for name in ("translated_to_agent", "translated_to_editor")} == {
        "translated_to_agent": sum(1 for c in crossings.elements() if c[0] == "to_agent"),
        "translated_to_editor": sum(1 for c in crossings.elements() if c[0] == "to_client"),
    }
    assert counted["answered_to_agent"] == len(answered) == (1 if files is Files.SHARED else 0)
    assert counted["withheld"] == (2 if files is Files.BOX else 0)
    assert counted["left_unmapped"] == (0 if files is Files.PASS else 3)  # /etc/hostname, thrice
    withheld = [r for r in logged if r["event"] == "editor capabilities withheld"]
    assert [r["capabilities"] for r in withheld] == (
        [["fs", "terminal"]] if files is Files.BOX else []
    )


# -- the default policy, through the real commands -------------------------------------------

AGENT_TEXT = frozenset({"text", "title", "rawInput", "rawOutput"})


def without_agent_text(value: Any) -> Any:
    """``value`` without what the agent wrote as text: text, titles, rawInput, rawOutput."""
    if isinstance(value, dict):
        return {k: without_agent_text(v) for k, v in value.items() if k not in AGENT_TEXT}
    if isinstance(value, list):
        return [without_agent_text(item) for item in value]
    return value


def box_paths_in(frames: list[str], box: Path) -> Iterator[str]:
    """The frames that name a path under ``box`` outside the agent's own text."""
    for frame in frames:
        if str(box) in json.dumps(without_agent_text(json.loads(frame)), ensure_ascii=False):
            yield frame


@asynccontextmanager
async def editor_through_connect(
    url: str, editor: FolderEditor, stderr: Path, *args: str
) -> AsyncIterator[tuple[ClientSideConnection, RawLines]]:
    """The editor's SDK client launching ``acp-relay connect URL ARGS`` as its agent
    (:func:`initialized`), with a ticket in its environment and its stderr into ``stderr``;
    connect gone once it leaves."""
    with stderr.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            *CONNECT, url, *args,
            env=connect_env(make_ticket()),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=err, limit=1 << 24,
        )  # fmt: skip
    transport = RawLines(process)
    try:
        async with initialized(editor, transport) as conn:
            yield conn, transport
    finally:
        try:
            async with asyncio.timeout(TIMEOUT):
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.mark.parametrize("profile", ["acp.v1", "resume"])
async def test_under_the_default_policy_no_box_path_reaches_the_editor(
    machines: Machines, tmp_path: Path, audit: LogAudit, profile: str
) -> None:
    """acp-relay serve --cwd-map (no --files) and an editor through acp-relay connect, plain
    or under the resume profile: of every line the editor received, none names a path under
    the box's folder but in the agent's own text; the edit lands in the box's copy, the
    editor is never asked; the trace and the closing log line agree on each translation."""
    traces = tmp_path / "traces"
    traces.mkdir(mode=0o700)
    flags = ["--agent", shlex.join(BOUNDARY_AGENT), "--cwd-map", machines.rule,
             "--workspace", str(machines.box), "--trace-dir", str(traces)]  # fmt: skip
    editor = FolderEditor(machines.editor)
    async with serve(*flags, env=secret_env()) as run:
        audit.watch(run.stderr)
        resume = ("--ticket-command", TICKET_COMMAND) if profile == "resume" else ()
        stderr = tmp_path / "connect.err"
        async with editor_through_connect(run.url, editor, stderr, *resume) as (conn, transport):
            sid, found = await everything(conn, machines)
        [counted] = await run.wait_event("paths crossed")
    said = [record["event"] for record in log_records(stderr.read_bytes())]
    assert ("resumable" in said) == (profile == "resume")
    frames, records = transport.frames, trace_records(traces)
    assert list(box_paths_in(frames, machines.box)) == []
    assert len(frames) == sum(1 for r in records if r.get("dir") == "to_client")  # all of them
    assert sum(str(machines.box) in frame for frame in frames) >= 2  # the agent's text
    assert machines.notes(machines.box).read_text() == NEW_TEXT
    assert machines.notes(machines.editor).read_text() == EDITOR_COPY
    assert editor.calls[0][0] == "session/request_permission"
    assert len(editor.calls) == 1  # no fs/*, no terminal/*
    assert [(s.session_id, s.cwd) for s in found.sessions] == [
        (sid, str(machines.project(machines.editor)))
    ]
    [start] = editor.updates_of("tool_call")
    assert start["locations"][0]["path"] == str(machines.notes(machines.editor))
    crossings = crossed_in(records)
    assert crossings == expected_crossings(machines, Files.BOX)
    assert (counted["translated_to_agent"], counted["translated_to_editor"]) == (
        sum(1 for c in crossings.elements() if c[0] == "to_agent"),
        sum(1 for c in crossings.elements() if c[0] == "to_client"),
    )
    assert run.events("editor capabilities withheld")[0]["capabilities"] == ["fs", "terminal"]
