"""The layout's two rules, checked: the pure packages stay pure, and the connect side (``connect``
and ``ticket``) loads nothing of the serve side.

Pure (``relay/core``, ``relay/acp``, ``relay/config``, ``relay/chat``): no I/O, clock,
randomness, threads, signals or logging among the imports; ``os`` for ``os.path`` and
``os.sep`` only; no ``datetime.now``; of the relay, only the pure packages. Read from the
sources (imports under ``TYPE_CHECKING`` and inside functions count), so a module breaks the
rule by importing, whether or not a test runs it.

The connect side (``relay.connect.*``, ``relay.cli.connect``, ``relay.cli.ticket``,
``relay.cli.watch`` and ``relay.cli.dialflags``, which the first and the last share, and the
team chat's bot, ``relay.client.*`` and ``relay.cli.chat``) reaches
no module of ``relay.serve``, ``relay.connections`` or ``relay.cli.serve``: through its
imports, followed to the end (statically, ``TYPE_CHECKING`` included), and in the modules
each command has loaded when it has run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.env import secret_env
from tests.support.sockets import free_port

ROOT = Path(__file__).resolve().parent.parent
PURE_PACKAGES = ("relay.core", "relay.acp", "relay.config", "relay.chat")
NOT_PURE = frozenset({
    "asyncio", "websockets", "socket", "subprocess", "select", "selectors", "threading",
    "signal", "uvloop", "time", "random", "secrets", "logging", "structlog",
    "prometheus_client",
})  # fmt: skip
OS_ALLOWED = frozenset({"path", "sep"})
CLOCK_READS = frozenset({"now", "utcnow", "today"})
DATETIME_TYPES = frozenset({"datetime", "date"})

CONNECT_SIDE = (
    "relay.connect", "relay.cli.connect", "relay.cli.ticket", "relay.cli.watch",
    "relay.cli.dialflags", "relay.client", "relay.cli.chat",
)  # fmt: skip
SERVE_SIDE = ("relay.serve", "relay.connections", "relay.cli.serve")
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


# -- purity -------------------------------------------------------------------------------------


def impurities(source: str, module: str, is_package: bool = False) -> list[str]:
    """What breaks purity in one module's source, each as ``line N: why``."""
    tree = ast.parse(source)
    found = [*_impure_imports(tree, module, is_package), *_impure_uses(tree)]
    return [f"line {line}: {why}" for line, why in sorted(found)]


def _impure_imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    for each in imports(tree, module, is_package):
        root = each.module.partition(".")[0]
        if root in NOT_PURE:
            yield each.line, f"imports {each.module}"
        elif root == "os" and each.name is not None and each.name not in OS_ALLOWED:
            yield each.line, f"imports os.{each.name}"
        elif root == "relay" and not within(_target(each), PURE_PACKAGES):
            yield each.line, f"imports {_target(each)} (not pure)"


def _impure_uses(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """``os.`` anything but path and sep; ``now``, ``utcnow``, ``today`` of datetime's types."""
    os_names, datetime_modules, datetime_types = _bound_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in os_names and node.attr not in OS_ALLOWED:
            yield node.lineno, f"uses os.{node.attr}"
        elif node.attr in CLOCK_READS and _is_datetime_type(base, datetime_modules, datetime_types):
            yield node.lineno, f"reads the clock: {ast.unparse(node)}"


def _bound_names(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    """The names the source binds to os, to the datetime module, and to its date types."""
    os_names: set[str] = set()
    datetime_modules: set[str] = set()
    datetime_types: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.partition(".")[0]
                if alias.name.partition(".")[0] == "os":
                    os_names.add(bound)
                if alias.name == "datetime":
                    datetime_modules.add(bound)
        elif isinstance(node, ast.ImportFrom) and node.module == "datetime":
            datetime_types.update(
                a.asname or a.name for a in node.names if a.name in DATETIME_TYPES
            )
    return os_names, datetime_modules, datetime_types


def _target(each: Imported) -> str:
    """The relay module or package an import names (``from relay import core``: relay.core)."""
    return f"relay.{each.name}" if each.module == "relay" and each.name else each.module


def _is_datetime_type(node: ast.expr, datetime_modules: set[str], datetime_types: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in datetime_types
    return (
        isinstance(node, ast.Attribute)
        and node.attr in DATETIME_TYPES
        and isinstance(node.value, ast.Name)
        and node.value.id in datetime_modules
    )


def impure_modules(root: Path) -> dict[str, list[str]]:
    """Each module of the pure packages under ``root`` that breaks purity, and how."""
    found = {}
    for name, path in module_files(root).items():
        if within(name, PURE_PACKAGES):
            why = impurities(path.read_text(), name, path.name == "__init__.py")
            if why:
                found[str(path.relative_to(root))] = why
    return found


def test_the_pure_packages_import_no_io_clock_randomness_nor_the_rest_of_the_relay() -> None:
    """relay/core, relay/acp, relay/config and relay/chat: no asyncio, sockets, subprocesses,
    threads, signals, clock, randomness or logging; os for os.path only; only pure relay
    modules."""
    assert impure_modules(ROOT) == {}


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
        ("from relay.serve import server", ["line 1: imports relay.serve (not pure)"]),
        ("import relay.streams.pump", ["line 1: imports relay.streams.pump (not pure)"]),
        ("from relay.core.framing import Line\nfrom relay.acp import strictjson", []),
        ("from ..observe import logs", ["line 1: imports relay.observe (not pure)"]),
        ("from . import framing\nfrom .framing import Line", []),
        ("import json, re\nfrom hashlib import sha256", []),
    ],
)  # fmt: skip
def test_the_purity_check_reports_each_impurity_by_line(source: str, expected: list[str]) -> None:
    """Each kind of impurity is reported with its line; pure code gets no report."""
    assert impurities(source, "relay.core.example") == expected


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
    """relay.connect.*, relay.cli.connect, relay.cli.ticket, relay.cli.watch and
    relay.cli.dialflags, their imports followed to the end (TYPE_CHECKING and function-level
    ones too), reach no module of relay.serve, relay.connections or relay.cli.serve."""
    assert serve_side_reached(ROOT) == {}


def test_the_import_check_finds_a_serve_module_however_far_and_hidden(tmp_path: Path) -> None:
    """A serve module imported under TYPE_CHECKING two modules away from connect is found,
    with the chain of imports that reaches it."""
    files = {
        "relay/__init__.py": "",
        "relay/connect/__init__.py": "",
        "relay/connect/bridge.py": "from relay.core import shared\n",
        "relay/core/__init__.py": "",
        "relay/core/shared.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from relay.connections.agent import Exit\n"
        ),
        "relay/connections/__init__.py": "",
        "relay/connections/agent.py": "",
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    chain = ["relay.connect.bridge", "relay.core.shared"]
    assert serve_side_reached(tmp_path) == {
        "relay.connections": [*chain, "relay.connections"],
        "relay.connections.agent": [*chain, "relay.connections.agent"],
    }


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
        (["connect", "ws://127.0.0.1:{port}/acp"], "relay.connect.bridge"),
        (["watch", "ws://127.0.0.1:{port}/acp"], "relay.connect.watching"),
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
    relay.serve, relay.connections, relay.cli.serve or websockets' server."""
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
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert import_cycles(tmp_path) == [["relay.a", "relay.b", "relay.a"]]
