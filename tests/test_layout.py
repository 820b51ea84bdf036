"""The layout's rules, checked on the relay's sources (the checks: tests/support/layering.py
and tests/support/purity.py, whose docstrings state the rules), and each check shown to
report what breaks its rule, and only that, on small sources of its own.

The packages in one order, and the sub-packages of each side in theirs; the pure modules
pure (an allow-list, followed through every name bound to what it keeps out); the client
side (``relay.client.*`` and every command but the server's) loading nothing of the server
side, through its imports and in the modules each command has loaded when it has run; no
import cycle; no module over 450 lines.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.env import secret_env
from tests.support.layering import (
    PURE_PACKAGES,
    ROOT,
    SERVE_SIDE,
    SERVER_COMMANDS,
    WEBSOCKETS_SERVER,
    client_side,
    import_cycles,
    long_modules,
    module_files,
    order_broken,
    serve_side_reached,
    subpackage_order_broken,
    unplaced_packages,
    within,
    write_tree,
)
from tests.support.purity import (
    PURE_MODULES,
    claims_purity,
    impure_modules,
)
from tests.support.sockets import free_port


def test_no_module_of_the_relay_is_over_450_lines() -> None:
    """Every module under relay/ holds at most 450 lines: one job each."""
    assert long_modules(ROOT) == {}


def test_no_module_of_the_relay_keeps_lines_from_the_formatter() -> None:
    """No `# fmt: skip` under relay/: the 450-line limit is met by splitting modules by
    what they do, not by packing lines the formatter would spread."""
    packed = {
        str(path.relative_to(ROOT)): path.read_text().count("fmt: skip")
        for path in (ROOT / "relay").rglob("*.py")
        if "fmt: skip" in path.read_text()
    }
    assert packed == {}


# -- purity -------------------------------------------------------------------------------------


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


# -- the connect side loads nothing of serve's ------------------------------------------------


def test_the_connect_side_imports_nothing_of_the_serve_side() -> None:
    """relay.client and every relay.commands command but the server's reach no server module."""
    assert serve_side_reached(ROOT) == {}


def test_the_server_commands_are_modules_of_relay_cli_and_the_rest_the_clients() -> None:
    """SERVER_COMMANDS are modules of relay.commands; connect, ticket, watch, chat the client's."""
    names = module_files(ROOT)
    assert [name for name in SERVER_COMMANDS if name not in names] == []
    clients = (
        "relay.commands.connect",
        "relay.commands.ticket",
        "relay.commands.watch",
        "relay.commands.chat",
    )
    assert [name for name in clients if not client_side(name)] == []


def test_a_new_command_is_the_clients_unless_named_the_servers(tmp_path: Path) -> None:
    """An undeclared relay.commands command importing the server is reported; serve is not."""
    files = {
        "relay/__init__.py": "",
        "relay/commands/__init__.py": "",
        "relay/commands/newcmd.py": "from relay.server import serving\n",
        "relay/commands/serve.py": "from relay.server import serving\n",
        "relay/server/__init__.py": "",
        "relay/server/serving.py": "",
    }
    write_tree(tmp_path, files)
    assert serve_side_reached(tmp_path) == {
        "relay.server": ["relay.commands.newcmd", "relay.server"],
        "relay.server.serving": ["relay.commands.newcmd", "relay.server.serving"],
    }


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
            "    from relay.server.serving import Exit\n"
        ),
        "relay/server/__init__.py": "",
        "relay/server/serving.py": "from relay import __version__\nfrom relay.acp import mcp\n",
        "relay/client/__init__.py": "",
        "relay/client/watch.py": "from relay.server import serving\n",
        "relay/demo_agent/__init__.py": "",
        "relay/demo_agent/agent.py": "from relay.core.framing import Line\n",
        "relay/elsewhere/__init__.py": "",
    }
    write_tree(tmp_path, files)
    assert order_broken(tmp_path) == [
        "relay.client.watch imports relay.server",
        "relay.core.framing imports relay.acp",
        "relay.demo_agent.agent imports relay.core",
        "relay.streams.pump imports relay.server",
    ]
    assert unplaced_packages(tmp_path) == ["relay.elsewhere"]


def test_each_sides_sub_packages_import_only_those_before_them() -> None:
    """Inside relay.server and relay.client each sub-package imports only the tiers before it."""
    assert subpackage_order_broken(ROOT) == []


def test_the_sub_package_check_finds_each_import_against_the_order(tmp_path: Path) -> None:
    """Upward or same-tier imports and an unplaced sub-package are reported; downward are not."""
    files = {
        "relay/__init__.py": "",
        "relay/server/__init__.py": "",
        "relay/server/agents/__init__.py": "",
        "relay/server/agents/process.py": "from relay.server.connections import connection\n",
        "relay/server/connections/__init__.py": "",
        "relay/server/connections/connection.py": (
            "from relay.server.agents import process\nfrom . import waits\n"
        ),
        "relay/server/connections/waits.py": "",
        "relay/server/newpart/__init__.py": "",
        "relay/client/__init__.py": "",
        "relay/client/link/__init__.py": "",
        "relay/client/link/dialing.py": "from relay.client import watch\n",
        "relay/client/editor/__init__.py": "",
        "relay/client/editor/bridge.py": (
            "from relay.client.link import dialing\nfrom relay.client.chatbot import bot\n"
        ),
        "relay/client/chatbot/__init__.py": "",
        "relay/client/chatbot/bot.py": "",
        "relay/client/watch.py": "from relay.client.link import dialing\n",
    }
    write_tree(tmp_path, files)
    assert subpackage_order_broken(tmp_path) == [
        "relay.client.editor.bridge imports relay.client.chatbot",
        "relay.client.link.dialing imports relay.client.watch",
        "relay.server.agents.process imports relay.server.connections",
    ]
    assert unplaced_packages(tmp_path) == ["relay.server.newpart"]


RUN_AND_LIST = (
    "import os, sys\nfrom relay.commands import main\nstatus = main(sys.argv[1:])\n"
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
        (["ticket", "--url", "ws://127.0.0.1:1/acp"], "relay.commands.ticket"),
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
    relay.server, relay.commands.serve or websockets' server."""
    env = {**secret_env(), "ACP_RELAY_TICKET": "x" * 40} if args[0] != "ticket" else secret_env()
    argv = [arg.format(port=free_port()) for arg in args]
    loaded = modules_loaded_by_running(argv, env, tmp_path / "modules")
    assert its_module in loaded
    assert {name for name in loaded if within(name, SERVE_SIDE + WEBSOCKETS_SERVER)} == set()


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
