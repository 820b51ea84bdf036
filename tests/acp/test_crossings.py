"""relay.acp.crossings: the table of every place a path crosses, against the ACP schema."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from relay.acp.crossings import (
    CROSSINGS,
    Crossing,
    Message,
    crossings_table,
    value_bound,
)
from relay.acp.fieldpaths import parse_field, walk
from tests.support.acpmessages import AGENT_MESSAGES, EDITOR_MESSAGES, line

DOCS = Path(__file__).resolve().parents[2] / "docs" / "paths-and-mcp.md"


def body(message: dict[str, Any]) -> Any:
    return message.get("params", message.get("result"))


def samples_of(row: Crossing) -> list[tuple[dict[str, Any], type[BaseModel]]]:
    """The sample messages holding ``row``'s field."""
    pool = EDITOR_MESSAGES if row.direction == "editor → agent" else AGENT_MESSAGES
    found = []
    for message, model in pool.values():
        kind: Message = (
            "response" if "result" in message else "request" if "id" in message else "notification"
        )
        method = message.get("method", "session/list")
        holds = not row.field or list(walk(message, parse_field(row.field)))
        if row.carries(kind) and row.matches(method) and holds:
            found.append((message, model))
    return found


@pytest.mark.parametrize("row", CROSSINGS, ids=lambda row: f"{row.methods[0]} {row.field}")
def test_each_row_is_a_field_of_the_acp_schema(row: Crossing) -> None:
    """Each row's field exists where the ACP schema puts it, and its markers are in the line."""
    samples = samples_of(row)
    assert samples, f"no sample message for {row}"
    for message, model in samples:
        parsed = model.model_validate(body(message))
        dumped = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
        top = "params" if "params" in message else "result"
        if row.field:
            ours = [c[k] for c, k, _ in walk(message, parse_field(row.field))]
            theirs = [c[k] for c, k, _ in walk({top: dumped}, parse_field(row.field))]
            assert ours == theirs
        assert any(marker in line(message) for marker in row.markers)


def test_the_docs_table_is_the_codes() -> None:
    """docs/paths-and-mcp.md holds exactly the table generated from CROSSINGS."""
    text = DOCS.read_text()
    found = re.search(r"<!-- crossings table:[^\n]*-->\n(.*?)<!-- end of crossings table -->",
                      text, re.S)  # fmt: skip
    assert found, "no crossings table in docs/paths-and-mcp.md"
    assert found.group(1) == crossings_table(), "run: .venv/bin/python -m tests.support.config_docs"


@pytest.mark.parametrize("row", CROSSINGS, ids=lambda row: f"{row.methods[0]} {row.field}")
def test_a_row_is_looked_for_in_every_line_that_holds_it(row: Crossing) -> None:
    """``may_be_in`` never skips a row whose field is in the line; it skips lines without
    the field's last name."""
    for message, _model in samples_of(row):
        assert row.may_be_in(line(message))
    steps = parse_field(row.field)
    if steps:
        assert not row.may_be_in(b'{"jsonrpc":"2.0","method":"x","params":{}}')


@pytest.mark.parametrize(
    "text",
    ["{}", "[]", "1", '"a,b{c["', '{"a":[1,2,{"b":null}],"c":"d"}', "[[[]],[],{}]", "  [1 , 2]"],
)
def test_value_bound_is_never_below_the_values(text: str) -> None:
    """value_bound counts at least as many values as the JSON text holds."""

    def values(v: Any) -> int:
        if isinstance(v, dict):
            return 1 + sum(values(x) for x in v.values())
        if isinstance(v, list):
            return 1 + sum(values(x) for x in v)
        return 1

    assert value_bound(text.encode()) >= values(json.loads(text))
