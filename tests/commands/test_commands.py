"""End-to-end tests of the ``acp-relay`` command: real subprocesses, sockets and agents.

Each relay runs as ``python -m relay serve`` with its logs on a pipe (so JSON lines on
stderr); the tests learn its port from the "listening" line and talk to it over
127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from relay import __version__
from relay.commands import chat as chat_command
from relay.commands import connect as connect_command
from relay.commands import ticket as ticket_command
from relay.commands import watch as watch_command
from relay.config.serveoptions import OPTIONS, options_table
from relay.core.tickets import Claims, TicketError, verify
from tests.support.accounts import NOBODY, is_root, python_for, relay_for
from tests.support.agents import CHOOSER, STUBBORN, python_agent
from tests.support.cli import (
    ACP_RELAY,
    RelayRun,
    dev_banner,
    parse_json_lines,
    run_async,
    run_cli,
    serve,
)
from tests.support.env import VENV_BIN, clean_env, secret_env
from tests.support.http import busy
from tests.support.live import SECRET, make_ticket
from tests.support.sockets import closed_with, free_port, refused, round_trip
from tests.support.waiting import until_async, until_gone

CAT = "cat"
KILL_GRACE = 0.5
OTHER_SECRET = "other-secret-fedcba9876543210"
WATCHED = "80309b37-5c1e-4f0a-9d2b-7e6f5a4b3c2d"  # a connection's id, as the relay makes them

# An agent that reports its whole environment as one JSON line, then waits for EOF.
ENV_REPORTER = (
    sys.executable,
    "-c",
    "import json, os, sys\nprint(json.dumps(dict(os.environ)), flush=True)\nsys.stdin.read()\n",
)


async def mint_with_cli(*args: str, env: Mapping[str, str]) -> str:
    """What ``acp-relay ticket ARGS`` prints, checked to be one line."""
    status, out, err = await run_async([*ACP_RELAY, "ticket", *args], env=env)
    assert (status, err) == (0, "")
    assert out.endswith("\n")
    assert "\n" not in out[:-1]
    return out[:-1]


# -- serve --dev ----------------------------------------------------------------------


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0", "192.0.2.1:0"])
def test_dev_on_a_non_loopback_address_exits_2_with_the_fix(listen: str) -> None:
    """--dev listening beyond loopback exits 2 before binding, naming --listen and the option
    that forces it (--dev-allow-remote)."""
    message = refusal(
        run_cli("serve", "--dev", "--agent", CAT, "--listen", listen, env=clean_env())
    )
    assert "--dev listens on loopback only" in message
    assert "--listen 127.0.0.1:PORT" in message
    assert "--dev-allow-remote" in message


def dev_folders_in(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("acp-relay-dev-*"))


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
async def test_a_dev_relay_leaves_nothing_in_the_temp_dir(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """serve --dev keeps its secret and workspace in one folder naming its pid, and removes
    it when stopped by SIGTERM, SIGINT or SIGHUP."""
    env = clean_env(TMPDIR=str(tmp_path))
    async with serve("--dev", "--agent", CAT, env=env) as relay:
        await dev_banner(relay)
        [folder] = dev_folders_in(tmp_path)
        assert (folder / "relay.pid").read_text() == f"{relay.pid}\n"
        assert sorted(p.name for p in folder.iterdir()) == ["relay.pid", "secret", "workspace"]
        assert await relay.stop(sig) == 0
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("how", ["agent", "listen"])
def test_a_dev_relay_that_cannot_start_leaves_nothing(tmp_path: Path, how: str) -> None:
    """A --dev start-up that stops with exit 2 (no such agent; the port taken) removes its
    folder too."""
    env = clean_env(TMPDIR=str(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["--agent", "/nonexistent/agent"] if how == "agent" else ["--agent", CAT]
        result = run_cli("serve", "--dev", *args, "--listen", f"127.0.0.1:{port}", env=env)
    assert result.returncode == 2, result.stderr
    assert os.listdir(tmp_path) == []


async def test_the_next_dev_relay_removes_the_folder_a_killed_one_left(tmp_path: Path) -> None:
    """SIGKILL leaves a --dev folder behind; the next serve --dev says so and removes it,
    and leaves nothing itself."""
    env = clean_env(TMPDIR=str(tmp_path))
    async with serve("--dev", "--agent", CAT, env=env) as killed:
        await dev_banner(killed)
        assert await killed.stop(signal.SIGKILL) == -signal.SIGKILL
    [left] = dev_folders_in(tmp_path)
    async with serve("--dev", "--agent", CAT, env=env) as relay:
        await dev_banner(relay)
        [told] = relay.events(
            "removed the folder of a --dev relay that is gone (its throwaway secret)"
        )
        assert told["folder"] == str(left)
        assert told["level"] == "warning"
        assert not left.exists()
        assert await relay.stop() == 0
    assert os.listdir(tmp_path) == []


# -- signals ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
async def test_signal_closes_sockets_1001_and_stops_every_agent(sig: signal.Signals) -> None:
    """On SIGTERM, SIGINT or SIGHUP every socket gets 1001, the relay exits 0 in time, logging
    which signal stopped it, and no agent is left."""
    args = ("--agent", shlex.join(CHOOSER), "--kill-grace", str(KILL_GRACE))
    async with serve(*args, env=secret_env()) as relay:
        sockets: list[ClientConnection] = []
        try:
            for _ in range(3):
                sockets.append(await connect(relay.ticket_url()))
            pids: set[int] = set()
            for ws in sockets[:2]:
                await ws.send(json.dumps({"exec": STUBBORN}))
                async with asyncio.timeout(10):
                    ready = str(await ws.recv()).split()
                assert ready[0] == "ready"
                pids.update(int(pid) for pid in ready[1:])
            await sockets[2].send(json.dumps({"exec": [CAT]}))
            await round_trip(sockets[2])
            opened = await relay.wait_event("connection opened", 3)
            pids.update(record["agent_pid"] for record in opened)
            pids.update(relay.agents())
            assert len(pids) == 5  # two stubborn agents with a child each, one cat

            closing = [asyncio.create_task(closed_with(ws)) for ws in sockets]
            signalled = time.monotonic()
            status = await relay.stop(sig)
            took = time.monotonic() - signalled
            codes = [code for code, _ in await asyncio.gather(*closing)]
        finally:
            for ws in sockets:
                ws.transport.abort()
    assert status == 0
    assert took < KILL_GRACE + 2
    assert codes == [1001, 1001, 1001]
    assert await until_gone(pids, seconds=1)
    assert [(r["signal"], r["connections"]) for r in relay.events("shutting down")] == [
        (sig.name, 3)
    ]
    assert len(relay.events("connection closed")) == 3
    assert relay.events("stopped")


@pytest.mark.slow
async def test_agents_and_their_children_die_with_a_killed_relay() -> None:
    """SIGKILL the relay: its agents and their children, deaf to stdin EOF and SIGTERM, are
    stopped by the watchdog within the kill grace, and the watchdog exits."""
    args = ("--agent", shlex.join(STUBBORN), "--kill-grace", str(KILL_GRACE))
    async with serve(*args, env=secret_env()) as relay:
        watchdog = relay.events("listening")[0]["watchdog_pid"]
        sockets = [await connect(relay.ticket_url()) for _ in range(2)]
        pids: list[int] = []
        for ws in sockets:
            async with asyncio.timeout(10):
                ready = str(await ws.recv()).split()
            assert ready[0] == "ready"
            pids += [int(pid) for pid in ready[1:]]
        killed = time.monotonic()
        assert await relay.stop(signal.SIGKILL) == -signal.SIGKILL
        assert await until_gone([*pids, watchdog], seconds=KILL_GRACE + 2)
        took = time.monotonic() - killed
        for ws in sockets:
            ws.transport.abort()
    assert len(set(pids)) == 4  # two agents, a child each
    assert took < KILL_GRACE + 2
    stopping = relay.events("relay gone: stopping its agents")
    assert [sorted(r["process_groups"]) for r in stopping] == [sorted(pids[::2])]


# -- what an agent can see of the relay ----------------------------------------------------

ROOT_ONLY = pytest.mark.skipif(
    not is_root(), reason="needs root: to run the relay or its agents as nobody"
)

# An agent that reports who it runs as and what of its relay (its parent) it can read, and
# whether it can open the pipe to the relay's watchdog (its sibling) to write to it.
PROBE = (
    "import json, os, sys\n"
    "def attempt(path, size):\n"
    "    try:\n"
    "        with open(path, 'rb') as f:\n"
    "            f.read(size)\n"
    "        return 'read'\n"
    "    except OSError as e:\n"
    "        return type(e).__name__\n"
    "def steer(pid):\n"
    "    try:\n"
    "        os.close(os.open(f'/proc/{pid}/fd/0', os.O_WRONLY | os.O_NONBLOCK))\n"
    "        return 'opened'\n"
    "    except OSError as e:\n"
    "        return type(e).__name__\n"
    "def watchdog(relay):\n"
    "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
    "        try:\n"
    "            with open(f'/proc/{pid}/stat', 'rb') as f:\n"
    "                parent = int(f.read().rpartition(b')')[2].split()[1])\n"
    "            with open(f'/proc/{pid}/cmdline', 'rb') as f:\n"
    "                named = b'watchdog.py' in f.read()\n"
    "        except (OSError, ValueError, IndexError):\n"
    "            continue\n"
    "        if parent == relay and named:\n"
    "            return int(pid)\n"
    "relay = os.getppid()\n"
    "print(json.dumps({\n"
    "    'uid': os.getuid(), 'gid': os.getgid(), 'groups': sorted(os.getgroups()),\n"
    "    'home': os.environ.get('HOME'), 'user': os.environ.get('USER'),\n"
    "    'environ': attempt(f'/proc/{relay}/environ', 4096),\n"
    "    'mem': attempt(f'/proc/{relay}/mem', 0),\n"
    "    'watchdog_pipe': steer(watchdog(relay)),\n"
    "    'secret_file': attempt(sys.argv[1], 64) if len(sys.argv) > 1 else None,\n"
    "}), flush=True)\n"
    "sys.stdin.read()\n"
)


def probe_agent(*args: str) -> str:
    """--agent for the PROBE, run by a Python nobody can run (else the test is skipped)."""
    python = python_for(NOBODY)
    if python is None:
        pytest.skip(f"no Python {sys.version_info[:2]} that nobody can run")
    return shlex.join([python, "-c", PROBE, *args])


async def probe(relay: RelayRun) -> dict[str, Any]:
    """What the PROBE agent of one connection reports."""
    async with connect(relay.ticket_url()) as ws:
        async with asyncio.timeout(10):
            report = json.loads(await ws.recv())
    assert isinstance(report, dict)
    return report


def relay_as_nobody() -> tuple[tuple[str, ...], dict[str, str]]:
    """How nobody runs ``acp-relay``, or the test is skipped saying why."""
    found = relay_for(NOBODY)
    if found is None:
        pytest.skip("no Python with the relay's packages that nobody can run")
    return found


@ROOT_ONLY
async def test_an_agent_of_the_relays_own_user_cannot_read_its_environment_or_memory() -> None:
    """The relay and its watchdog are non-dumpable: an agent of their own user (here all
    nobody) can read neither /proc/<relay>/environ, where the secret is, nor open the
    relay's memory, nor open the watchdog's pipe by /proc/<watchdog>/fd/0 to steer it."""
    command, extra = relay_as_nobody()
    args = ("--agent", probe_agent(), "--workspace", "/")
    env = secret_env(**extra)
    async with serve(*args, env=env, command=command) as relay:
        report = await probe(relay)
    assert (report["uid"], report["gid"]) == (NOBODY.uid, NOBODY.gid)
    assert (report["environ"], report["mem"]) == ("PermissionError", "PermissionError")
    assert report["watchdog_pipe"] == "PermissionError"


@ROOT_ONLY
async def test_agents_run_as_the_agent_user(tmp_path: Path) -> None:
    """A root relay with --agent-user nobody runs its agents as nobody: its ids, groups,
    HOME and USER; the relay's environment and its 0600 secret file are out of reach."""
    secrets = write(tmp_path / "secret", SECRET + "\n")
    os.chmod(secrets, 0o600)
    args = ("--agent", probe_agent(secrets), "--agent-user", "nobody", "--secret-file", secrets)
    async with serve(*args, "--workspace", "/", env=clean_env(HOME="/root")) as relay:
        report = await probe(relay)
    assert (report["uid"], report["gid"], report["groups"]) == (65534, 65534, [65534])
    assert (report["home"], report["user"]) == ("/nonexistent", "nobody")
    assert report["environ"] == report["mem"] == report["secret_file"] == "PermissionError"
    assert report["watchdog_pipe"] == "PermissionError"


