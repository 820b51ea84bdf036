"""A real Matrix homeserver for the chat's tests: Synapse on 127.0.0.1, SQLite, one per session.

Synapse comes from PyPI into a venv of its own, ``tests/.synapse`` (pinned in
``tests/support/synapse.txt``, ignored by git), created on first use like the benchmark's
peers: ``.ci/run`` needs no step of its own. The ``homeserver`` fixture (session scope,
registered by tests/conftest.py) starts it once on a free port with a fresh SQLite
database in pytest's temporary folder, with no federation listener and no trusted key
servers, and stops it at the end. It runs daemonized (its pid in its pid file), not as a
child of the test process: tests that count their process's children (an in-process
relay's agents) do not see it. Users are registered through the admin API with the
registration shared secret (no open registration); the message rate limit is Synapse's
default, lifted per user with :meth:`Homeserver.unlimited` (a test that wants real
``429 M_LIMIT_EXCEEDED`` answers registers a user without it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from tests.support.sockets import free_port
from tests.system import announce

ROOT = Path(__file__).resolve().parent.parent.parent
VENV = ROOT / "tests" / ".synapse"
PINS = Path(__file__).resolve().parent / "synapse.txt"
SERVER_NAME = "relay.test"
START_SECONDS = 60.0  # a first start creates the database
HTTP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Account:
    """A registered user: its id and an access token (a secret: never logged)."""

    user_id: str
    token: str
    localpart: str
    password: str = field(default="", repr=False)  # for a second login: a new device


@dataclass
class Homeserver:
    """A running Synapse: its URL, and registration of users."""

    url: str
    shared_secret: str
    pid: int
    folder: Path
    admin: Account | None = None
    _names: Iterator[int] = field(default_factory=lambda: count(1))

    def register(
        self,
        prefix: str,
        *,
        unlimited: bool = True,
        admin: bool = False,
        limits: tuple[float, int] | None = None,
    ) -> Account:
        """A new user ``PREFIX-N`` (N makes it unique in the session), logged in; its message
        rate limit lifted unless ``unlimited`` is False, or set to ``limits`` (messages per
        second, burst)."""
        localpart = f"{prefix}-{next(self._names)}"
        nonce = self._call("GET", "/_synapse/admin/v1/register")["nonce"]
        password = secrets.token_hex(12)
        mac = hmac.new(self.shared_secret.encode(), digestmod=hashlib.sha1)
        kind = b"admin" if admin else b"notadmin"
        mac.update(b"\0".join([nonce.encode(), localpart.encode(), password.encode(), kind]))
        body = {"nonce": nonce, "username": localpart, "password": password,
                "admin": admin, "mac": mac.hexdigest()}  # fmt: skip
        answer = self._call("POST", "/_synapse/admin/v1/register", body)
        account = Account(answer["user_id"], answer["access_token"], localpart, password)
        if (unlimited or limits is not None) and self.admin is not None:
            path = f"/_synapse/admin/v1/users/{account.user_id}/override_ratelimit"
            rate, burst = limits or (0, 0)  # 0: no limit
            body = {"messages_per_second": rate, "burst_count": burst}
            self._call("POST", path, body, token=self.admin.token)
        return account

    def new_device(self, account: Account) -> Account:
        """``account`` logged in again with its password: a new device, with its own access
        token."""
        body = {"type": "m.login.password", "password": account.password,
                "identifier": {"type": "m.id.user", "user": account.localpart}}  # fmt: skip
        answer = self._call("POST", "/_matrix/client/v3/login", body)
        return Account(account.user_id, answer["access_token"], account.localpart,
                       account.password)  # fmt: skip

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = None
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as answer:
            result: dict[str, Any] = json.loads(answer.read())
            return result

    def logout(self, token: str) -> None:
        """Log the session of ``token`` out: the homeserver no longer accepts the token."""
        self._call("POST", "/_matrix/client/v3/logout", {}, token=token)

    def log_tail(self, lines: int = 40) -> str:
        """The end of Synapse's log, for a failure's message."""
        text = (self.folder / "synapse.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop Synapse (SIGTERM, then SIGKILL) and wait until it is gone."""
        stop_process(self.pid)

    def start(self) -> None:
        """Start Synapse again on the same port and database (after :meth:`stop`)."""
        self.pid = launch(self.folder)
        wait_ready(self)


