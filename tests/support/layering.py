"""The layout's rules as checks on a tree of sources (tests/test_layout.py runs them on the
relay's, and on small trees of its own): the packages in one order, the two sides apart, no
import cycle.

The order (:data:`PACKAGE_ORDER`): the pure packages first, each importing only itself and
the pure packages before it, then the I/O both sides share, then each side (the server's,
the client's: neither imports the other), then the commands. ``relay.demo_agent`` stands
apart: it imports nothing of the relay, and nothing of the relay imports it. Inside each
side, its sub-packages have an order of their own (:data:`SUBPACKAGE_ORDER`), checked alike.

The client side (``relay.client.*`` and every command of ``relay.commands`` but the server's,
:data:`SERVER_COMMANDS`: a new command is the client's unless named there) reaches no module
of the server side (``relay.server.*`` and the server's commands) through its imports,
followed to the end (statically, ``TYPE_CHECKING`` included).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# The packages in order: each imports only the packages before it, the server side and the
# client side never each other. The pure ones first (relay.chat joins after relay.config).
PURE_PACKAGES = ["relay.core", "relay.acp", "relay.config", "relay.chat"]
SHARED_IO = ["relay.streams", "relay.observe"]  # I/O both sides use
SERVER_SIDE = ["relay.server"]
CLIENT_SIDE = ["relay.client"]
COMMANDS = ["relay.commands", "relay.__main__"]
PACKAGE_ORDER = [*PURE_PACKAGES, *SHARED_IO, *SERVER_SIDE, *CLIENT_SIDE, *COMMANDS]
APART = ["relay.demo_agent"]  # imports nothing of the relay; nothing of it imports it
SIDES = (SERVER_SIDE, CLIENT_SIDE)
VERSION = "relay"  # relay/__init__.py: the version, which any module may read

# Inside each side, its sub-packages (and its own modules) in tiers: each imports only
# those of the tiers before its own, none of its own tier. The server: the agent processes,
# the connections that run them, the HTTP edge that admits sockets onto connections, the
# listening server over them all. The client: the link that reaches a relay, then the three
# clients over it, none using another.
SUBPACKAGE_ORDER = {
    "relay.server": [["agents"], ["connections"], ["http"], ["serving"]],
    "relay.client": [["link"], ["editor", "chatbot", "watch"]],
}

# The commands of relay.commands that are the server's: ``serve`` and the modules that reach the
# server for it. Every other module of relay.commands is the client side's (a new one included)
# and may reach nothing of the server.
SERVER_COMMANDS = ("relay.commands.serve", "relay.commands.devbanner")
SERVE_SIDE = ("relay.server", *SERVER_COMMANDS)
WEBSOCKETS_SERVER = ("websockets.server", "websockets.asyncio.server")
MAX_MODULE_LINES = 450


def client_side(name: str) -> bool:
    """Whether module ``name`` is the client side's: in relay.client, or a module of
    relay.commands that :data:`SERVER_COMMANDS` does not name."""
    return within(name, CLIENT_SIDE) or (
        within(name, ("relay.commands",)) and not within(name, SERVER_COMMANDS)
    )


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


def long_modules(root: Path) -> dict[str, int]:
    """Each module of the relay under ``root`` over :data:`MAX_MODULE_LINES`, with its lines."""
    counts = {name: len(path.read_text().splitlines()) for name, path in module_files(root).items()}
    return {name: n for name, n in counts.items() if n > MAX_MODULE_LINES}


# -- the client side loads nothing of the server's ------------------------------------------------


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
    """Each server-side module the client side reaches through its imports, with the chain of
    imports that reaches it."""
    graph = relay_imports(root)
    start = [name for name in graph if client_side(name)]
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
    """The relay's packages (and top-level modules), and the sub-packages (and modules) of
    each side, that have no place in the order."""
    placed = {VERSION, *PACKAGE_ORDER, *APART}
    names = module_files(root)
    unplaced = {package_of(name) for name in names} - placed
    for side, tiers in SUBPACKAGE_ORDER.items():
        parts = {part for name in names if (part := part_of(name, side)) is not None}
        unplaced |= {f"{side}.{part}" for part in parts if tier_of(part, tiers) is None}
    return sorted(unplaced)


def part_of(module: str, side: str) -> str | None:
    """The sub-package or module of ``side`` that ``module`` is or belongs to
    (``relay.server.http.edge``: http); None outside ``side`` or for the side's package."""
    parts = module.split(".")
    return parts[2] if within(module, (side,)) and len(parts) > 2 else None


def tier_of(part: str, tiers: list[list[str]]) -> int | None:
    """The tier of a side's sub-package or module in :data:`SUBPACKAGE_ORDER`."""
    return next((index for index, tier in enumerate(tiers) if part in tier), None)


def subpackage_order_broken(root: Path) -> list[str]:
    """Each import inside a side that reaches a sub-package (or module) of the side in its
    own tier or a later one, as ``module imports target``."""
    found = []
    for module, targets in sorted(relay_imports(root).items()):
        for side, tiers in SUBPACKAGE_ORDER.items():
            own = part_of(module, side)
            if own is None or (own_tier := tier_of(own, tiers)) is None:
                continue
            for target in sorted(targets):
                other = part_of(target, side)
                if other is None or other == own or target != f"{side}.{other}":
                    continue
                other_tier = tier_of(other, tiers)
                if other_tier is None or other_tier >= own_tier:
                    found.append(f"{module} imports {target}")
    return found


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