def run_cli_as_nobody(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m relay ARGS`` as nobody when the tests run as root, else as they run."""
    command: tuple[str, ...] = ACP_RELAY
    extra: dict[str, str] = {}
    if is_root():
        command, extra = relay_as_nobody()
    return subprocess.run(
        [*command, *args],
        env={**env, **extra},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
        cwd="/",
    )


def test_agent_user_without_root_exits_2_with_the_fix() -> None:
    """--agent-user in a relay that is not root stops start-up: only root can switch users."""
    args = ("serve", "--agent", CAT, "--agent-user", "nobody", "--listen", "127.0.0.1:0")
    message = refusal(run_cli_as_nobody(*args, env=secret_env()))
    assert message.startswith("acp-relay: --agent-user nobody: only a relay running as root ")
    assert "start the relay as root, or drop --agent-user" in message


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--agent-user", "no-such-user-xyz"], "--agent-user no-such-user-xyz: no such user"),
        (["--agent-group", "nogroup"], "--agent-group nogroup needs --agent-user USER too"),
    ],
)
def test_a_bad_agent_account_exits_2_at_start_up(args: list[str], says: str) -> None:
    """An --agent-user that does not exist, or --agent-group alone, stops start-up."""
    result = run_cli("serve", "--agent", CAT, "--listen", "127.0.0.1:0", *args, env=secret_env())
    assert refusal(result).startswith(f"acp-relay: {says}")


# -- secrets ----------------------------------------------------------------------------


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("how", ["none", "blank env", "empty file", "missing file"])
def test_no_secret_exits_2_saying_how_to_give_one(tmp_path: Path, how: str) -> None:
    """Without a usable secret (and without --dev) serve exits 2 saying how to give one."""
    args = ["serve", "--agent", CAT, "--listen", "127.0.0.1:0"]
    env = clean_env()
    if how == "blank env":
        env["ACP_RELAY_SECRET"] = "  \n"
    elif how == "empty file":
        args += ["--secret-file", write(tmp_path / "secrets", "# no secret yet\n\n")]
    elif how == "missing file":
        args += ["--secret-file", str(tmp_path / "nowhere")]
    result = run_cli(*args, env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("acp-relay: ")
    assert result.stderr.count("\n") == 1, result.stderr
    message = result.stderr
    if how in ("none", "blank env"):
        assert "ACP_RELAY_SECRET" in message
    if how != "blank env":
        assert f"--secret-file {tmp_path if how != 'none' else 'FILE'}" in message
    if how in ("blank env", "empty file"):
        assert "no secret found; put one secret per line" in message


async def test_listening_logs_the_addresses_as_bound() -> None:
    """The "listening" line gives the host as given and every address bound (localhost may
    be two), not an address it made up; the relay's own pid and the watchdog's."""
    args = ("--agent", CAT, "--listen", "localhost:0")
    async with serve(*args, env=secret_env(), listen=False) as relay:
        [listening] = relay.events("listening")
        async with connect(relay.ticket_url()) as ws:
            await round_trip(ws)
    port = relay.port
    assert listening["url"] == f"ws://localhost:{port}/acp"
    assert f"127.0.0.1:{port}" in listening["addresses"]
    assert all(re.fullmatch(r"(127\.0\.0\.1|\[::1\]):\d+", a) for a in listening["addresses"])


def test_no_agent_exits_2_naming_the_flag() -> None:
    """Without --agent (and without --dev) serve exits 2 and names --agent and ACP_RELAY_AGENT."""
    result = run_cli("serve", "--listen", "127.0.0.1:0", env=secret_env())
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("acp-relay: no agent: give --agent ")
    assert "ACP_RELAY_AGENT" in result.stderr


def test_listen_address_in_use_exits_2_naming_the_flag() -> None:
    """A --listen address already taken exits 2 with one line saying so, not a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve", "--agent", CAT, "--listen", f"127.0.0.1:{port}", env=secret_env())
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"acp-relay: cannot listen on 127.0.0.1:{port} (--listen): Address already in use: "
        "another relay or program holds it (stop it, or take any free port with "
        "--listen 127.0.0.1:0)\n"
    )