def ensure_venv() -> Path:
    """The venv's python, created from the pins when missing or stale; skips the test
    (saying how) when PyPI cannot be reached."""
    python = VENV / "bin" / "python"
    stamp = VENV / "synapse.txt"
    if stamp.exists() and stamp.read_text() == PINS.read_text() and python.exists():
        return python
    announce(f"synapse: installing Synapse for the chat's tests (pinned: {PINS}) into {VENV}")
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(VENV)],
        [str(python), "-m", "pip", "install", "-q", "-r", str(PINS)],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False, timeout=600)
        if done.returncode:
            pytest.skip(f"could not install Synapse ({' '.join(step[-2:])}): "
                        f"{done.stderr.strip()[-300:]}")  # fmt: skip
    stamp.write_text(PINS.read_text())
    return python


def signing_key() -> str:
    """A fresh ed25519 signing key in Synapse's file format (version, unpadded base64 seed)."""
    seed = base64.b64encode(os.urandom(32)).decode().rstrip("=")
    return f"ed25519 a_test {seed}\n"


def write_config(folder: Path, port: int) -> str:
    """homeserver.yaml (JSON, which YAML reads) for a loopback test server; the shared secret."""
    shared = secrets.token_hex(24)
    (folder / "signing.key").write_text(signing_key())
    lifted = {"per_second": 1000, "burst_count": 1000}
    config = {
        "server_name": SERVER_NAME,
        "pid_file": str(folder / "homeserver.pid"),
        "listeners": [{
            "port": port, "bind_addresses": ["127.0.0.1"], "type": "http", "tls": False,
            "x_forwarded": False, "resources": [{"names": ["client"], "compress": False}],
        }],
        "database": {"name": "sqlite3", "args": {"database": str(folder / "homeserver.db")}},
        "media_store_path": str(folder / "media"),
        "signing_key_path": str(folder / "signing.key"),
        "registration_shared_secret": shared,
        "macaroon_secret_key": secrets.token_hex(24),
        "form_secret": secrets.token_hex(24),
        "report_stats": False,
        "enable_metrics": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "presence": {"enabled": False},
        "rc_login": {"address": lifted, "account": lifted, "failed_attempts": lifted},
        "rc_registration": lifted,
        "rc_joins": {"local": lifted, "remote": lifted},
        "rc_invites": {"per_room": lifted, "per_user": lifted, "per_issuer": lifted},
        "rc_room_creation": lifted,
        "rc_admin_redaction": lifted,
        "log_config": str(folder / "logging.yaml"),
    }  # fmt: skip
    logging_config = {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"line": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "formatter": "line",
                              "filename": str(folder / "synapse.log")}},
        "root": {"level": "INFO", "handlers": ["file"]},
    }  # fmt: skip
    (folder / "logging.yaml").write_text(json.dumps(logging_config))
    (folder / "homeserver.yaml").write_text(json.dumps(config, indent=1))
    return shared


def launch(folder: Path) -> int:
    """Start Synapse daemonized; its pid (from its pid file)."""
    pid_file = folder / "homeserver.pid"
    pid_file.unlink(missing_ok=True)
    python = VENV / "bin" / "python"
    with (folder / "synapse.log").open("ab") as log:
        done = subprocess.run(
            [str(python), "-m", "synapse.app.homeserver", "--daemonize",
             "-c", str(folder / "homeserver.yaml")],
            cwd=folder, stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=START_SECONDS,
            check=False,
        )  # fmt: skip
    deadline = time.monotonic() + START_SECONDS
    while done.returncode == 0 and time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().strip().isdigit():
            return int(pid_file.read_text())
        time.sleep(0.05)
    text = (folder / "synapse.log").read_text(errors="replace")[-2000:]
    raise AssertionError(f"Synapse did not start (exit {done.returncode}): {text}")


def wait_ready(server: Homeserver) -> None:
    """Until /_matrix/client/versions answers (at most START_SECONDS)."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if not alive(server.pid):
            raise AssertionError(f"Synapse exited: {server.log_tail()}")
        try:
            with urllib.request.urlopen(server.url + "/_matrix/client/versions", timeout=2):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.05)
    raise AssertionError(f"Synapse not ready within {START_SECONDS} s: {server.log_tail()}")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def stop_process(pid: int) -> None:
    """SIGTERM, then SIGKILL after 10 s; returns once ``pid`` is gone."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not alive(pid):
            return


@contextmanager
def running_homeserver(folder: Path) -> Iterator[Homeserver]:
    """Synapse in ``folder`` on a free port of 127.0.0.1 for the block (the benchmark's too)."""
    port = free_port()
    shared = write_config(folder, port)
    server = Homeserver(f"http://127.0.0.1:{port}", shared, launch(folder), folder)
    try:
        wait_ready(server)
        server.admin = server.register("admin", unlimited=False, admin=True)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    """Synapse for the whole session on 127.0.0.1 (started at first use), stopped at the end."""
    ensure_venv()
    with running_homeserver(tmp_path_factory.mktemp("synapse")) as server:
        yield server
