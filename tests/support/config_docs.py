"""Rewrite the generated tables of the docs from the tables in code: the option tables of
docs/configuration.md and the boundary's table of docs/paths-and-mcp.md.

Run after adding or changing an option or a crossing:
``.venv/bin/python -m tests.support.config_docs``. tests/config/test_settings.py,
tests/commands/test_commands.py and tests/acp/test_boundary.py fail while a page and the code
disagree.
"""

from __future__ import annotations

import re
from pathlib import Path

from relay.acp.crossings import crossings_table
from relay.commands import chat as chat_command
from relay.commands import connect as connect_command
from relay.commands import ticket as ticket_command
from relay.commands import watch as watch_command
from relay.config.serveoptions import grouped_options_table, options_table

DOCS = Path(__file__).resolve().parent.parent.parent / "docs" / "configuration.md"
TABLES: dict[str, str] = {
    "serve": grouped_options_table(),
    "connect": options_table(connect_command.OPTIONS),
    "ticket": options_table(ticket_command.OPTIONS),
    "watch": options_table(watch_command.OPTIONS),
    "chat": options_table(chat_command.ALL_OPTIONS),
}
PATHS_DOCS = DOCS.parent / "paths-and-mcp.md"
CROSSINGS = re.compile(
    r"(<!-- crossings table:[^\n]*-->\n)(.*?)(<!-- end of crossings table -->)", re.S
)


def marked(name: str) -> re.Pattern[str]:
    """The table of ``name`` between its markers (group 2), the opening marker in group 1."""
    return re.compile(
        rf"(<!-- options table: {name};[^\n]*-->\n)(.*?)(<!-- end of options table -->)", re.S
    )


def with_table(text: str, name: str, table: str) -> str:
    """``text`` with the table of ``name`` replaced by ``table``."""
    found = marked(name).search(text)
    assert found, f"no options table for {name} in {DOCS}"
    return text[: found.start(2)] + table + text[found.end(2) :]


def main() -> None:
    text = DOCS.read_text()
    for name, table in TABLES.items():
        text = with_table(text, name, table)
    DOCS.write_text(text)
    paths = PATHS_DOCS.read_text()
    found = CROSSINGS.search(paths)
    assert found, f"no crossings table in {PATHS_DOCS}"
    PATHS_DOCS.write_text(paths[: found.start(2)] + crossings_table() + paths[found.end(2) :])


if __name__ == "__main__":
    main()