def test_metrics_address_in_use_exits_2_naming_its_flag() -> None:
    """A --metrics-listen address already taken is named as such, not as --listen's."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(
            "serve", "--agent", CAT, "--listen", "127.0.0.1:0",
            "--metrics-listen", f"127.0.0.1:{port}", env=secret_env(),
        )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.endswith(
        f"acp-relay: cannot listen on 127.0.0.1:{port} (--metrics-listen): Address already in "
        "use: another relay or program holds it (stop it, or take any free port with "
        "--metrics-listen 127.0.0.1:0)\n"
    )


# -- start-up checks --------------------------------------------------------------------------


async def test_a_second_relay_on_a_state_dir_exits_2_naming_the_first(tmp_path: Path) -> None:
    """Two relays on one --state-dir would drop each other's spent ids: the second stops
    with exit 2, naming the first relay's pid; once the first is gone the folder is free."""
    args = ("--agent", CAT, "--state-dir", str(tmp_path / "state"))
    async with serve(*args, env=secret_env()) as first:
        second = await asyncio.to_thread(
            run_cli, "serve", *args, "--listen", "127.0.0.1:0", env=secret_env()
        )
        assert f"is in use by another relay (pid {first.pid})" in refusal(second)
        assert await first.stop() == 0
    async with serve(*args, env=secret_env()) as third, connect(third.ticket_url()) as ws:
        await round_trip(ws)


async def test_an_undecodable_state_file_is_skipped_and_logged(tmp_path: Path) -> None:
    """Invalid UTF-8 in the spent tickets file costs its lines, logged with their count,
    not the start."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "spent-tickets").write_bytes(b"\xff\xfe\n9999999999 kept\njunk\n")
    async with serve("--agent", CAT, "--state-dir", str(state), env=secret_env()) as relay:
        [skipped] = await relay.wait_event("spent tickets: lines skipped")
        async with connect(relay.ticket_url()) as ws:
            await round_trip(ws)
    assert skipped["skipped"] == 2
    assert not any("Traceback" in line for line in relay.stderr)


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_state_dir_others_can_write_exits_2_with_the_fix(tmp_path: Path, mode: int) -> None:
    """An existing --state-dir its group or others may write is refused with chmod."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(mode)
    result = run_cli(
        "serve",
        "--agent",
        CAT,
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        str(state),
        env=secret_env(),
    )
    message = refusal(result)
    assert f"--state-dir {state} can be written by " in message
    assert "chmod go-w" in message


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a command that refused to start (exit status 2, no stdout)."""
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.startswith("acp-relay: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


# `python -m relay` as in an install without the [demo] extra: `import acp` fails.
WITHOUT_ACP = (
    sys.executable,
    "-c",
    "import sys\nsys.modules['acp'] = None\nfrom relay.commands import main\nsys.exit(main())\n",
)


def test_dev_without_the_demo_extra_exits_2_with_the_fix() -> None:
    """--dev without the ACP SDK exits 2 at start-up, saying to install [demo] or give --agent."""
    result = subprocess.run(
        [*WITHOUT_ACP, "serve", "--dev", "--listen", "127.0.0.1:0"],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    message = refusal(result)
    assert "pip install -e '.[demo]'" in message
    assert "--agent" in message


async def test_dev_without_the_demo_extra_runs_a_given_agent() -> None:
    """Without the ACP SDK, --dev with --agent starts: only the demo agent needs the SDK."""
    proc = await asyncio.create_subprocess_exec(
        *WITHOUT_ACP,
        "serve",
        "--dev",
        "--agent",
        CAT,
        "--listen",
        "127.0.0.1:0",
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    relay = RelayRun(proc)
    try:
        await relay.started()
        url, _ = await dev_banner(relay)
        async with connect(url) as ws:
            await round_trip(ws)
        assert await relay.stop() == 0
    finally:
        await relay.cleanup()


def agent_that_cannot_run(how: str, tmp_path: Path) -> tuple[list[str], str]:
    """Arguments giving an --agent that cannot run (``how``), and what the refusal names."""
    if how == "not on PATH":
        return ["--agent", "no-such-agent-xyz --acp"], "'no-such-agent-xyz' not found on PATH"
    if how == "missing path":
        return ["--agent", str(tmp_path / "gone")], f"{tmp_path / 'gone'} does not exist"
    if how == "not executable":
        write(tmp_path / "agent", "print('hi')\n")
        return ["--agent", str(tmp_path / "agent")], f"{tmp_path / 'agent'} is not executable"
    if how == "a directory":
        return ["--agent", str(tmp_path)], f"{tmp_path} is a directory"
    (tmp_path / "ws").mkdir()  # relative to the workspace, where the agent runs
    args = ["--agent", "./bin/agent", "--workspace", str(tmp_path / "ws")]
    return args, f"{tmp_path / 'ws' / 'bin' / 'agent'} does not exist"


@pytest.mark.parametrize(
    "how", ["not on PATH", "missing path", "not executable", "a directory", "relative"]
)
def test_an_agent_that_cannot_run_exits_2_at_start_up(tmp_path: Path, how: str) -> None:
    """An --agent program that is not on PATH, missing or not executable stops start-up."""
    args, named = agent_that_cannot_run(how, tmp_path)
    result = run_cli("serve", "--listen", "127.0.0.1:0", *args, env=secret_env())
    message = refusal(result)
    assert message.startswith("acp-relay: --agent: ")
    assert named in message


def test_an_agent_on_the_agents_own_path_is_found(tmp_path: Path) -> None:
    """The program is looked up on the PATH the agent will get (--agent-env PATH=...)."""
    args = ["--agent", "cat", "--agent-env", f"PATH={tmp_path}", "--listen", "127.0.0.1:0"]
    message = refusal(run_cli("serve", *args, env=secret_env()))
    assert "'cat' not found on PATH" in message


@pytest.mark.parametrize("how", ["missing", "a file"])
def test_a_workspace_that_is_no_directory_exits_2_at_start_up(tmp_path: Path, how: str) -> None:
    """A --workspace that does not exist or is a file stops start-up, naming it."""
    workspace = tmp_path / "workspace"
    if how == "a file":
        write(workspace, "")
    args = ["--agent", CAT, "--workspace", str(workspace), "--listen", "127.0.0.1:0"]
    message = refusal(run_cli("serve", *args, env=secret_env()))
    assert message.startswith(f"acp-relay: --workspace {workspace} ")
    assert ("does not exist" if how == "missing" else "is not a directory") in message


def readme_settings() -> dict[str, str]:
    """The ACP_RELAY_* settings of the README's worked example."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"```sh\n(ACP_RELAY_AGENT=.*?)```", text, re.S)
    assert block, "no ACP_RELAY_AGENT example in README.md"
    pairs = (shlex.split(line)[0].partition("=") for line in block[1].splitlines() if line)
    return {name: value for name, _, value in pairs}


