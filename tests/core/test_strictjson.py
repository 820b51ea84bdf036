"""Tests for relay.core.strictjson: JSON read whole and unambiguously, written back as spelled."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.strictjson import MAX_DEPTH, JsonRefused, deeper_than, dumps, loads, object_or_none


@pytest.mark.parametrize(
    "text",
    [
        b'{"id":1E2,"x":-0,"y":1.50,"z":[1e-7,0.0,-12]}',
        b'{"id":' + b"9" * 5000 + b"}",
        b'{"n":null,"t":true,"f":false,"a":[],"o":{}}',
        b'"just a string"',
    ],
)
def test_compact_text_comes_back_byte_for_byte(text: bytes) -> None:
    """Numbers keep their spelling, however many digits; compact text is rewritten as it was."""
    assert dumps(loads(text)) == text


def test_strings_keep_their_characters() -> None:
    """Escapes are read as the characters they stand for, and written back as text."""
    value = loads(b'{"s":"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00 \\n \\""}')
    assert value == {"s": 'café é \U0001f600 \n "'}
    assert json.loads(dumps(value)) == value


def test_a_rewritten_id_keeps_its_exact_spelling() -> None:
    """The id 1E2 is written back as 1E2, not 100.0."""
    value = loads(b'{"jsonrpc":"2.0","id":1E2,"params":{"a":1}}')
    value["params"]["a"] = "changed"
    assert dumps(value) == b'{"jsonrpc":"2.0","id":1E2,"params":{"a":"changed"}}'


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b'{"method":"a","method":"b"}', "'method' appears twice"),
        (b'{"params":{"cwd":"/a","cwd":"/etc"}}', "'cwd' appears twice"),
        (b'{"a":[{"k":1,"k":1}]}', "'k' appears twice"),
        (b'{"cwd":"\\ud800"}', "lone surrogate"),
        (b'{"cwd":"\\udc00x"}', "lone surrogate"),
        (b'{"\\ud800":1}', "lone surrogate"),
        (b'{"id":NaN}', "NaN is not JSON"),
        (b'{"id":Infinity}', "Infinity is not JSON"),
        (b'{"id":-Infinity}', "-Infinity is not JSON"),
        (b'{"id":1', "Expecting"),
        (b"\xff{}", "not UTF-8|Expecting"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[" * (MAX_DEPTH + 2) + b"]" * (MAX_DEPTH + 2), "nested too deeply"),
    ],
)
def test_ambiguous_or_broken_text_is_refused(text: bytes, why: str) -> None:
    """What parsers would read differently, or could not read, is refused with the reason."""
    with pytest.raises(JsonRefused, match=why):
        loads(text)


@pytest.mark.parametrize(
    "encoding",
    ["utf-16-le", "utf-16-be", "utf-16", "utf-32-le", "utf-32-be", "utf-32", "utf-8-sig"],
)
def test_only_utf8_is_read(encoding: str) -> None:
    """UTF-16, UTF-32 and a byte-order mark are refused, though json.loads(bytes) takes them."""
    text = '{"method":"session/new","params":{"cwd":"/etc"}}'.encode(encoding)
    assert json.loads(text)["params"]["cwd"] == "/etc"  # what an agent's SDK would read
    with pytest.raises(JsonRefused):
        loads(text)


def test_size_is_bounded_before_parsing() -> None:
    """A text over max_bytes is refused without being parsed."""
    with pytest.raises(JsonRefused, match="over 10 bytes"):
        loads(b'{"a":"0123456789"}', max_bytes=10)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_any_json_round_trips(value: Any) -> None:
    """Whatever valid JSON comes in goes back out with the same meaning."""
    text = json.dumps(value, ensure_ascii=False).encode()
    assert json.loads(dumps(loads(text))) == json.loads(text)


text_only_values = st.recursive(
    st.none() | st.booleans() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(text_only_values)
def test_a_value_without_numbers_is_written_as_compact_json(value: Any) -> None:
    """Without numbers, the output is the standard compact form, characters unescaped."""
    assert dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        (b'{"a":[{"b":"x \\ud800 y"}]}', True),
        (b'["\\\\ud800"]', False),  # a backslash, then the letters "ud800"
        (b'["\\ud83d\\ude00"]', False),
        (b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, False),
        (b'"' + b"[" * (MAX_DEPTH + 5) + b'"', False),  # brackets inside a string
    ],
)
def test_surrogates_and_depth_are_judged_whatever_the_shortcut(text: bytes, refused: bool) -> None:
    """Lone surrogates deep inside are refused; look-alikes and exactly MAX_DEPTH pass."""
    if refused:
        with pytest.raises(JsonRefused):
            loads(text)
    else:
        assert loads(text) == json.loads(text)


def nested(depth: int) -> Any:
    """Lists and objects alternating, ``depth`` containers deep."""
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize(
    ("value", "limit", "deeper"),
    [
        ("text", 0, False),
        ([], 0, True),
        ([], 1, False),
        ({"a": [1, 2]}, 2, False),
        ({"a": [1, [2]]}, 2, True),
        ([[], [[]], []], 2, True),
        (nested(100), 100, False),
        (nested(101), 100, True),
        (nested(200_000), 32, True),  # walked without recursion
    ],
)
def test_deeper_than_counts_the_containers_inside_one_another(
    value: Any, limit: int, deeper: bool
) -> None:
    """A scalar is 0 deep, ``[]`` 1, each container inside another one more; the deepest
    branch counts, however deep."""
    assert deeper_than(value, limit) is deeper


@pytest.mark.parametrize(
    "data",
    [b'{"a":[1,1E2,"\\u00e9"]}', b'{"a":1,"a":2}', b' {"a":1}', b'{"a":1} ', b"[1]",
     b'{"a":"\\ud800"}', b'{"a":NaN}', b'{"a":"\xff"}', b'{"a":' + b"[" * 300 + b"]" * 300 + b"}",
     b'{"\xc3\xa9":"\xc3\xa9"}', b"{", b""],
)  # fmt: skip
def test_object_or_none_reads_as_loads_or_says_none(data: bytes) -> None:
    """object_or_none gives what loads gives, or None (never a value loads would refuse)."""
    got = object_or_none(data)
    if got is not None:
        assert got == loads(data)
    assert object_or_none(b'{"a":[1,1E2]}') == loads(b'{"a":[1,1E2]}')
