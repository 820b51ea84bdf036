"""relay.config.serveoptions: serve's option table, one row per option, and its docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from relay.config.serveoptions import GROUPS, OPTIONS, grouped_options_table, option_named

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_docs_serve_table_is_the_option_table() -> None:
    """docs/configuration.md holds exactly the tables generated from OPTIONS, by group."""
    text = DOCS.read_text()
    found = re.search(
        r"<!-- options table: serve;[^\n]*-->\n(.*?)<!-- end of options table -->", text, re.S
    )
    assert found, f"no options table for serve in {DOCS}"
    assert found[1] == grouped_options_table()


def test_each_option_has_its_own_flag_variable_and_field() -> None:
    """No two options share a flag, an ACP_RELAY_* variable or a Settings field; no group is
    empty."""
    for attribute in ("flag", "env", "dest"):
        values = [getattr(option, attribute) for option in OPTIONS]
        assert len(values) == len(set(values)), attribute
    assert all(options for _, options in GROUPS)


@pytest.mark.parametrize("name", ["audience", "secret-file", "ticket-ttl", "max-watchers"])
def test_options_are_found_by_name(name: str) -> None:
    """connect and ticket take serve's options by their flag's name."""
    assert option_named(name).flag == f"--{name}"