def test_the_readme_example_without_its_agent_fails_at_start_up() -> None:
    """The README's settings, copied on a machine without `my-agent`, exit 2 naming it."""
    settings = readme_settings()
    assert settings["ACP_RELAY_AGENT"] == "my-agent --acp"
    env = secret_env(**settings)
    env["ACP_RELAY_LISTEN"] = "127.0.0.1:0"
    message = refusal(run_cli("serve", env=env))
    assert "'my-agent' not found on PATH" in message


async def test_secret_from_env_is_used() -> None:
    """A relay given ACP_RELAY_SECRET accepts tickets signed with it and no others."""
    async with serve("--agent", CAT, env=secret_env()) as relay:
        async with connect(relay.ticket_url()) as ws:
            await round_trip(ws)
        status, body, _ = await refused(relay.ticket_url(make_ticket(OTHER_SECRET)))
    assert status == 401
    assert "signature is invalid" in body


@pytest.mark.slow
async def test_secret_file_rotation(tmp_path: Path) -> None:
    """Both secrets of a two-line --secret-file verify; `acp-relay ticket` signs with the first."""
    new, old = "new-secret-0123456789abcdef", "old-secret-0123456789abcdef"
    secrets = write(tmp_path / "secrets", f"# rotated today\n{new}\n\n{old}\n")
    async with serve("--agent", CAT, "--secret-file", secrets, env=clean_env()) as relay:
        for secret in (new, old):
            async with connect(relay.ticket_url(make_ticket(secret))) as ws:
                await round_trip(ws)
        minted = await mint_with_cli("--secret-file", secrets, env=clean_env())
        async with connect(relay.ticket_url(minted)) as ws:
            await round_trip(ws)
        status, _, _ = await refused(relay.ticket_url(make_ticket(SECRET)))
    assert status == 401
    verify(minted, [new], now=time.time(), max_age=60)
    with pytest.raises(TicketError):
        verify(minted, [old], now=time.time(), max_age=60)


async def test_start_up_warns_once_about_typos_short_secrets_and_open_secret_files(
    tmp_path: Path,
) -> None:
    """An unknown ACP_RELAY_* variable, a short secret and a secret file others can read are
    each one warning at start-up, naming the fix; the relay starts all the same."""
    short = "short-secret-0123456789"  # 23 bytes
    secrets = write(tmp_path / "secrets", f"{SECRET}\n{short}\n")
    os.chmod(secrets, 0o644)
    env = clean_env(ACP_RELAY_MAX_CONECTIONS="3", ACP_RELAY_TICKET="for connect, not serve")
    async with serve("--agent", CAT, "--secret-file", secrets, env=env) as relay:
        async with connect(relay.ticket_url(make_ticket(short))) as ws:
            await round_trip(ws)
        assert await relay.stop() == 0
    warnings = [r for r in parse_json_lines(relay.stderr) if r["level"] == "warning"]
    assert [(r["event"], r.get("name"), r.get("did_you_mean")) for r in warnings] == [
        ("unknown environment variable ignored", "ACP_RELAY_MAX_CONECTIONS",
         "ACP_RELAY_MAX_CONNECTIONS"),
        ("short ticket secret", None, None),
        ("secret file readable by group or others", None, None),
    ]  # fmt: skip
    assert (warnings[1]["secret"], warnings[1]["bytes"]) == (2, 23)
    assert warnings[2]["fix"] == f"chmod 600 {secrets}"
    assert short not in "\n".join(relay.stderr)


def test_a_secret_under_16_bytes_exits_2_with_the_fix() -> None:
    """A ticket secret under 16 bytes stops start-up, saying how to make a good one."""
    env = clean_env(ACP_RELAY_SECRET="hunter2-hunter")
    message = refusal(run_cli("serve", "--agent", CAT, "--listen", "127.0.0.1:0", env=env))
    assert message.startswith("acp-relay: ACP_RELAY_SECRET: secret 1 is 14 bytes, under the 16")
    assert "secrets.token_urlsafe(32)" in message
    assert "hunter2" not in message


# -- acp-relay ticket ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("url", "prefix"),
    [
        (None, ""),
        ("ws://h/acp", "ws://h/acp?ticket="),
        ("ws://h/acp?x=1", "ws://h/acp?x=1&ticket="),
    ],
)
def test_ticket_command_prints_a_ticket_or_url(url: str | None, prefix: str) -> None:
    """`acp-relay ticket` prints one fresh ticket, or --url with ?ticket= (or &ticket=) added."""
    args = ["ticket", "--ttl", "30", *(("--url", url) if url else ())]
    env = secret_env(USER="carol")
    first, second = run_cli(*args, env=env), run_cli(*args, env=env)
    for result in (first, second):
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout.startswith(prefix)
        assert result.stdout.count("\n") == 1
    tickets = [r.stdout[len(prefix) :].strip() for r in (first, second)]
    assert tickets[0] != tickets[1]
    now = time.time()
    claims = verify(tickets[0], [SECRET], now=now, max_age=60)
    assert (claims.sub, claims.aud) == ("carol", None)
    assert claims.exp is not None
    assert now + 25 < claims.exp <= now + 31


