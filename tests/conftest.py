"""Pytest's hooks and shared fixtures; the helpers tests import are in tests/support/.

Markers: ``soak`` (long reliability tests, skipped unless ``--soak`` or ACP_RELAY_SOAK=1)
and ``slow`` (packaging, browsers, static checks, anything over a few seconds:
``pytest -m "not slow"`` leaves them out for quick local iteration; CI runs everything).
Every async test runs on uvloop. Each test's subprocesses keep their temporary files in a
folder of the test's own (``TMPDIR``), under pytest's; the session fails if the suite left a
``serve --dev`` folder (a throwaway secret) in the system's temporary directory. The Debian
packages a run installed as root (tests/system/install-packages) are listed in its summary.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvloop

from relay.commands.devfolder import PREFIX, stale_folders
from relay.observe import logs
from tests.system import INSTALLED, use_terminal

pytest_plugins = [
    "tests.support.audit",  # the log audit's fixtures: audit, audit_figures
    "tests.support.synapse",  # homeserver: a Synapse for the chat's tests, started at first use
]

SOAK_ENV = "ACP_RELAY_SOAK"
SYSTEM_TEMP = tempfile.gettempdir()  # read (and cached) before any test changes TMPDIR
DEV_FOLDERS_BEFORE = pytest.StashKey[set[str]]()

logs.configure("debug", "json")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--soak`` runs the long reliability tests of tests/test_soak.py."""
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help=f"run the soak tests (tests/test_soak.py), also with {SOAK_ENV}=1",
    )


def pytest_configure(config: pytest.Config) -> None:
    use_terminal(config)  # first-use installs say so on it before they start
    config.addinivalue_line(
        "markers", f"soak: long reliability test, skipped unless --soak or {SOAK_ENV}=1"
    )
    config.addinivalue_line(
        "markers",
        'slow: packaging, browser, static-check or long test; -m "not slow" leaves it out',
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the soak tests unless asked for, saying how to run them."""
    if config.getoption("--soak") or os.environ.get(SOAK_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"soak test: run with `pytest --soak` or {SOAK_ENV}=1")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Run every async test on uvloop, the loop the relay runs on in production."""
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(autouse=True)
def own_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TMPDIR for the test's subprocesses: a folder of its own under pytest's. A ``serve
    --dev`` relay the test killed leaves its folder (and secret) there: removed after it."""
    where = tmp_path_factory.mktemp("tmpdir")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(where))
        yield where
    for leftover in where.glob(f"{PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def dev_folders() -> set[str]:
    """The names of the ``serve --dev`` folders in the system's temporary directory."""
    return {path.name for path in Path(SYSTEM_TEMP).glob(f"{PREFIX}*")}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[DEV_FOLDERS_BEFORE] = dev_folders()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if it left, in the system's temporary directory, the folder of a ``serve
    --dev`` relay that is gone (other sessions' relays still running are not ours to judge)."""
    before = session.config.stash.get(DEV_FOLDERS_BEFORE, set())
    left = [path for path in stale_folders(SYSTEM_TEMP) if path.name not in before]
    if not left:
        return
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(
            f"the tests left {len(left)} serve --dev folder(s) in {SYSTEM_TEMP} (removed): "
            f"{', '.join(map(str, left))}; start relays with TMPDIR in the test's own folder",
            red=True,
        )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which Debian packages the run installed as root (tests/system/install-packages),
    which its output capture would otherwise hide."""
    for line in INSTALLED:
        terminalreporter.write_line(line, yellow=True)
