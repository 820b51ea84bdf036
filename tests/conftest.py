"""Pytest's hooks and shared fixtures; the helpers tests import are in tests/support/.

Markers: ``soak`` (long reliability tests, skipped unless ``--soak`` or ACP_RELAY_SOAK=1)
and ``slow`` (packaging, browsers, static checks, anything over a few seconds:
``pytest -m "not slow"`` leaves them out for quick local iteration; CI runs everything).
Every async test runs on uvloop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest
import uvloop

from relay.observe import logs

pytest_plugins = ["tests.support.audit"]  # the log audit's fixtures: audit, audit_figures

SOAK_ENV = "ACP_RELAY_SOAK"

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