def test_ticket_command_mints_a_watchers_ticket() -> None:
    """`acp-relay ticket --watch ID --may-answer` mints a watcher's ticket for that connection,
    with the right to answer; --may-answer alone exits 2 saying what it goes with."""
    result = run_cli("ticket", "--watch", WATCHED.upper(), "--may-answer", env=secret_env())
    assert (result.returncode, result.stderr) == (0, "")
    claims = verify(result.stdout.strip(), [SECRET], now=time.time(), max_age=60)
    assert (claims.watch, claims.may_answer) == (WATCHED, True)  # as the relay spells it
    alone = run_cli("ticket", "--may-answer", env=secret_env())
    assert alone.returncode == 2
    assert alone.stderr == "acp-relay: --may-answer goes with --watch CONNECTION_ID\n"


@pytest.mark.parametrize("given", [WATCHED[:8], WATCHED[:-1], "c-17", WATCHED + "0", ""])
def test_ticket_watch_refuses_what_cannot_be_a_connection_id(given: str) -> None:
    """`ticket --watch` with a shortened id (the 8 characters older terminal logs showed),
    or anything else that is no whole connection id, exits 2 before minting, saying what one
    looks like and where the relay shows it."""
    result = run_cli("ticket", "--watch", given, env=secret_env())
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.endswith(
        f"acp-relay ticket: error: argument --watch: {given!r} is not a connection id: one is "
        "36 characters such as 6f1c2a7e-0f3b-4f52-9d0e-8f2b3c4d5e6f, the Acp-Connection-Id of "
        "the connection's 101; the relay's log shows it whole as connection_id on the "
        "connection's lines, and the dev console under share\n"
    )


@pytest.mark.parametrize(
    ("args", "shown", "hints"),
    [
        (["--port", "9000"], "--port (and 1 value, not shown)",
         "--port: use --listen HOST:PORT (e.g. --listen 127.0.0.1:9000)"),
        (["--port=9000"], "--port (and 1 value, not shown)",
         "--port: use --listen HOST:PORT (e.g. --listen 127.0.0.1:9000)"),
        (["--host", "0.0.0.0"], "--host (and 1 value, not shown)",
         "--host: use --listen HOST:PORT (e.g. --listen 0.0.0.0:8765)"),
        (["--agnet", "cat"], "--agnet (and 1 value, not shown)", "--agnet: did you mean --agent?"),
        (["--workdir", "/srv"], "--workdir (and 1 value, not shown)",
         "--workdir: did you mean --workspace?"),
        (["--zzz"], "--zzz", None),
    ],
)  # fmt: skip
def test_serve_with_a_flag_it_does_not_take_says_what_to_use(
    args: list[str], shown: str, hints: str | None
) -> None:
    """An unknown serve flag exits 2 with serve's words, not the top-level usage: the flag to
    use instead (--port and --host: --listen HOST:PORT) or the nearest one, and where serve's
    options are listed."""
    result = run_cli("serve", *args, env=secret_env())
    said = f"unrecognized arguments: {shown}" + (f"; {hints}" if hints else "")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"acp-relay serve: error: {said}\n`acp-relay serve --help` lists its options\n"
    )


@pytest.mark.parametrize("command", ["serve", "ticket", "connect", "watch"])
@pytest.mark.parametrize("typed", [["--secret", "hunter2-typed"], ["--secret=hunter2-typed"]])
def test_a_mistyped_flag_never_prints_its_value(command: str, typed: list[str]) -> None:
    """No command takes an abbreviated flag (--secret is not --secret-file), and the error
    for a flag it does not take names the flag but never prints the value given to it."""
    url = [] if command in ("serve", "ticket") else ["ws://127.0.0.1:9/acp"]
    result = run_cli(command, *url, *typed, env=secret_env())
    assert result.returncode == 2
    assert "unrecognized arguments: --secret (and 1 value, not shown)" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_ticket_command_without_secret_exits_2() -> None:
    """`acp-relay ticket` without a secret exits 2 and says how to give one."""
    result = run_cli("ticket", env=clean_env())
    assert result.returncode == 2
    assert result.stdout == ""
    assert "--secret-file" in result.stderr
    assert "ACP_RELAY_SECRET" in result.stderr


@pytest.mark.parametrize("ttl", ["0", "-5", "nan", "inf", "soon"])
def test_ticket_command_refuses_a_bad_ttl(ttl: str) -> None:
    """`acp-relay ticket --ttl` must be a positive number of seconds: else exit 2, no traceback."""
    result = run_cli("ticket", f"--ttl={ttl}", env=secret_env())
    assert result.returncode == 2
    assert result.stdout == ""
    assert "argument --ttl: expected seconds greater than 0" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
async def test_ticket_audience_must_match_the_relay() -> None:
    """A ticket minted with --audience A is refused by a relay for B and accepted by one for A."""
    ticket = await mint_with_cli("--audience", "box-a", "--subject", "erin", env=secret_env())
    async with serve("--agent", CAT, "--audience", "box-b", env=secret_env()) as relay_b:
        status, body, _ = await refused(relay_b.ticket_url(ticket))
    async with serve("--agent", CAT, "--audience", "box-a", env=secret_env()) as relay_a:
        async with connect(relay_a.ticket_url(ticket)) as ws:
            await round_trip(ws)
        opened = await relay_a.wait_event("connection opened")
    assert status == 401
    assert "another audience" in body
    assert opened[0]["subject"] == "erin"


def minted(result: subprocess.CompletedProcess[str], secret: str = SECRET) -> Claims:
    """The claims of the ticket `acp-relay ticket` printed, verified with ``secret``."""
    assert (result.returncode, result.stdout.count("\n")) == (0, 1), result.stderr
    return verify(result.stdout.strip(), [secret], now=time.time(), max_age=3600)


@pytest.mark.parametrize("how", ["config", "env"])
def test_ticket_command_reads_the_relays_settings(tmp_path: Path, how: str) -> None:
    """`acp-relay ticket` takes the relay's secret-file, audience and ticket-ttl from its
    --config file or its ACP_RELAY_* variables, as serve would."""
    secrets = write(tmp_path / "secret", f"{OTHER_SECRET}\n")
    os.chmod(secrets, 0o600)
    settings = {"secret-file": secrets, "audience": "box-17", "ticket-ttl": 120}
    if how == "config":
        toml = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
        args, env = ["--config", write(tmp_path / "relay.toml", toml)], clean_env()
    else:
        names = {k: "ACP_RELAY_" + k.upper().replace("-", "_") for k in settings}
        args, env = [], clean_env(**{names[k]: str(v) for k, v in settings.items()})
    result = run_cli("ticket", *args, env=env)
    claims = minted(result, OTHER_SECRET)
    assert result.stderr == ""
    assert claims.aud == "box-17"
    assert claims.exp is not None
    assert time.time() + 110 < claims.exp <= time.time() + 121
    given = minted(
        run_cli("ticket", "--audience", "box-9", "--ttl", "30", *args, env=env), OTHER_SECRET
    )
    assert given.aud == "box-9"


