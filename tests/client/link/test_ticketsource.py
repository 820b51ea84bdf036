"""Tests for relay.client.link.ticketsource: where connect gets its ticket, and why it has none.

Through a real ``python -m relay connect`` (helpers from :mod:`tests.support.connect`) and
by calling :func:`relay.client.link.ticketsource.fetch_ticket` with real files and commands.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from relay.client.link.ticketsource import TicketSource, TicketUnavailable, fetch_ticket
from relay.config.textfiles import MAX_FILE_BYTES
from tests.support.connect import check_refused, editor, notification, sdk_refused
from tests.support.env import connect_env
from tests.support.live import SECRET, live_relay, make_ticket

CAT = ("cat",)

# -- through connect ------------------------------------------------------------------------


@pytest.mark.slow
async def test_ticket_command_mints_a_fresh_ticket_at_each_connect(tmp_path: Path) -> None:
    """--ticket-command runs at each connect (tickets are single-use); the query form works."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    command = f"{sys.executable} -m relay ticket --secret-file {secret_file}"
    async with live_relay(CAT) as live:
        for where in ("header", "query"):
            args = ("--ticket-command", command, "--ticket-in", where)
            async with editor(live.url(), *args, env=connect_env()) as ed:
                await ed.send(notification(where))
                assert await ed.receive() == notification(where)
                await ed.close_stdin()
                assert await ed.exit_status() == 0


async def test_ticket_file_is_read_at_connect(tmp_path: Path) -> None:
    """--ticket-file supplies the ticket; it never shows in stderr."""
    ticket = make_ticket()
    ticket_file = tmp_path / "ticket"
    ticket_file.write_text(f"{ticket}\n")
    args = ("--ticket-file", str(ticket_file))
    async with live_relay(CAT) as live, editor(live.url(), *args, env=connect_env()) as ed:
        await ed.send(notification(1))
        assert await ed.receive() == notification(1)
        await ed.close_stdin()
        assert await ed.exit_status() == 0
    assert ticket not in ed.stderr.decode()


async def test_failing_ticket_command_is_answered_with_its_reason(tmp_path: Path) -> None:
    """A ticket command that fails gives each request an error quoting its status and stderr."""
    command = f"{sys.executable} -c \"import sys; sys.exit('no session for alice')\""
    url = "ws://127.0.0.1:9/acp"
    refused = await sdk_refused(
        url, "--ticket-command", command, env=connect_env(), stderr_file=tmp_path / "err"
    )
    detail = "--ticket-command exited with status 1: no session for alice"
    check_refused(
        refused,
        f"cannot get a ticket for relay at {url}: {detail}",
        {"url": url, "cause": "ticket", "detail": detail},
        secret="never-a-ticket",
    )


# -- fetch_ticket ---------------------------------------------------------------------------


async def test_ticket_is_trimmed_from_each_source(tmp_path: Path) -> None:
    """The given ticket, the file's and the command's output all lose surrounding whitespace."""
    ticket_file = tmp_path / "ticket"
    ticket_file.write_text("  from-file\n")
    command = (sys.executable, "-c", "print(' from-command ')")
    assert await fetch_ticket(TicketSource(value=" given\n")) == "given"
    assert await fetch_ticket(TicketSource(file=str(ticket_file))) == "from-file"
    assert await fetch_ticket(TicketSource(command=command)) == "from-command"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read --ticket-file {path}: No such file or directory"),
        (b"\n", "--ticket-file {path} is empty"),
        (b"two words\n", "--ticket-file {path} is not one ticket: it has spaces or control "
         "characters"),
        (b"\xff\xfe", "cannot read --ticket-file {path}: it is not UTF-8 text (byte 0xff at "
         "offset 0)"),
        ("fifo", "cannot read --ticket-file {path}: it is a named pipe (FIFO), not a regular "
         "file; the relay reads regular files only: write what it should read to a file"),
        ("directory", "cannot read --ticket-file {path}: it is a directory, not a file"),
        (b"t" * (MAX_FILE_BYTES + 1), "cannot read --ticket-file {path}: it is over 1 MiB "
         "(1048577 bytes), more than the relay reads of such a file"),
    ],
    ids=["missing", "empty", "two-words", "not-text", "fifo", "directory", "too big"],
)  # fmt: skip
async def test_ticket_file_problems_are_said_in_words(
    tmp_path: Path, content: bytes | str | None, says: str
) -> None:
    """A missing, empty, binary, many-word or oversized ticket file, a FIFO (never waited on:
    it would block the editor's bridge) or a directory gives no ticket, saying why."""
    path = tmp_path / "ticket"
    if content == "fifo":
        os.mkfifo(path)
    elif content == "directory":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(TicketUnavailable) as unavailable:
        await fetch_ticket(TicketSource(file=str(path)))
    assert str(unavailable.value) == says.format(path=path)


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (("/nonexistent/ticket-command",), "--ticket-command cannot run "
         "/nonexistent/ticket-command: No such file or directory"),
        ((sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
         "--ticket-command was killed by SIGKILL"),
        ((sys.executable, "-c", "import sys; sys.stderr.write('x' * 500 + '\\n\\n'); "
          "sys.exit(3)"), "--ticket-command exited with status 3: " + "x" * 200),
        ((sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'\\xff')"),
         "--ticket-command printed something that is not text"),
    ],
    ids=["cannot-run", "killed", "status-and-stderr", "not-text"],
)  # fmt: skip
async def test_ticket_command_failures_are_said_in_words(
    command: tuple[str, ...], says: str
) -> None:
    """A command that cannot run, is killed, fails or prints bytes gives no ticket, saying why."""
    with pytest.raises(TicketUnavailable) as unavailable:
        await fetch_ticket(TicketSource(command=command))
    assert str(unavailable.value) == says
