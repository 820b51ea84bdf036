"""The pure modules' check (tests/test_layout.py runs it on the tree): what a module held to
purity may import, and what it may not reach through what it imported.

A module held to purity (:func:`held_pure`) imports only the standard-library modules of
:data:`PURE_STDLIB` (some of them only in part: :data:`IN_PART`; a package's submodule only
when it is listed itself, however it is imported), ``itsdangerous`` and the pure packages up
to its own. Through what it imports it reaches no I/O, clock, randomness or environment,
however the names are bound: the check follows every name bound to a module or an object
(``import os as o``, ``_os = os``, ``D = datetime.datetime``, ``p = ArgumentParser()``, a
parameter annotated with a class: an instance of it), then reports

- an attribute IN_PART leaves out (``os.environ``), also read by name (``getattr(os,
  "environ")``, or by a computed name),
- a submodule outside the allow-list reached as an attribute (``http.client``),
- a clock read: ``now``, ``utcnow``, ``today`` of datetime's types or their instances,
- a parse of the command line (``parse_args`` and kin: argparse reads ``sys.argv``) and a
  parser's own output (``error``, ``exit``, ``print_help``, ``print_usage``),
- an itsdangerous signer or timed serializer made without a clock of the caller's: only a
  subclass of ``TimestampSigner`` that defines ``get_timestamp`` (as ``relay.core.tickets``
  does, from its ``now`` argument), or a serializer given one as ``signer=``, takes the time
  as an argument,
- the builtins of :data:`IO_BUILTINS`.

Names are followed without scopes (a name bound anywhere in the module to a forbidden object
counts everywhere): the check errs toward reporting.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

from tests.support.layering import PURE_PACKAGES, Imported, imports, module_files, within

# Pure modules outside the pure packages, beside the I/O that uses them: the counters
# metrics exposes, and the trace's records the trace writer writes.
PURE_MODULES = [
    "relay.observe.stats",
    "relay.observe.tracerecords",
    # pure, and one side's only: kept in that side's package
    "relay.client.link.editorerrors",
    "relay.client.link.inflight",
    "relay.server.agents.warmplan",
]
PURE_STDLIB = frozenset({
    "__future__", "abc", "argparse", "array", "base64", "binascii", "bisect", "collections",
    "collections.abc", "dataclasses", "datetime", "decimal", "difflib", "enum", "functools",
    "hashlib", "heapq", "hmac", "html", "http", "ipaddress", "itertools", "json", "json.encoder",
    "math", "operator", "re", "shlex", "stat", "string", "textwrap", "typing",
    "unicodedata", "urllib.parse",
    *("os", "os.path", "sys", "pathlib", "tomllib"),  # in part: IN_PART
})  # fmt: skip
PURE_THIRD_PARTY = frozenset({"itsdangerous"})
STDLIB_ROOTS = frozenset(name.partition(".")[0] for name in PURE_STDLIB)
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
# argparse's parsing reads sys.argv (and prints and exits on a bad flag): no other object of
# the pure code has a method of these names, so they are refused on anything.
PARSING = frozenset(
    {
        "parse_args",
        "parse_known_args",
        "parse_intermixed_args",
        "parse_known_intermixed_args",
    }
)
PARSER = "argparse.ArgumentParser()"  # an instance: a parser made, or a parameter annotated so
PARSER_OUTPUT = frozenset({"error", "exit", "print_help", "print_usage"})
# itsdangerous's timed signers read time.time() unless get_timestamp is overridden.
CLOCKED_SIGNERS = frozenset(
    {
        "itsdangerous.TimestampSigner",
        "itsdangerous.timed.TimestampSigner",
        "itsdangerous.TimedSerializer",
        "itsdangerous.timed.TimedSerializer",
        "itsdangerous.URLSafeTimedSerializer",
        "itsdangerous.url_safe.URLSafeTimedSerializer",
    }
)
CALLERS_CLOCK = "<a TimestampSigner whose get_timestamp is the caller's>"
GETATTR = "builtins.getattr"
CLAIMS_PURITY = re.compile(r"^Pure\b(?! but)", re.MULTILINE)


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
            if target in PURE_MODULES:  # a pure module of one side's package: checked itself
                continue
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
    if each.name is not None and _unlisted_submodule(each.module, each.name):
        return f"imports {each.module}.{each.name}"  # from http import client
    part = IN_PART.get(each.module)
    if each.name is not None and part is not None and each.name not in part:
        return f"imports {each.module}.{each.name}"
    return None


@functools.cache
def _unlisted_submodule(module: str, name: str) -> bool:
    """Whether ``module.name`` is a standard-library submodule the allow-list does not list
    (``http.client``: ``http`` is listed, its client is not)."""
    whole = f"{module}.{name}"
    if whole in PURE_STDLIB or module.partition(".")[0] not in STDLIB_ROOTS:
        return False
    try:
        return importlib.util.find_spec(whole) is not None
    except (ImportError, ValueError):  # module is no package, or not a module at all
        return False


def _impure_uses(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Each use, through whatever name, of what the allow-list keeps out of a pure module."""
    bound = _bindings(tree)
    yield from _modules_passed_on(tree, bound)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in IO_BUILTINS and isinstance(node.ctx, ast.Load):
            yield node.lineno, f"uses the builtin {node.id}"
        elif isinstance(node, ast.Attribute):
            shown = ast.unparse(node)
            if (why := _forbidden(_dotted(node.value, bound), node.attr, shown)) is not None:
                yield node.lineno, why
        elif isinstance(node, ast.Call) and (why := _forbidden_call(node, bound)) is not None:
            yield node.lineno, why