@pytest.mark.slow
async def test_a_ticket_minted_from_the_relays_config_file_opens_it(tmp_path: Path) -> None:
    """A relay run from a config file with an audience accepts what `ticket --config` mints."""
    secrets = write(tmp_path / "secret", f"{SECRET}\n")
    os.chmod(secrets, 0o600)
    toml = f'secret-file = "{secrets}"\naudience = "box-17"\nagent = "{CAT}"\n'
    config = write(tmp_path / "relay.toml", toml)
    async with serve("--config", config, env=clean_env()) as relay:
        ticket = await mint_with_cli("--config", config, env=clean_env())
        async with connect(relay.ticket_url(ticket)) as ws:
            await round_trip(ws)
        status, body, _ = await refused(relay.ticket_url(make_ticket()))  # no audience
    assert (status, "ticket has no audience" in body) == (401, True)


def test_ticket_ttl_beyond_the_relays_gets_a_warning() -> None:
    """A --ttl longer than the relay's --ticket-ttl is minted with a warning on stderr that
    the relay refuses the ticket sooner; the help says so too."""
    result = run_cli("ticket", "--ttl", "3600", env=secret_env(ACP_RELAY_TICKET_TTL="90"))
    claims = minted(result)
    assert claims.exp is not None
    assert claims.exp > time.time() + 3500
    assert result.stderr == (
        "acp-relay: warning: --ttl 3600 is longer than the relay's --ticket-ttl of 90 s (read "
        "from --config, ACP_RELAY_TICKET_TTL or its default): the relay refuses this ticket "
        "90 s after it is minted; raise the relay's --ticket-ttl, or give this command the "
        "relay's settings\n"
    )
    default = run_cli("ticket", "--ttl", "61", env=secret_env())
    assert "of 60 s" in default.stderr
    help_text = " ".join(run_cli("ticket", "--help", env=clean_env(COLUMNS="200")).stdout.split())
    assert "the relay refuses a ticket older than its own --ticket-ttl" in help_text
    assert "(default: the relay's --ticket-ttl)" in help_text


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layer", "limit"), [("file", 1), ("env", 2), ("flag", 3)], ids=["file", "env", "flag"]
)
async def test_config_precedence_flag_over_env_over_file(
    tmp_path: Path, layer: str, limit: int
) -> None:
    """--config sets listen and max-connections; env overrides the file, a flag overrides env."""
    config = write(
        tmp_path / "relay.toml",
        f'listen = "127.0.0.1:0"\nmax-connections = 1\nagent = "{CAT}"\nkill-grace = 0.2\n',
    )
    env = secret_env()
    args = ["--config", config]
    if layer in ("env", "flag"):
        env["ACP_RELAY_MAX_CONNECTIONS"] = "2"
    if layer == "flag":
        args += ["--max-connections", "3"]
    async with serve(*args, env=env, listen=False) as relay:
        sockets: list[ClientConnection] = []
        try:
            for _ in range(limit):
                sockets.append(await connect(relay.ticket_url()))
                await round_trip(sockets[-1])
            status, body, _ = await refused(relay.ticket_url())
        finally:
            for ws in sockets:
                await ws.close()
    assert status == 503
    assert f"limit of {limit} connection{'s' if limit > 1 else ''};" in body


@pytest.mark.parametrize(
    ("args", "env", "toml", "named"),
    [
        (["--max-connections", "0"], {}, None, "flag --max-connections"),
        ([], {"ACP_RELAY_MAX_CONNECTIONS": "lots"}, None, "env ACP_RELAY_MAX_CONNECTIONS"),
        (["--listen", "nowhere"], {}, None, "flag --listen"),
        ([], {}, "max-conections = 2\n", "unknown key 'max-conections'"),
        ([], {}, "kill-grace = -1\n", "config file key kill-grace"),
        ([], {}, 'secret = "hunter2-hunter2"\n', "ACP_RELAY_SECRET"),
        ([], {}, '[serve]\nlisten = "127.0.0.1:9000"\n', "'serve' is a table ([serve] or "
         "serve.NAME = ...), but the file has none: each option is a key at the top level"),
    ],
    ids=["flag", "env", "listen", "unknown-key", "bad-value-in-file", "secret-in-file",
         "section"],
)  # fmt: skip
def test_config_error_exits_2_naming_the_setting(
    tmp_path: Path, args: list[str], env: dict[str, str], toml: str | None, named: str
) -> None:
    """A bad setting exits 2 before listening, with one line naming the flag, variable or key."""
    if toml is not None:
        args = [*args, "--config", write(tmp_path / "relay.toml", toml)]
    result = run_cli("serve", "--agent", CAT, *args, env=secret_env(**env))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("acp-relay: ")
    assert result.stderr.count("\n") == 1, result.stderr
    assert named in result.stderr
    assert "hunter2" not in result.stderr


@pytest.mark.parametrize(
    ("args", "mcp_json", "message"),
    [
        ([], '[{"type": "http", "name": "s", "url": "https://x", "headers": '
             '[{"name": "Authorization", "value": "Bearer ${MCP_TOKEN_UNSET}"}]}]',
         "acp-relay: --mcp-servers {file}[0].headers[0].value: ${MCP_TOKEN_UNSET} is not set "
         "in the relay's environment; set MCP_TOKEN_UNSET before starting the relay\n"),
        ([], '[{"name": "files"}]',
         "acp-relay: --mcp-servers {file}[0]: stdio server: missing command\n"),
        (["--cwd-map", "Users/alice=/workspace"], None,
         "acp-relay: flag --cwd-map: bad --cwd-map 'Users/alice=/workspace': 'Users/alice' "
         "is not an absolute path\n"),
        (["--cwd-fallback", "guess"], None,
         "acp-relay: flag --cwd-fallback: expected one of workspace, keep, reject, got 'guess'\n"),
    ],
    ids=["missing-var", "bad-mcp-server", "bad-cwd-map", "bad-fallback"],
)  # fmt: skip
def test_rewrite_settings_are_checked_at_start_up(
    tmp_path: Path, args: list[str], mcp_json: str | None, message: str
) -> None:
    """A missing ${VAR}, a bad MCP server or a bad mapping stops start-up, saying which."""
    file = write(tmp_path / "mcp.json", mcp_json or "[]")
    result = run_cli("serve", "--agent", CAT, "--mcp-servers", file, *args, env=secret_env())
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == message.replace("{file}", file)


