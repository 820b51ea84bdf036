"""Tests for relay.streams.filereader: every file a command reads at start-up, read within bounds or
refused with exit status 2, the flag, the path and the problem; hostile files as real
subprocess runs of each command."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from relay.config.errors import UsageError
from relay.config.textfiles import MAX_CACERT_BYTES, MAX_FILE_BYTES, REGULAR_ONLY, FileRefused
from relay.streams.filereader import read_named, read_text
from tests.support.cli import run_cli
from tests.support.env import clean_env, secret_env


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    """A regular UTF-8 file up to the limit gives its text."""
    path = tmp_path / "relay.toml"
    path.write_text("listen = 'café'\n" + "#" * 100)
    assert read_text(str(path), 117) == "listen = 'café'\n" + "#" * 100


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    """A named pipe with no writer is refused at once (opening it never blocks)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match=r"named pipe \(FIFO\)"):
        read_text(str(fifo))


def test_dev_zero_is_refused_without_reading_it() -> None:
    """A character device is refused before any byte is read."""
    with pytest.raises(FileRefused, match="character device"):
        read_text("/dev/zero")


def test_a_missing_file_says_what_the_system_says(tmp_path: Path) -> None:
    """A file that is not there is named with the system's words, and the flag."""
    missing = tmp_path / "missing.toml"
    with pytest.raises(UsageError) as refused:
        read_named(str(missing), "--config")
    assert str(refused.value) == f"cannot read --config {missing}: No such file or directory"


def test_the_limit_is_a_byte_count(tmp_path: Path) -> None:
    """A file of exactly the limit is read; one byte more is refused."""
    path = tmp_path / "secret"
    path.write_bytes(b"s" * 64)
    assert read_text(str(path), 64) == "s" * 64
    path.write_bytes(b"s" * 65)
    with pytest.raises(FileRefused, match=r"over 64 bytes \(65 bytes\)"):
        read_text(str(path), 64)


# -- every file option of every command, hostile, as a subprocess ---------------------

KINDS = ("device", "fifo", "too big", "nested", "not utf-8", "directory")
SAID = {
    "device": f"it is a character device, not a regular file; {REGULAR_ONLY}",
    "fifo": f"it is a named pipe (FIFO), not a regular file; {REGULAR_ONLY}",
    "directory": "it is a directory, not a file",
    "not utf-8": "it is not UTF-8 text (byte 0xff at offset 0)",
}
CAT = "cat"  # an agent that is found on PATH
NO_RELAY = "ws://127.0.0.1:1/acp"  # nobody listens: these commands stop before dialing
NO_TLS_RELAY = "wss://127.0.0.1:1/acp"


@dataclass(frozen=True)
class FileOption:
    """One file a command reads at start-up: how it is given, and what nesting in it is."""

    flag: str
    run: Callable[[str], list[str]]  # the command's arguments, given the file's path
    env: Callable[[str], dict[str, str]] = lambda _path: secret_env()
    limit: int = MAX_FILE_BYTES
    nested: str | None = None  # a text nested past any limit, for a file that nests


DEEP_TOML = "agent" + ".a" * 50_000 + " = 1\n"
DEEP_JSON = "[" * 100_000 + "]" * 100_000

