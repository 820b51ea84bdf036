"""The purity check (tests/support/purity.py) on small sources of its own: each way a pure
module could reach I/O, the clock, randomness or the environment is reported with its line,
however the names were bound; the forms the relay's pure modules use are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.layering import write_tree
from tests.support.purity import impure_modules, impurities


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


TICKETS_SIGNER = (
    "from itsdangerous import TimestampSigner, URLSafeTimedSerializer\n"
    "class _ClockSigner(TimestampSigner):\n"
    "    def get_timestamp(self) -> int:\n"
    "        return int(self._now)\n"
    "def _serializer(keys: list[str], now: float) -> URLSafeTimedSerializer:\n"
    "    return URLSafeTimedSerializer(keys, salt='s', signer=_ClockSigner)\n"
)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # 1. a module aliased, then a forbidden attribute through the alias
        ("import os\n_os = os\n_os.environ['X']", ["line 3: uses os.environ"]),
        ("import sys as s\nout = s\nout.stderr.write('x')", ["line 3: uses sys.stderr"]),
        # 2. an attribute read by name
        ("import os\ngetattr(os, 'environ')", ["line 2: uses os.environ"]),
        ("import os\ng = getattr\ng(os, 'environ')", ["line 3: uses os.environ"]),
        ("import os\nname = 'environ'\ngetattr(os, name)",
         ["line 3: reads os by a computed name: getattr(os, name)"]),
        ("from datetime import datetime\ngetattr(datetime, 'now')()",
         ["line 2: reads the clock: getattr(datetime, 'now')"]),
        ("import os\ndef f(m):\n    return m.environ\nf(os)", ["line 4: passes os on: os"]),
        ("from os import path\nPLACES = [path]", ["line 2: passes os.path on: path"]),
        # 3. a submodule outside the allow-list, from its listed package
        ("from http import client", ["line 1: imports http.client"]),
        ("import http\nhttp.client.HTTPConnection('x')", ["line 2: uses http.client"]),
        # 4. a class aliased, then a clock read through the alias or an instance
        ("import datetime\nD = datetime.datetime\nD.now()", ["line 3: reads the clock: D.now"]),
        ("from datetime import date\nif (day := date):\n    day.today()",
         ["line 3: reads the clock: day.today"]),
        ("from datetime import datetime\ndef f(t: datetime):\n    return t.now()",
         ["line 3: reads the clock: t.now"]),
        # 5. argparse's parsing (sys.argv, stderr, exit) and a parser's own output
        ("import argparse\nparser = argparse.ArgumentParser()\nparser.parse_args()",
         ["line 3: parses the command line: parser.parse_args"]),
        ("def f(p):\n    return p.parse_known_args([])",
         ["line 2: parses the command line: p.parse_known_args"]),
        ("import argparse\ndef f(p: argparse.ArgumentParser):\n    p.error('bad')",
         ["line 3: writes or exits: p.error"]),
        ("from argparse import ArgumentParser as P\nP().print_help()",
         ["line 2: writes or exits: P().print_help"]),
        # 6. an itsdangerous signer that reads the clock itself
        ("from itsdangerous import TimestampSigner\nTimestampSigner('k').sign(b'x')",
         ["line 2: signs with the clock: TimestampSigner"]),
        ("import itsdangerous\ns = itsdangerous.URLSafeTimedSerializer('k')\n"
         "s.loads('t', max_age=5)",
         ["line 2: signs with the clock: itsdangerous.URLSafeTimedSerializer"]),
        ("from itsdangerous import TimestampSigner as T\nclass S(T):\n    pass\n"
         "S('k').unsign('t', max_age=5)", ["line 4: signs with the clock: S"]),
        ("from itsdangerous import TimedSerializer, TimestampSigner\n"
         "TimedSerializer('k', signer=TimestampSigner)",
         ["line 2: signs with the clock: TimedSerializer"]),
    ],
)  # fmt: skip
def test_the_purity_check_follows_each_name_to_what_it_reaches(
    source: str, expected: list[str]
) -> None:
    """Each way around the allow-list (alias, name, submodule, parser, signer) is reported."""
    assert impurities(source, "relay.core.example") == expected


@pytest.mark.parametrize(
    "source",
    [
        TICKETS_SIGNER,
        "import argparse\ndef add(parser: argparse.ArgumentParser) -> None:\n"
        "    parser.add_argument('--x', default=argparse.SUPPRESS)",
        "import argparse\ndef f(group: argparse._ActionsContainer) -> None:\n"
        "    group.add_argument('--y', action=argparse.BooleanOptionalAction)",
        "import os\n_path = os.path\n_path.join('a', _path.sep)",
        "from datetime import datetime, timezone\n"
        "datetime.fromtimestamp(0, tz=timezone.utc).isoformat()",
        "from http import HTTPStatus\nHTTPStatus.OK.phrase",
        "from itsdangerous import URLSafeSerializer\nURLSafeSerializer('k').dumps(1)",
        "from itsdangerous import BadSignature, SignatureExpired as E\nBAD = (BadSignature, E)",
        "from json import loads\ngetattr(loads, '__name__')",
        "class Settings:\n    port = 1\ngetattr(Settings(), 'port')",
        "from collections import abc\nfrom urllib import parse\nparse.urlsplit('x')",
        "from pathlib import PurePath\np = PurePath('a/b')\nwhile p.name:\n    p = p.parent",
    ],
    ids=["tickets", "parser", "group", "path", "fromtimestamp", "status", "untimed", "errors",
         "getattr-function", "getattr-object", "listed-submodules", "rebound"],
)  # fmt: skip
def test_the_purity_check_accepts_the_forms_the_pure_modules_use(source: str) -> None:
    """The forms the relay's pure modules use are not reported (no false positives)."""
    assert impurities(source, "relay.core.example") == []