# -- logs -------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_logs_are_json_lines_without_tickets_or_secrets(tmp_path: Path) -> None:
    """Stderr is JSON lines with one opened/closed pair per session and no ticket or secret."""
    secrets = write(tmp_path / "secrets", f"{SECRET}\n{OTHER_SECRET}\n")
    query_ticket = make_ticket(subject="alice")
    bearer_ticket = make_ticket(OTHER_SECRET, subject="bob")
    origin_ticket = make_ticket(subject="mallory")
    args = ("--agent", CAT, "--secret-file", secrets, "--log-level", "debug")
    async with serve(*args, env=clean_env()) as relay:
        async with connect(relay.ticket_url(query_ticket)) as ws:
            await round_trip(ws, '{"jsonrpc":"2.0","id":1,"method":"a"}')
        headers = {"Authorization": f"Bearer {bearer_ticket}"}
        async with connect(relay.url, additional_headers=headers) as ws:
            await round_trip(ws, '{"jsonrpc":"2.0","id":2,"method":"bb"}')
            await round_trip(ws, '{"jsonrpc":"2.0","id":3,"method":"ccc"}')
        replay = await refused(relay.ticket_url(query_ticket))
        origin = await refused(relay.ticket_url(origin_ticket), origin="https://evil.example")
        await relay.wait_event("connection closed", 2)
        assert await relay.stop() == 0
    assert (replay[0], origin[0]) == (401, 403)
    assert relay.stdout == []

    stderr = "\n".join(relay.stderr)
    for needle in (SECRET, OTHER_SECRET, query_ticket, bearer_ticket, origin_ticket):
        assert needle not in stderr
        assert needle.rsplit(".", 1)[-1] not in stderr  # not even a ticket's signature
    records = parse_json_lines(relay.stderr)
    assert len(records) == len(relay.stderr)
    for record in records:
        assert {"event", "level", "timestamp"} <= record.keys(), record

    opened = relay.events("connection opened")
    closed = relay.events("connection closed")
    assert [r["subject"] for r in opened] == ["alice", "bob"]
    assert [r["connection_id"] for r in closed] == [r["connection_id"] for r in opened]
    assert len({r["connection_id"] for r in opened}) == 2
    assert [r["agent_pid"] for r in closed] == [r["agent_pid"] for r in opened]
    for record, messages in zip(closed, (1, 2), strict=True):
        assert record["exit_status"] is not None
        assert (record["messages_in"], record["messages_out"]) == (messages, messages)
        assert record["bytes_in"] > 0
        assert record["bytes_out"] == record["bytes_in"]
        assert 0 <= record["duration"] < 10
    refusals = relay.events("connection refused")
    assert [r["status"] for r in refusals] == [401, 403]


async def test_start_up_logs_each_given_setting_and_its_source(tmp_path: Path) -> None:
    """One "settings" line lists the settings given by flag, environment and file, each with
    where it came from; defaults are left out, and no secret's value appears."""
    config = write(tmp_path / "relay.toml", "kill-grace = 0.5\n")
    secrets = write(tmp_path / "secrets", f"{OTHER_SECRET}\n")
    env = clean_env(ACP_RELAY_SECRET_FILE=secrets, ACP_RELAY_AGENT_ENV="API_KEY=sk-live-1")
    async with serve("--agent", CAT, "--config", config, env=env) as relay:
        [line] = await relay.wait_event("settings")
    assert line["level"] == "info"
    assert line["given"] == {
        "config": {"value": config, "from": "flag --config"},
        "listen": {"value": "127.0.0.1:0", "from": "flag --listen"},
        "secret-file": {"value": secrets, "from": "env ACP_RELAY_SECRET_FILE"},
        "agent": {"value": CAT, "from": "flag --agent"},
        "agent-env": {"value": ["API_KEY"], "from": "env ACP_RELAY_AGENT_ENV"},
        "kill-grace": {"value": 0.5, "from": f"config file key kill-grace in {config}"},
    }
    stderr = "\n".join(relay.stderr)
    assert OTHER_SECRET not in stderr
    assert "sk-live-1" not in stderr


CRASHING = python_agent(
    "import sys\n"
    "sys.stdin.readline()\n"
    "print('Traceback (most recent call last):', file=sys.stderr)\n"
    "print('KeyError: ANTHROPIC_API_KEY', file=sys.stderr)\n"
    "sys.exit(1)\n"
)


async def test_an_agent_crash_shows_at_log_level_warning() -> None:
    """Under --log-level warning an agent exiting non-zero has its last stderr lines logged."""
    args = ("--agent", shlex.join(CRASHING), "--log-level", "warning")
    async with serve(*args, env=secret_env(), port=free_port()) as relay:
        async with connect(relay.ticket_url()) as ws:
            await ws.send('{"jsonrpc":"2.0","method":"go"}')
            assert (await closed_with(ws))[0] == 1011
        [failed] = await relay.wait_event("agent failed")
    assert failed["level"] == "warning"
    assert failed["stderr_tail"] == [
        "Traceback (most recent call last):",
        "KeyError: ANTHROPIC_API_KEY",
    ]
    assert relay.events("agent stderr") == []  # info: below the level


# -- help and version ---------------------------------------------------------------------------


def test_serve_help_lists_every_option_with_its_env_name() -> None:
    """`acp-relay serve --help` lists --config and every option, each with its ACP_RELAY_* name."""
    result = run_cli("serve", "--help", env=clean_env(COLUMNS="100"))
    assert (result.returncode, result.stderr) == (0, "")
    entries: dict[str, str] = {}
    flag = None
    for line in result.stdout.splitlines():
        if line.startswith("  -"):
            flag = line.split()[0].rstrip(",")
            entries[flag] = ""
        if flag is not None:
            entries[flag] += " " + line.strip()
    expected = {"--config": "ACP_RELAY_CONFIG", **{o.flag: o.env for o in OPTIONS}}
    assert len(expected) >= 19
    for name, env_name in expected.items():
        assert name in entries, f"{name} missing from --help"
        assert f"env {env_name}" in entries[name], entries[name]
    assert "ACP_RELAY_SECRET" in entries["--secret-file"]