OPTIONS = {
    "serve --config": FileOption(
        "--config", lambda path: ["serve", "--agent", CAT, "--config", path], nested=DEEP_TOML
    ),
    "serve ACP_RELAY_CONFIG": FileOption(
        "ACP_RELAY_CONFIG",
        lambda _path: ["serve", "--agent", CAT],
        env=lambda path: secret_env(ACP_RELAY_CONFIG=path),
        nested=DEEP_TOML,
    ),
    "serve --secret-file": FileOption(
        "--secret-file",
        lambda path: ["serve", "--agent", CAT, "--secret-file", path],
        env=lambda _path: clean_env(),
    ),
    "serve --mcp-servers": FileOption(
        "--mcp-servers",
        lambda path: ["serve", "--agent", CAT, "--mcp-servers", path],
        nested=DEEP_JSON,
    ),
    "ticket --config": FileOption(
        "--config", lambda path: ["ticket", "--config", path], nested=DEEP_TOML
    ),
    "ticket --secret-file": FileOption(
        "--secret-file", lambda path: ["ticket", "--secret-file", path], env=lambda _: clean_env()
    ),
    "connect --ticket-file": FileOption(
        "--ticket-file", lambda path: ["connect", NO_RELAY, "--ticket-file", path]
    ),
    "watch --ticket-file": FileOption(
        "--ticket-file", lambda path: ["watch", NO_RELAY, "--ticket-file", path]
    ),
    "connect --cacert": FileOption(
        "--cacert",
        lambda path: ["connect", NO_TLS_RELAY, "--ticket", "t", "--cacert", path],
        limit=MAX_CACERT_BYTES,
    ),
    "watch --cacert": FileOption(
        "--cacert",
        lambda path: ["watch", NO_TLS_RELAY, "--ticket", "t", "--cacert", path],
        limit=MAX_CACERT_BYTES,
    ),
}
CHAT = ["chat", NO_RELAY, "--homeserver", "http://127.0.0.1:1", "--user", "@bot:t", "--room",
        "!r", "--approver", "@a:t", "--ticket-command", "true"]  # fmt: skip


def chat_with(flag: str, path: str) -> list[str]:
    """chat's arguments with ``flag`` given ``path``; its state file in the test's own
    folder (TMPDIR), should the command ever get as far as creating it."""
    state = os.path.join(os.environ["TMPDIR"], "never-opened.db")
    return [*CHAT, "--state", state, flag, path]


OPTIONS |= {
    "chat --config": FileOption(
        "--config", lambda path: chat_with("--config", path), nested=DEEP_TOML
    ),
    "chat --token-file": FileOption("--token-file", lambda path: chat_with("--token-file", path)),
}
CASES = [
    (option, kind)
    for option, spec in OPTIONS.items()
    for kind in KINDS
    if kind != "nested" or spec.nested is not None
]


def hostile_file(tmp_path: Path, kind: str, option: FileOption) -> Path:
    """A file of ``kind`` for ``option``: a device, a FIFO without a writer, one byte over
    the limit, nested past any limit, Latin-1 bytes, or a directory."""
    path = tmp_path / "given"
    if kind == "device":
        return Path("/dev/zero")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "too big":
        path.write_bytes(b"#" * (option.limit + 1))
    elif kind == "nested":
        assert option.nested is not None
        path.write_text(option.nested)
    elif kind == "not utf-8":
        path.write_bytes(b"\xff\xfe not UTF-8 \xe9\n")
    else:
        path.mkdir()
    return path


def expected_message(kind: str, option: FileOption, path: Path) -> str:
    """What the command says on stderr for ``option`` given a ``kind`` of file."""
    if kind == "nested" and option.nested == DEEP_JSON:
        return f"acp-relay: --mcp-servers {path}: nested too deeply (arrays or objects more than"
    if kind == "nested":
        return f"acp-relay: config file {path}: nested too deeply (50000 dots, at most 4096"
    if kind == "too big":
        limit = "4 MiB" if option.limit == MAX_CACERT_BYTES else "1 MiB"
        said = f"it is over {limit} ({option.limit + 1} bytes), more than the relay reads"
    else:
        said = SAID[kind]
    return f"acp-relay: cannot read {option.flag} {path}: {said}"


@pytest.mark.parametrize(("option", "kind"), CASES, ids=[f"{o}-{k}" for o, k in CASES])
def test_a_hostile_file_exits_2_naming_the_file_and_the_problem(
    tmp_path: Path, option: str, kind: str
) -> None:
    """Each file a command reads at start-up, given as a device, a FIFO, a file over its
    limit, a file nested too deeply, bytes that are not UTF-8 or a directory, stops the
    command at once with exit status 2 and one line naming the file and the problem."""
    spec = OPTIONS[option]
    path = hostile_file(tmp_path, kind, spec)
    result = run_cli(*spec.run(str(path)), env=spec.env(str(path)))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(expected_message(kind, spec, path)), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""
