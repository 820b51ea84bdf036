"""Strict, bounded JSON for the few lines the relay must understand, and back out unchanged.

Pure. The relay reads a client line only to rewrite a session-opening request (or to
compact a frame holding raw newlines). What it reads there must mean exactly what the
agent will read, whatever JSON parser the agent uses, so :func:`loads` parses the whole
text or refuses it:

- numbers are kept as their text (:class:`Number`): no digit limit (Python's ``int``
  stops at 4,300 digits, JavaScript's ``JSON.parse`` does not), and they go back out
  spelled as they came (``1E2`` stays ``1E2``);
- a key given twice in one object is refused (parsers disagree on which one wins);
- a lone surrogate (``"\\ud800"``) is refused (it is no Unicode text);
- ``NaN``, ``Infinity`` and ``-Infinity`` are refused (they are not JSON);
- the text is bounded in size (``max_bytes``) and depth;
- the bytes are UTF-8, nothing else: Python's ``json.loads(bytes)`` would also take UTF-16,
  UTF-32 and a byte-order mark, which a line read as UTF-8 by the relay cannot mean.

:func:`dumps` writes the value back compactly, numbers as they were spelled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

MAX_BYTES = 1 << 20  # a session request is small; larger candidate lines are refused
MAX_DEPTH = 256
# Valid UTF-8 holds no surrogate, so a lone one can only come from a \uD800-\uDFFF escape.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class JsonRefused(ValueError):
    """The text cannot be read unambiguously; the message says why."""


class TooDeep(JsonRefused):
    """Nested deeper than the relay reads."""

    def __init__(self) -> None:
        super().__init__("nested too deeply")


class TooLarge(JsonRefused):
    """Larger than the relay reads."""


@dataclass(frozen=True, slots=True)
class Number:
    """A JSON number, as its exact text."""

    text: str


def loads(data: bytes, *, max_bytes: int = MAX_BYTES) -> Any:
    """The value of ``data`` (one JSON text), read strictly; JsonRefused otherwise."""
    if len(data) > max_bytes:
        raise TooLarge(f"over {max_bytes} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"not UTF-8: {exc.reason}") from None
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise TooDeep from None
    except ValueError as exc:  # JSONDecodeError, and JsonRefused raised by the hooks
        raise JsonRefused(str(exc)) from None
    if _may_be_ambiguous(data):
        _check_text(value)
    return value


def object_or_none(data: bytes, *, max_bytes: int = MAX_BYTES) -> dict[str, Any] | None:
    """The object ``data`` holds, exactly as :func:`loads` reads it, when ``data`` is one
    JSON object with nothing before or after it and nothing :func:`loads` would check
    further (no surrogate escape, no more brackets than MAX_DEPTH); None otherwise, where
    :func:`loads` may still read it, or refuse it.

    The same scanner and hooks as :func:`loads` (duplicate keys, constants and numbers as
    strict), without its steps for the text around the value: for a caller that falls back
    to :func:`loads` whenever this says None."""
    if len(data) > max_bytes or _may_be_ambiguous(data):
        return None
    try:
        text = data.decode("utf-8")
        value, end = _SCAN(text, 0)
    except (ValueError, StopIteration, RecursionError):  # UnicodeDecodeError, JsonRefused too
        return None
    if end != len(text) or not isinstance(value, dict):
        return None
    return value


def _constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonRefused(f"key {key!r} appears twice in one object")
            seen.add(key)
    return result


# One decoder for every read (json.loads with hooks would make one per call).
_DECODER = json.JSONDecoder(
    parse_int=Number, parse_float=Number, parse_constant=_constant, object_pairs_hook=_object
)
# The decoder's scanner of one value from an index (typeshed leaves it out of JSONDecoder).
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON (UTF-8), numbers as their :class:`Number` text."""
    try:
        return _WITHOUT_NUMBERS.encode(value).encode()
    except _HoldsNumber:
        parts: list[str] = []
        _write(value, parts, 0)
        return "".join(parts).encode()


class _HoldsNumber(Exception):
    """The value holds a :class:`Number`, which only :func:`_write` spells as it came."""


def _no_number(value: Any) -> Any:
    if isinstance(value, Number):
        raise _HoldsNumber
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


# The standard library's C encoder writes what _write writes, faster, for any value without
# a Number; the values it is given come from loads (depth already bounded) or the relay.
_WITHOUT_NUMBERS = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_no_number
)


def _may_be_ambiguous(data: bytes) -> bool:
    """Whether :func:`_check_text` can find anything: a surrogate escape, or more
    brackets than MAX_DEPTH (a text can nest no deeper than it has brackets)."""
    if data.find(b"\\u") != -1 and SURROGATE_ESCAPE.search(data) is not None:
        return True
    return data.count(b"[") + data.count(b"{") > MAX_DEPTH


def _check_text(value: Any) -> None:
    """Refuse lone surrogates in any string or key, and nesting past MAX_DEPTH."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise TooDeep
        if isinstance(item, str):
            _unicode(item)
        elif isinstance(item, dict):
            for key, member in item.items():
                _unicode(key)
                pending.append((member, depth + 1))
        elif isinstance(item, list):
            pending.extend((member, depth + 1) for member in item)


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON or TOML: dicts, lists, scalars) nests containers more
    than ``limit`` deep (``[]`` is 1 deep, ``[[1]]`` 2); walked without recursion."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth + 1 > limit:
                return True
            members = item.values() if isinstance(item, dict) else item
            pending.extend((member, depth + 1) for member in members)
    return False


def _unicode(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonRefused("a string holds a lone surrogate (\\ud800 to \\udfff)") from None


def _write(value: Any, parts: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise TooDeep
    if isinstance(value, str):
        parts.append(encode_basestring(value))
    elif isinstance(value, Number):
        parts.append(value.text)
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, dict):
        parts.append("{")
        for i, (key, member) in enumerate(value.items()):
            parts.append("," if i else "")
            parts.append(encode_basestring(key))
            parts.append(":")
            _write(member, parts, depth + 1)
        parts.append("}")
    elif isinstance(value, list):
        parts.append("[")
        for i, member in enumerate(value):
            parts.append("," if i else "")
            _write(member, parts, depth + 1)
        parts.append("]")
    elif isinstance(value, int | float):  # a value the relay put in itself
        parts.append(json.dumps(value, allow_nan=False))
    else:
        raise TypeError(f"cannot write {type(value).__name__} as JSON")