@pytest.mark.parametrize(
    ("command", "options"),
    [("connect", connect_command.OPTIONS), ("ticket", ticket_command.OPTIONS),
     ("watch", watch_command.OPTIONS), ("chat", chat_command.ALL_OPTIONS)],
)  # fmt: skip
def test_docs_tables_are_the_commands_option_tables(command: str, options: Any) -> None:
    """docs/configuration.md holds exactly the connect, ticket, watch and chat tables made
    from their options."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    found = re.search(
        rf"<!-- options table: {command};[^\n]*-->\n(.*?)<!-- end of options table -->", text, re.S
    )
    assert found, f"no options table for {command} in docs/configuration.md"
    assert found[1] == options_table(options)


def test_watch_help_lists_every_option_and_the_exit_statuses() -> None:
    """`acp-relay watch --help` lists every option, says it is read-only and where its ticket
    comes from, and documents each exit status."""
    result = run_cli("watch", "--help", env=clean_env(COLUMNS="100"))
    assert (result.returncode, result.stderr) == (0, "")
    text = " ".join(result.stdout.split())
    for option in watch_command.OPTIONS:
        assert option.flag in text
    assert "Read-only: it never answers." in text
    assert "acp-relay ticket --watch CONNECTION_ID" in text
    assert "$ACP_RELAY_TICKET" in text
    listed = result.stdout.partition("exit status:\n")[2].splitlines()
    statuses = {line.split()[0]: line for line in listed if not line.startswith("    ")}
    assert list(statuses) == ["0", "1", "2", "3", "4"]
    assert "(1000)" in statuses["0"]
    assert "(4429)" in statuses["3"]
    assert "(1001)" in statuses["4"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--ping-interval", "0"], "argument --ping-interval: expected seconds greater than 0"),
        (["--open-timeout", "soon"], "argument --open-timeout: expected seconds greater than 0"),
        (["--max-message-bytes", "16MB"], "argument --max-message-bytes: expected bytes"),
        (["--ticket-in", "cookie"], "argument --ticket-in: expected one of header, query"),
        (["--log-level", "loud"], "argument --log-level: expected one of debug, info"),
    ],
)
def test_connect_refuses_bad_values_like_serve(args: list[str], says: str) -> None:
    """connect's flags use serve's converters: a bad value exits 2 saying what is expected."""
    result = run_cli("connect", "ws://127.0.0.1:9/acp", *args, env=clean_env())
    assert (result.returncode, result.stdout) == (2, "")
    assert says in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_version() -> None:
    """`python -m relay --version` and the acp-relay script print the version."""
    module = run_cli("--version", env=clean_env())
    script = subprocess.run(
        [str(VENV_BIN / "acp-relay"), "--version"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    for result in (module, script):
        assert (result.returncode, result.stdout) == (0, f"acp-relay {__version__}\n")


# -- the agent's environment -------------------------------------------------------------------


async def test_agent_environment_drops_acp_relay_variables_and_adds_agent_env() -> None:
    """The agent inherits the environment minus every ACP_RELAY_* variable, plus --agent-env."""
    env = secret_env(
        ACP_RELAY_AGENT=shlex.join(ENV_REPORTER),
        ACP_RELAY_KILL_GRACE="0.2",
        ACP_RELAY_NOT_AN_OPTION="typo",
        RELAY_TEST_INHERITED="kept",
        RELAY_TEST_OVERRIDDEN="old",
    )
    args = ("--agent-env", "RELAY_TEST_OVERRIDDEN=new", "--agent-env", "RELAY_TEST_EXTRA=a b=c")
    async with serve(*args, env=env) as relay, connect(relay.ticket_url()) as ws:
        async with asyncio.timeout(10):
            report = json.loads(await ws.recv())
    assert isinstance(report, dict)
    assert [k for k in report if k.upper().startswith("ACP_RELAY")] == []
    assert [k for k, v in report.items() if SECRET in v] == []
    assert report["RELAY_TEST_INHERITED"] == "kept"
    assert report["RELAY_TEST_OVERRIDDEN"] == "new"
    assert report["RELAY_TEST_EXTRA"] == "a b=c"
    assert report["PATH"] == env["PATH"]


def test_clean_env_leaves_out_the_shells_pythonpath_and_relay_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Subprocesses of the tests get no PYTHONPATH (it may hold another relay) or ACP_RELAY_*."""
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setenv("ACP_RELAY_AGENT", "not-this-one")
    env = clean_env(RELAY_TEST_EXTRA="kept")
    assert "PYTHONPATH" not in env
    assert [k for k in env if k.upper().startswith("ACP_RELAY_")] == []
    assert env["RELAY_TEST_EXTRA"] == "kept"
    assert env["PATH"].startswith(f"{VENV_BIN}{os.pathsep}")
    assert "PYTHONPATH" not in secret_env()
    assert secret_env()["ACP_RELAY_SECRET"] == SECRET


# -- what each command loads, warm agents ------------------------------------------------------

LOADS = (
    "import sys\nfrom relay.commands import build_parser\n"
    "build_parser(sys.argv[1])\n__import__(f'relay.commands.{sys.argv[1]}')\n"
    "print(' '.join(sorted(sys.modules)))\n"
)


def modules_loaded_by(command: str) -> set[str]:
    """The modules loaded once ``acp-relay COMMAND``'s parser and module are."""
    done = subprocess.run(
        [sys.executable, "-c", LOADS, command],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return set(done.stdout.split())


def test_serve_loads_none_of_the_server_before_it_listens() -> None:
    """serve binds its port (relay.server.http.listener) before anything heavy is loaded: no
    asyncio, websockets, structlog, server, connect code, ACP SDK nor console until then."""
    heavy = {"asyncio", "websockets", "structlog", "uvloop", "ssl", "relay.server.serving",
             "relay.server.connections.connection", "relay.client.editor.bridge",
             "relay.server.http.devconsole", "acp", "prometheus_client"}  # fmt: skip
    loaded = modules_loaded_by("serve")
    assert "relay.server.http.listener" in loaded
    assert heavy & loaded == set()


def test_watch_loads_only_its_own_command() -> None:
    """watch loads its socket, stdout and rendering, none of connect's bridge nor serve's."""
    loaded = modules_loaded_by("watch")
    assert {"relay.client.watch", "relay.acp.transcript"} <= loaded
    assert {
        "relay.commands.connect",
        "relay.client.editor.bridge",
        "relay.commands.serve",
    } & loaded == set()


def test_top_level_help_lists_every_command() -> None:
    """`acp-relay --help` (no command named) loads every command to list them all."""
    result = run_cli("--help", env=clean_env())
    assert result.returncode == 0
    for command, says in [("serve", "accept WebSockets"), ("ticket", "mint a single-use"),
                          ("connect", "be the agent for an editor"),
                          ("watch", "watch a connection live")]:  # fmt: skip
        assert re.search(rf"^ +{command} +{says}", result.stdout, re.M), result.stdout


def test_no_command_lists_the_commands_with_a_hint_each() -> None:
    """`acp-relay` alone exits 2 listing each command with its one-line hint, and how to
    start (not just "required: COMMAND")."""
    result = run_cli(env=clean_env())
    assert (result.returncode, result.stdout) == (2, "")
    for command, says in [("serve", "accept WebSockets"), ("ticket", "mint a single-use"),
                          ("connect", "be the agent for an editor"),
                          ("watch", "watch a connection live")]:  # fmt: skip
        assert re.search(rf"^ +{command} +{says}", result.stderr, re.M), result.stderr
    assert "acp-relay serve --dev" in result.stderr
    assert "acp-relay COMMAND --help" in result.stderr
    assert "Traceback" not in result.stderr


async def test_warm_agents_wait_without_making_the_relay_busy_and_stop_with_it() -> None:
    """--warm-agents 2: two agents wait, /busy says warm 2 and busy false; SIGTERM stops
    them (the relay exits 0 with no child left)."""
    async with serve("--agent", CAT, "--warm-agents", "2", env=secret_env()) as relay:
        report = await until_async(
            lambda: _warm_report(relay.port, 2), what="two warm agents in /busy"
        )
        agents = relay.agents()
        status = await relay.stop()
    assert (report["busy"], report["connections"], len(agents)) == (False, 0, 2)
    assert status == 0
    assert await until_gone(agents, seconds=5)


async def _warm_report(port: int, count: int) -> dict[str, Any] | None:
    report = await busy(port)
    return report if report["warm"] == count else None
