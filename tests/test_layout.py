"""The layout's rules, checked: the packages in one order, the pure modules pure, and the
connect side (``connect``, ``ticket``, ``watch``) loading nothing of the serve side.

The order (:data:`PACKAGE_ORDER`): the pure packages first, each importing only itself and
the pure packages before it, then the I/O both sides share, then each side (the server's,
the client's: neither imports the other), then the commands. ``relay.demo_agent`` stands
apart: it imports nothing of the relay, and nothing of the relay imports it.

Pure (the pure packages, :data:`PURE_MODULES`, and any module whose docstring says
``Pure``): imports only the standard-library modules of :data:`PURE_STDLIB` (some of them
only in part: :data:`IN_PART`), ``itsdangerous`` and the pure packages up to its own; calls
none of :data:`IO_BUILTINS`; reads no clock (``now``, ``utcnow``, ``today`` of datetime's
types). An allow-list, so that what it does not name (``importlib``, ``tempfile``,
``pathlib.Path``, ``os.path.realpath``, ``uuid``...) is refused. Read from the sources
(imports under ``TYPE_CHECKING`` and inside functions count), so a module breaks the rule by
importing, whether or not a test runs it.

The client side (``relay.client.*``: the editor's bridge, ``watch`` and the team chat's bot,
and their commands ``relay.cli.connect``, ``relay.cli.ticket``, ``relay.cli.watch``,
``relay.cli.dialflags`` and ``relay.cli.chat``) reaches no module of the server side
(``relay.server.*``, ``relay.cli.serve``): through its
imports, followed to the end (statically, ``TYPE_CHECKING`` included), and in the modules
each command has loaded when it has run.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.env import secret_env
from tests.support.sockets import free_port

ROOT = Path(__file__).resolve().parent.parent

# The packages in order: each imports only the packages before it, the server side and the
# client side never each other. The pure ones first (relay.chat joins after relay.config).
PURE_PACKAGES = ["relay.core", "relay.acp", "relay.config", "relay.chat"]
SHARED_IO = ["relay.streams", "relay.observe"]  # I/O both sides use
SERVER_SIDE = ["relay.server"]
CLIENT_SIDE = ["relay.client"]
COMMANDS = ["relay.cli", "relay.__main__"]
PACKAGE_ORDER = [*PURE_PACKAGES, *SHARED_IO, *SERVER_SIDE, *CLIENT_SIDE, *COMMANDS]
APART = ["relay.demo_agent"]  # imports nothing of the relay; nothing of it imports it
SIDES = (SERVER_SIDE, CLIENT_SIDE)
VERSION = "relay"  # relay/__init__.py: the version, which any module may read

# Pure modules outside the pure packages, beside the I/O that uses them: the counters
# metrics exposes, and the trace's records the trace writer writes.
PURE_MODULES = ["relay.observe.stats", "relay.observe.tracerecords"]
PURE_STDLIB = frozenset({
    "__future__", "abc", "argparse", "array", "base64", "binascii", "bisect", "collections",
    "collections.abc", "dataclasses", "datetime", "decimal", "difflib", "enum", "functools",
    "hashlib", "heapq", "hmac", "html", "http", "ipaddress", "itertools", "json", "json.encoder",
    "math", "operator", "re", "shlex", "stat", "string", "textwrap", "typing",
    "unicodedata", "urllib.parse",
    *("os", "os.path", "sys", "pathlib", "tomllib"),  # in part: IN_PART
})  # fmt: skip
PURE_THIRD_PARTY = frozenset({"itsdangerous"})
# Modules a pure module may use only in part: the names it may take of them.
IN_PART = {
    "os": frozenset({"path", "sep"}),
    "os.path": frozenset({
        "join", "split", "splitext", "splitdrive", "basename", "dirname", "normpath",
        "normcase", "isabs", "commonpath", "commonprefix", "sep",
    }),  # not abspath, relpath, expanduser...: they read the working directory, the environment
    "sys": frozenset({"platform", "version_info", "maxsize", "byteorder"}),
    "pathlib": frozenset({"PurePath", "PurePosixPath", "PureWindowsPath"}),
    "tomllib": frozenset({"loads", "TOMLDecodeError"}),
    "argparse": frozenset({
        "ArgumentParser", "_ActionsContainer", "Namespace", "SUPPRESS",
        "BooleanOptionalAction", "ArgumentTypeError",
    }),  # flags declared; parsing (which prints and exits) and FileType are the commands'
}  # fmt: skip
# Builtins that do I/O or end the process, and those that run code or load modules around
# the allow-list.
IO_BUILTINS = frozenset({
    "open", "print", "input", "breakpoint", "help", "exit", "quit",
    "__import__", "exec", "eval", "compile", "__builtins__",
})  # fmt: skip
CLOCK_READS = frozenset({"now", "utcnow", "today"})
DATETIME_TYPES = frozenset({"datetime.datetime", "datetime.date"})
CLAIMS_PURITY = re.compile(r"^Pure\b(?! but)", re.MULTILINE)

CONNECT_SIDE = (
    "relay.client", "relay.cli.connect", "relay.cli.ticket", "relay.cli.watch",
    "relay.cli.dialflags", "relay.cli.chat",
)  # fmt: skip
SERVE_SIDE = ("relay.server", "relay.cli.serve")
WEBSOCKETS_SERVER = ("websockets.server", "websockets.asyncio.server")


# -- the relay's modules, read from their sources ------------------------------------------------


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the ``relay`` package under ``root``, by dotted name."""
    found = {}
    for path in sorted((root / "relay").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def within(name: str, packages: Iterable[str]) -> bool:
    """Whether module ``name`` is one of ``packages`` or inside one."""
    return any(name == package or name.startswith(package + ".") for package in packages)


@dataclass(frozen=True)
class Imported:
    """One name an import statement brings in: the module, or a module's attribute."""

    line: int
    module: str  # dotted, absolute
    name: str | None = None  # ``from module import name``


def imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[Imported]:
    """Every import of a module's source, wherever it is (``TYPE_CHECKING``, functions)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Imported(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                yield Imported(node.lineno, base, alias.name)


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Write each of ``files`` (path under ``root``: text), with its folders."""
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


MAX_MODULE_LINES = 450


def test_no_module_of_the_relay_is_over_450_lines() -> None:
    """Every module under relay/ holds at most 450 lines: one job each."""
    long = {name: n for name, path in module_files(ROOT).items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}  # fmt: skip
    assert long == {}


# -- purity -------------------------------------------------------------------------------------


def impurities(source: str, module: str, is_package: bool = False) -> list[str]:
    """What breaks purity in one module's source, each as ``line N: why``."""
    tree = ast.parse(source)
    found = {*_impure_imports(tree, module, is_package), *_impure_uses(tree)}
    return [f"line {line}: {why}" for line, why in sorted(found)]


def pure_packages_for(module: str) -> list[str]:
    """The relay packages a pure module may import: the pure ones up to its own (all of
    them for a pure module outside them)."""
    for end, package in enumerate(PURE_PACKAGES, 1):
        if within(module, (package,)):
            return PURE_PACKAGES[:end]
    return PURE_PACKAGES


def _impure_imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    allowed = pure_packages_for(module)
    for each in imports(tree, module, is_package):
        if each.module.partition(".")[0] == "relay":
            target = _target(each)
            if not within(target, PURE_PACKAGES):
                yield each.line, f"imports {target} (not pure)"
            elif not within(target, allowed):
                yield each.line, f"imports {target} (after {allowed[-1]})"
        elif (why := _outside_the_allow_list(each)) is not None:
            yield each.line, why


def _outside_the_allow_list(each: Imported) -> str | None:
    """Why an import of a module other than the relay's is not pure; None when it is."""
    if each.name is not None and f"{each.module}.{each.name}" in PURE_STDLIB:
        return None  # from urllib import parse
    if each.module not in PURE_STDLIB and each.module.partition(".")[0] not in PURE_THIRD_PARTY:
        return f"imports {each.module}"
    part = IN_PART.get(each.module)
    if each.name is not None and part is not None and each.name not in part:
        return f"imports {each.module}.{each.name}"
    return None


def _impure_uses(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """The builtins of IO_BUILTINS; what IN_PART leaves out of a module; ``now``, ``utcnow``,
    ``today`` of datetime's types (however the names were bound)."""
    bound = _bound_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in IO_BUILTINS and isinstance(node.ctx, ast.Load):
            yield node.lineno, f"uses the builtin {node.id}"
        if not isinstance(node, ast.Attribute):
            continue
        owner = _dotted(node.value, bound)
        if owner in IN_PART and node.attr not in IN_PART[owner]:
            yield node.lineno, f"uses {owner}.{node.attr}"
        elif node.attr in CLOCK_READS and owner in DATETIME_TYPES:
            yield node.lineno, f"reads the clock: {ast.unparse(node)}"


def _bound_names(tree: ast.Module) -> dict[str, str]:
    """The names the source binds to modules and their attributes, with what each names
    (``import os.path as p``: p is os.path; ``from datetime import date as D``: D is
    datetime.date)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    root = alias.name.partition(".")[0]
                    bound[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """What a name or an attribute of one names, dotted from its module (None for what
    does not start at an imported name)."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _target(each: Imported) -> str:
    """The relay module or package an import names (``from relay import core``: relay.core)."""
    return f"relay.{each.name}" if each.module == "relay" and each.name else each.module


def claims_purity(path: Path) -> bool:
    """Whether a module's docstring says it is pure (a paragraph opening ``Pure``, not
    ``Pure but for``)."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return CLAIMS_PURITY.search(docstring) is not None


def held_pure(name: str, path: Path) -> bool:
    """Whether module ``name`` is held to purity: in a pure package, listed in
    :data:`PURE_MODULES`, or saying it is pure."""
    return within(name, PURE_PACKAGES) or name in PURE_MODULES or claims_purity(path)


def impure_modules(root: Path) -> dict[str, list[str]]:
    """Each module held to purity under ``root`` that breaks it, and how."""
    found = {}
    for name, path in module_files(root).items():
        if held_pure(name, path):
            why = impurities(path.read_text(), name, path.name == "__init__.py")
            if why:
                found[str(path.relative_to(root))] = why
    return found


def test_the_pure_modules_import_only_the_allow_list_and_do_no_io() -> None:
    """relay/core, relay/acp, relay/config, relay/chat and the pure modules elsewhere import
    only the allowed standard-library modules, itsdangerous and the pure packages up to their
    own; no builtin that does I/O or loads code; no clock."""
    assert impure_modules(ROOT) == {}


def test_every_module_that_says_it_is_pure_is_listed_and_checked() -> None:
    """A module outside the pure packages whose docstring says ``Pure`` is one of
    PURE_MODULES (so the check covers it), and each of those says so."""
    claiming = {
        name
        for name, path in module_files(ROOT).items()
        if claims_purity(path) and not within(name, PURE_PACKAGES)
    }
    assert claiming == set(PURE_MODULES)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import asyncio", ["line 1: imports asyncio"]),
        ("from asyncio import sleep", ["line 1: imports asyncio"]),
        ("import websockets.asyncio.client", ["line 1: imports websockets.asyncio.client"]),
        ("import time as clock", ["line 1: imports time"]),
        ("from secrets import token_bytes", ["line 1: imports secrets"]),
        ("import random\nimport logging", ["line 1: imports random", "line 2: imports logging"]),
        ("import typing\nif typing.TYPE_CHECKING:\n    import socket", ["line 3: imports socket"]),
        ("def f():\n    import subprocess", ["line 2: imports subprocess"]),
        ("from os import environ", ["line 1: imports os.environ"]),
        ("import os\nos.environ.get('X')", ["line 2: uses os.environ"]),
        ("import os as o\no.urandom(16)", ["line 2: uses os.urandom"]),
        ("import os.path\nos.getenv('X')", ["line 2: uses os.getenv"]),
        ("import os\nos.path.join('a', os.sep)", []),
        ("from os import path, sep", []),
        ("from datetime import datetime\ndatetime.now()",
         ["line 2: reads the clock: datetime.now"]),
        ("import datetime as dt\ndt.date.today()", ["line 2: reads the clock: dt.date.today"]),
        ("from datetime import datetime as D\nD.utcnow()", ["line 2: reads the clock: D.utcnow"]),
        ("from datetime import datetime\ndatetime.fromtimestamp(0)", []),
        ("from relay.observe.logs import Log", ["line 1: imports relay.observe.logs (not pure)"]),
        ("from relay.server import serving", ["line 1: imports relay.server (not pure)"]),
        ("import relay.streams.pump", ["line 1: imports relay.streams.pump (not pure)"]),
        ("from relay.core.framing import Line\nfrom relay.core import strictjson", []),
        ("from ..observe import logs", ["line 1: imports relay.observe (not pure)"]),
        ("from . import framing\nfrom .framing import Line", []),
        ("import json, re\nfrom hashlib import sha256", []),
        # what the ban-list let through
        ("data = open('/etc/passwd').read()", ["line 1: uses the builtin open"]),
        ("print('hello')", ["line 1: uses the builtin print"]),
        ("import importlib\nimportlib.import_module('socket')", ["line 1: imports importlib"]),
        ("from importlib import import_module", ["line 1: imports importlib"]),
        ("__import__('socket')", ["line 1: uses the builtin __import__"]),
        ("eval('1')\nexec('x = 1')", ["line 1: uses the builtin eval",
                                      "line 2: uses the builtin exec"]),
        ("import sys\nsys.stdout.write('x')", ["line 2: uses sys.stdout"]),
        ("import sys\nsys.modules['socket']", ["line 2: uses sys.modules"]),
        ("from sys import stderr", ["line 1: imports sys.stderr"]),
        ("import sys\nsys.platform == 'linux'", []),
        ("import pathlib\npathlib.Path('x').read_text()", ["line 2: uses pathlib.Path"]),
        ("from pathlib import Path", ["line 1: imports pathlib.Path"]),
        ("from pathlib import PurePath\nPurePath('a') / 'b'", []),
        ("import os\nos.path.realpath('x')", ["line 2: uses os.path.realpath"]),
        ("from os.path import exists", ["line 1: imports os.path.exists"]),
        ("import os.path as p\np.isdir('x')", ["line 2: uses os.path.isdir"]),
        ("from os import path\npath.expanduser('~')", ["line 2: uses os.path.expanduser"]),
        ("from uuid import uuid4", ["line 1: imports uuid"]),
        ("import tempfile, shutil, ssl", ["line 1: imports shutil", "line 1: imports ssl",
                                          "line 1: imports tempfile"]),
        ("import urllib.request", ["line 1: imports urllib.request"]),
        ("from urllib import parse\nfrom urllib.parse import urlsplit", []),
        ("import datetime\ndatetime.datetime.now()",
         ["line 2: reads the clock: datetime.datetime.now"]),
        ("from datetime import date as day\nnow = day.today",
         ["line 2: reads the clock: day.today"]),
        ("import tomllib\ntomllib.loads('')\ntomllib.load(f)", ["line 3: uses tomllib.load"]),
        ("import argparse\nargparse.FileType('r')", ["line 2: uses argparse.FileType"]),
        ("from itsdangerous import TimestampSigner", []),
        ("class Option:\n    help: str\n    open = False", []),
        ("__builtins__['open']", ["line 1: uses the builtin __builtins__"]),
        ("from relay.acp import strictjson", ["line 1: imports relay.acp (after relay.core)"]),
        ("from relay.acp.rewrite import A, B", [
            "line 1: imports relay.acp.rewrite (after relay.core)"]),
        ("from relay.config.defaults import X", [
            "line 1: imports relay.config.defaults (after relay.core)"]),
    ],
)  # fmt: skip
def test_the_purity_check_reports_each_impurity_by_line(source: str, expected: list[str]) -> None:
    """Each kind of impurity is reported with its line; pure code gets no report."""
    assert impurities(source, "relay.core.example") == expected


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("relay.acp.example", "from relay.core import framing\nfrom relay.acp import rewrite", []),
        ("relay.acp.example", "from relay.config import defaults",
         ["line 1: imports relay.config (after relay.acp)"]),
        ("relay.config.example", "from relay.core import framing\nfrom relay.acp import mcp", []),
        ("relay.observe.stats", "from relay.config.defaults import X", []),
        ("relay.observe.stats", "from relay.observe import logs",
         ["line 1: imports relay.observe (not pure)"]),
    ],
)  # fmt: skip
def test_a_pure_module_imports_only_the_pure_packages_up_to_its_own(
    module: str, source: str, expected: list[str]
) -> None:
    """Each pure package imports itself and those before it; a pure module outside them
    imports any pure package, nothing else of the relay."""
    assert impurities(source, module) == expected


def test_a_pure_module_that_imports_asyncio_fails_the_check(tmp_path: Path) -> None:
    """The check as it runs on the tree: a module of relay/core importing asyncio is reported,
    its pure neighbours are not."""
    core = tmp_path / "relay" / "core"
    core.mkdir(parents=True)
    for package in (tmp_path / "relay", core):
        (package / "__init__.py").write_text("")
    (core / "fine.py").write_text("import json\n\nfrom relay.core import framing\n")
    (core / "broken.py").write_text('"""Waits."""\n\nimport asyncio\n')
    assert impure_modules(tmp_path) == {"relay/core/broken.py": ["line 3: imports asyncio"]}


def test_open_or_importlib_in_a_pure_module_fails_the_check(tmp_path: Path) -> None:
    """The two ways around the old ban-list, as the check runs on the tree: a pure module
    that calls open(), one that imports importlib, and a module elsewhere whose docstring
    says Pure doing the first, are each reported."""
    files = {
        "relay/__init__.py": "",
        "relay/acp/__init__.py": "",
        "relay/acp/reads.py": '"""Reads."""\n\ndef rules():\n    return open("rules").read()\n',
        "relay/config/__init__.py": "",
        "relay/config/loads.py": "import importlib\n\nSOCKET = importlib.import_module('socket')\n",
        "relay/observe/__init__.py": "",
        "relay/observe/counts.py": '"""Counts.\n\nPure: numbers in."""\n\nprint("counted")\n',
        "relay/observe/writes.py": '"""Writes."""\n\nprint("written")\n',
    }
    write_tree(tmp_path, files)
    assert impure_modules(tmp_path) == {
        "relay/acp/reads.py": ["line 4: uses the builtin open"],
        "relay/config/loads.py": ["line 1: imports importlib"],
        "relay/observe/counts.py": ["line 5: uses the builtin print"],
    }


# -- the connect side loads nothing of serve's ------------------------------------------------


def relay_imports(root: Path) -> dict[str, set[str]]:
    """For each module of the relay under ``root``, the relay modules its source imports
    (``from package import module`` names the module)."""
    files = module_files(root)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for each in imports(ast.parse(path.read_text()), name, is_package):
            if not within(each.module, ("relay",)):
                continue
            whole = f"{each.module}.{each.name}" if each.name else ""
            target = whole if whole in files else each.module
            parts = target.split(".")
            targets.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
        graph[name] = targets
    return graph


def serve_side_reached(root: Path) -> dict[str, list[str]]:
    """Each serve-side module the connect side reaches through its imports, with the chain of
    imports that reaches it."""
    graph = relay_imports(root)
    start = [name for name in graph if within(name, CONNECT_SIDE)]
    came_from: dict[str, str | None] = dict.fromkeys(start)
    queue = list(start)
    while queue:
        name = queue.pop(0)
        for target in sorted(graph.get(name, ())):
            if target not in came_from:
                came_from[target] = name
                queue.append(target)
    reached = {}
    for name in came_from:
        if within(name, SERVE_SIDE):
            chain = [name]
            while (before := came_from[chain[-1]]) is not None:
                chain.append(before)
            reached[name] = chain[::-1]
    return reached


def test_the_connect_side_imports_nothing_of_the_serve_side() -> None:
    """relay.client.*, relay.cli.connect, relay.cli.ticket, relay.cli.watch,
    relay.cli.dialflags and relay.cli.chat, their imports followed to the end (TYPE_CHECKING and
    function-level ones too), reach no module of relay.server or relay.cli.serve."""
    assert serve_side_reached(ROOT) == {}


def test_the_import_check_finds_a_serve_module_however_far_and_hidden(tmp_path: Path) -> None:
    """A serve module imported under TYPE_CHECKING two modules away from connect is found,
    with the chain of imports that reaches it."""
    files = {
        "relay/__init__.py": "",
        "relay/client/__init__.py": "",
        "relay/client/bridge.py": "from relay.core import shared\n",
        "relay/core/__init__.py": "",
        "relay/core/shared.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from relay.server.agent import Exit\n"
        ),
        "relay/server/__init__.py": "",
        "relay/server/agent.py": "",
    }
    write_tree(tmp_path, files)
    chain = ["relay.client.bridge", "relay.core.shared"]
    assert serve_side_reached(tmp_path) == {
        "relay.server": [*chain, "relay.server"],
        "relay.server.agent": [*chain, "relay.server.agent"],
    }


# -- the packages in order ----------------------------------------------------------------------


def package_of(module: str) -> str:
    """The relay package a module belongs to (``relay.core.framing``: relay.core); the
    top-level modules are their own (``relay.__main__``, ``relay``)."""
    return ".".join(module.split(".")[:2])


def may_import(importer: str, imported: str) -> bool:
    """Whether package ``importer`` may import package ``imported``: it comes before in
    :data:`PACKAGE_ORDER`, and not from the other side."""
    if imported == VERSION:
        return True
    if importer not in PACKAGE_ORDER or imported not in PACKAGE_ORDER:
        return False
    opposite = any(importer in side and imported not in side for side in SIDES) and any(
        imported in side for side in SIDES
    )
    return PACKAGE_ORDER.index(imported) < PACKAGE_ORDER.index(importer) and not opposite


def order_broken(root: Path) -> list[str]:
    """Each import of a module under ``root`` that reaches a package it may not (a later one,
    the other side's, or across :data:`APART`), as ``module imports target``."""
    found = []
    for module, targets in sorted(relay_imports(root).items()):
        own = package_of(module)
        for target in sorted(targets):
            other = package_of(target)
            if other not in (own, VERSION) and not may_import(own, other) and target == other:
                found.append(f"{module} imports {target}")
    return found


def unplaced_packages(root: Path) -> list[str]:
    """The relay's packages (and top-level modules) that have no place in the order."""
    placed = {VERSION, *PACKAGE_ORDER, *APART}
    return sorted({package_of(name) for name in module_files(root)} - placed)


def test_every_package_imports_only_those_before_it_in_the_order() -> None:
    """core, acp, config (pure), streams, observe (shared I/O), connections, serve (server
    side), connect (client side), cli: each package imports only those before it, the two
    sides never each other; demo_agent imports nothing of the relay and nothing imports it."""
    assert order_broken(ROOT) == []


def test_every_package_has_its_place_in_the_order() -> None:
    """A package of the relay is in PACKAGE_ORDER or APART: a new one fails until placed."""
    assert unplaced_packages(ROOT) == []


def test_the_order_check_finds_each_import_against_the_order(tmp_path: Path) -> None:
    """A pure package importing a later one, a shared package importing a side, one side
    importing the other, the demo agent importing the relay, and a package with no place are
    each reported; an import of an earlier package, or of the version, is not."""
    files = {
        "relay/__init__.py": "",
        "relay/core/__init__.py": "",
        "relay/core/framing.py": "from relay.acp import rewrite\n",
        "relay/acp/__init__.py": "",
        "relay/acp/rewrite.py": "from relay.core import framing\n",
        "relay/streams/__init__.py": "",
        "relay/streams/pump.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from relay.server.agent import Exit\n"
        ),
        "relay/server/__init__.py": "",
        "relay/server/agent.py": "from relay import __version__\nfrom relay.acp import mcp\n",
        "relay/client/__init__.py": "",
        "relay/client/bridge.py": "from relay.server import agent\n",
        "relay/demo_agent/__init__.py": "",
        "relay/demo_agent/agent.py": "from relay.core.framing import Line\n",
        "relay/elsewhere/__init__.py": "",
    }
    write_tree(tmp_path, files)
    assert order_broken(tmp_path) == [
        "relay.client.bridge imports relay.server",
        "relay.core.framing imports relay.acp",
        "relay.demo_agent.agent imports relay.core",
        "relay.streams.pump imports relay.server",
    ]
    assert unplaced_packages(tmp_path) == ["relay.elsewhere"]


RUN_AND_LIST = (
    "import os, sys\nfrom relay.cli import main\nstatus = main(sys.argv[1:])\n"
    "with open(os.environ['LOADED_MODULES'], 'w') as out:\n"
    "    out.write(' '.join(sorted(sys.modules)))\nsys.exit(status)\n"
)


def modules_loaded_by_running(args: list[str], env: dict[str, str], into: Path) -> set[str]:
    """The modules loaded once ``acp-relay ARGS`` has run to its end (stdin empty)."""
    subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, *args],
        env={**env, "LOADED_MODULES": str(into)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        check=False,
    )
    return set(into.read_text().split())


@pytest.mark.parametrize(
    ("args", "its_module"),
    [
        (["ticket", "--url", "ws://127.0.0.1:1/acp"], "relay.cli.ticket"),
        (["connect", "ws://127.0.0.1:{port}/acp"], "relay.client.editor.bridge"),
        (["watch", "ws://127.0.0.1:{port}/acp"], "relay.client.watch"),
        (
            [
                "chat",
                "ws://127.0.0.1:{port}/acp",
                "--homeserver",
                "http://127.0.0.1:1",
                "--user",
                "@bot:t",
                "--room",
                "!r:t",
                "--state",
                "chat.sqlite",
                "--ticket-command",
                "true",
            ],
            "relay.client.chatbot.bot",
        ),
    ],
    ids=["ticket", "connect", "watch", "chat"],
)
def test_running_the_connect_side_loads_nothing_of_the_serve_side(
    args: list[str], its_module: str, tmp_path: Path
) -> None:
    """``ticket``, ``connect``, ``watch`` and ``chat`` (to a port nobody listens on, the
    editor's stdin empty; chat stopping at its missing token) run without loading a module of
    relay.server, relay.cli.serve or websockets' server."""
    env = {**secret_env(), "ACP_RELAY_TICKET": "x" * 40} if args[0] != "ticket" else secret_env()
    argv = [arg.format(port=free_port()) for arg in args]
    loaded = modules_loaded_by_running(argv, env, tmp_path / "modules")
    assert its_module in loaded
    assert {name for name in loaded if within(name, SERVE_SIDE + WEBSOCKETS_SERVER)} == set()


def import_cycles(root: Path) -> list[list[str]]:
    """The relay's modules that import one another in a circle (TYPE_CHECKING and
    function-level imports included), each circle once; a package's import of its own
    submodules is no circle."""
    graph = {
        name: {t for t in targets if t != name and not name.startswith(t + ".")}
        for name, targets in relay_imports(root).items()
    }
    cycles: list[list[str]] = []
    done: set[str] = set()
    for start in sorted(graph):
        path, seen = [start], {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                stack.pop()
                seen.discard(path.pop())
                continue
            if target == start:
                cycles.append([*path, start])
            elif target in graph and target not in seen and target not in done:
                path.append(target)
                seen.add(target)
                stack.append(iter(sorted(graph[target])))
        done.add(start)
    return cycles


def test_no_module_of_the_relay_imports_itself_in_a_circle() -> None:
    """No import cycle among the relay's modules, TYPE_CHECKING ones included."""
    assert import_cycles(ROOT) == []


def test_the_cycle_check_finds_a_circle_hidden_under_type_checking(tmp_path: Path) -> None:
    """Two modules that import each other, one only for type checking, are a circle."""
    files = {
        "relay/__init__.py": "",
        "relay/a.py": "from relay import b\n",
        "relay/b.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from relay import a\n"
        ),
    }
    write_tree(tmp_path, files)
    assert import_cycles(tmp_path) == [["relay.a", "relay.b", "relay.a"]]