def _modules_passed_on(tree: ast.Module, bound: dict[str, str]) -> Iterator[tuple[int, str]]:
    """A module used only in part (IN_PART) handed on as a value (``f(os)``, ``[sys]``):
    what is done with it there is out of sight. Reading an attribute of it, ``getattr`` on it
    and an alias of it (followed) are the only uses."""
    seen: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            seen.add(id(node.value))
        elif isinstance(node, ast.Call) and _dotted(node.func, bound) == GETATTR and node.args:
            seen.add(id(node.args[0]))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            owner = _dotted(node, bound)
            if owner in IN_PART and id(node) not in seen:
                yield node.lineno, f"passes {owner} on: {ast.unparse(node)}"


def _forbidden(owner: str | None, attr: str, shown: str) -> str | None:
    """Why reading ``attr`` of what ``owner`` names is not pure; None when it is."""
    if attr in PARSING:
        return f"parses the command line: {shown}"
    if owner is None:
        return None
    if owner in IN_PART and attr not in IN_PART[owner]:
        return f"uses {owner}.{attr}"
    if _unlisted_submodule(owner, attr):
        return f"uses {owner}.{attr}"
    if attr in CLOCK_READS and owner.removesuffix("()") in DATETIME_TYPES:
        return f"reads the clock: {shown}"
    if owner == PARSER and attr in PARSER_OUTPUT:
        return f"writes or exits: {shown}"
    return None


def _forbidden_call(call: ast.Call, bound: dict[str, str]) -> str | None:
    """A forbidden attribute read by name (``getattr(os, "environ")``, or by a computed
    name), or a signer that reads the clock."""
    func = _dotted(call.func, bound)
    if func == GETATTR and len(call.args) >= 2:
        owner, name = _dotted(call.args[0], bound), call.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return _forbidden(owner, name.value, ast.unparse(call))
        if owner in IN_PART or (owner or "").removesuffix("()") in DATETIME_TYPES:
            return f"reads {owner} by a computed name: {ast.unparse(call)}"
    elif func in CLOCKED_SIGNERS:
        signer = next((k.value for k in call.keywords if k.arg == "signer"), None)
        if signer is None or _dotted(signer, bound) != CALLERS_CLOCK:
            return f"signs with the clock: {ast.unparse(call.func)}"
    return None


def _bindings(tree: ast.Module) -> dict[str, str]:
    """The names the source binds to modules and their attributes (and instances: ``()``),
    with what each names, followed through aliases until nothing new is bound (a name keeps
    the first thing it is bound to)."""
    bound = _imported_names(tree)
    while True:
        before = dict(bound)
        for node in ast.walk(tree):
            for name, what in _aliases(node, bound):
                bound.setdefault(name, what)  # the first binding kept: p = p.parent ends
        if bound == before:
            return bound


def _aliases(node: ast.AST, bound: dict[str, str]) -> Iterator[tuple[str, str]]:
    """The names one node binds to something already bound: ``_os = os``, ``D =
    datetime.datetime``, ``p = ArgumentParser()`` (and ``:=``), a parameter annotated with a
    class (an instance of it), a class deriving from a timed signer (the signer, or
    :data:`CALLERS_CLOCK` when it defines ``get_timestamp``)."""
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        what = _dotted(node.value, bound)
        for target in targets:
            if isinstance(target, ast.Name) and what is not None:
                yield target.id, what
    elif isinstance(node, ast.arg) and node.annotation is not None:
        if (kind := _dotted(node.annotation, bound)) is not None:
            yield node.arg, f"{kind}()"
    elif isinstance(node, ast.ClassDef):
        for base in node.bases:
            if (what := _dotted(base, bound)) in CLOCKED_SIGNERS:
                takes_time = any(
                    isinstance(each, ast.FunctionDef) and each.name == "get_timestamp"
                    for each in node.body
                )
                yield node.name, CALLERS_CLOCK if takes_time else what


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """The names the imports bind, with what each names (``import os.path as p``: p is
    os.path; ``from datetime import date as D``: D is datetime.date)."""
    bound = {"getattr": GETATTR}  # the builtin, followed like any name (g = getattr)
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
    """What a name, an attribute of one or a call of one names, dotted from its module (a
    call's result ends in ``()``; None for what does not start at a bound name)."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    if isinstance(node, ast.Call):
        func = _dotted(node.func, bound)
        return None if func is None else f"{func}()"
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
