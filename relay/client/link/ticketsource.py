"""Where ``connect`` gets its ticket: given, read from a file, or printed by a command.

:func:`fetch_ticket` is called at each connect (tickets are single-use), and either
returns one trimmed ticket or raises :class:`TicketUnavailable` saying, in words for the
editor, why there is none. The ticket command runs without a shell, with a time limit;
its failure is told by its exit status and the last line of its stderr.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from relay.config.textfiles import FileRefused
from relay.core.exits import signal_name
from relay.streams.filereader import read_text

TICKET_COMMAND_TIMEOUT = 30.0  # seconds the ticket command has to print a ticket
MAX_STDERR_CHARS = 200  # how much of the ticket command's last stderr line is quoted


@dataclass(frozen=True)
class TicketSource:
    """Where the ticket comes from; exactly one field is set. Read at connect time."""

    value: str | None = None
    file: str | None = None
    command: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()  # more variables for the command (who asks, say)


class TicketUnavailable(Exception):
    """No ticket could be had; the message says why, never what the ticket is."""


async def fetch_ticket(source: TicketSource) -> str:
    """The ticket, trimmed: given, read from its file, or printed by its command."""
    if source.command is not None:
        text = await run_ticket_command(source.command, dict(source.env))
        where = "--ticket-command's output"
    elif source.file is not None:
        text, where = _read_ticket_file(source.file), f"--ticket-file {source.file}"
    else:
        text, where = source.value or "", "the ticket"
    return _checked_ticket(text.strip(), where)


def _read_ticket_file(path: str) -> str:
    try:
        return read_text(path)  # a regular file, bounded: never a pipe that blocks the loop
    except FileRefused as exc:
        raise TicketUnavailable(f"cannot read --ticket-file {path}: {exc}") from None


def _checked_ticket(ticket: str, where: str) -> str:
    if not ticket:
        raise TicketUnavailable(f"{where} is empty")
    if not (ticket.isascii() and ticket.isprintable()) or " " in ticket:
        raise TicketUnavailable(f"{where} is not one ticket: it has spaces or control characters")
    return ticket


async def run_ticket_command(argv: tuple[str, ...], env: dict[str, str] | None = None) -> str:
    """Run the ticket command (no shell), ``env`` added to its environment, and return its
    stdout; its failure in words."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env={**os.environ, **env} if env else None,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise TicketUnavailable(
            f"--ticket-command cannot run {argv[0]}: {exc.strerror or exc}"
        ) from None
    try:
        async with asyncio.timeout(TICKET_COMMAND_TIMEOUT):
            out, err = await proc.communicate()
    except TimeoutError:
        raise TicketUnavailable(
            f"--ticket-command gave no ticket within {TICKET_COMMAND_TIMEOUT:g} s"
        ) from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise TicketUnavailable(_command_failed(proc.returncode, err))
    try:
        return out.decode()
    except UnicodeDecodeError:
        raise TicketUnavailable("--ticket-command printed something that is not text") from None


def _command_failed(returncode: int | None, stderr: bytes) -> str:
    if returncode is not None and returncode < 0:
        how = f"was killed by {signal_name(-returncode)}"
    else:
        how = f"exited with status {returncode}"
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()]
    last = next((line for line in reversed(lines) if line), "")
    return f"--ticket-command {how}" + (f": {last[:MAX_STDERR_CHARS]}" if last else "")
