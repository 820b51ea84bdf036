"""``acp-relay chat``'s start: every misconfiguration is exit 2 and one line saying the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.env import clean_env
from tests.support.synapse import Homeserver

BASE = ("chat", "ws://127.0.0.1:1/acp", "--homeserver", "http://127.0.0.1:1", "--user",
        "@bot:t", "--room", "!r", "--approver", "@a:t", "--ticket-command", "true")  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (BASE, {}, "no access token"),
        (BASE, {"ACP_RELAY_MATRIX_TOKEN": "two words"}, "is not one access token"),
        (BASE[:-2], {"ACP_RELAY_MATRIX_TOKEN": "t"}, "give\n--ticket-command"),
        (BASE[:-4] + BASE[-2:], {"ACP_RELAY_MATRIX_TOKEN": "t"}, "nobody could answer"),
        (("chat", "--homeserver", "http://127.0.0.1:1", "--user", "@b:t", "--room", "!r",
          "--ticket-command", "true"), {"ACP_RELAY_MATRIX_TOKEN": "t"},
         "give the relay's URL"),
        ((*BASE, "--token", "t"), {}, "unrecognized arguments: --token"),
    ],
)  # fmt: skip
def test_a_misconfiguration_stops_the_start_with_exit_2(
    args: tuple[str, ...], env: dict[str, str], message: str, tmp_path: Path
) -> None:
    """Exit status 2, the fix said on stderr, the token never echoed; no --token flag, not
    even as an abbreviation of --token-file."""
    result = run_cli(*args, "--state", str(tmp_path / "chat.sqlite"), env=clean_env(**env))
    assert result.returncode == 2
    assert " ".join(message.split()) in " ".join(result.stderr.split())
    assert "two words" not in result.stderr


def test_a_token_the_homeserver_refuses_is_exit_2(homeserver: Homeserver, tmp_path: Path) -> None:
    """A wrong token, or one of another user, stops the start before anything is served."""
    bot = homeserver.register("bot")
    token = tmp_path / "bot.token"
    token.write_text("syt_not_a_token")
    token.chmod(0o600)
    args = ("chat", "ws://127.0.0.1:1/acp", "--homeserver", homeserver.url, "--user",
            bot.user_id, "--room", "!r", "--approver", "@a:t", "--ticket-command", "true",
            "--state", str(tmp_path / "chat.sqlite"), "--token-file", str(token))  # fmt: skip
    refused = run_cli(*args, env=clean_env())
    assert refused.returncode == 2
    assert "acp-relay: the homeserver refused the access token" in refused.stderr
    token.write_text(bot.token)
    other = run_cli(*[a if a != bot.user_id else "@someone:relay.test" for a in args],
                    env=clean_env())  # fmt: skip
    assert other.returncode == 2
    assert f"the access token is {bot.user_id}'s" in other.stderr
    assert bot.token not in other.stderr + other.stdout


HIDE_CHAT_EXTRA = """
import runpy, sys
class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mautrix", "aiohttp"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hidden())
sys.argv = ["acp-relay", *sys.argv[1:]]
runpy.run_module("relay", run_name="__main__", alter_sys=True)
"""


def test_without_the_chat_extra_the_start_is_one_line_with_the_install_command(
    tmp_path: Path,
) -> None:
    """mautrix and aiohttp hidden (as after the README's .[demo] install): exit 2 and one
    line on stderr naming pip install 'acp-relay[chat]', no traceback."""
    result = subprocess.run(
        [sys.executable, "-c", HIDE_CHAT_EXTRA, *BASE, "--state", str(tmp_path / "c.sqlite")],
        env=clean_env(ACP_RELAY_MATRIX_TOKEN="t"), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("acp-relay: acp-relay chat needs the chat extra (")
    assert line.endswith(" is missing): pip install 'acp-relay[chat]'")


def test_a_token_file_others_may_read_is_refused(tmp_path: Path) -> None:
    """A --token-file readable by group or others: exit 2 with the chmod that fixes it,
    the token never echoed."""
    token = tmp_path / "bot.token"
    token.write_text("syt_secret_token_value")
    token.chmod(0o644)
    result = run_cli(*BASE, "--state", str(tmp_path / "chat.sqlite"), "--token-file",
                     str(token), env=clean_env())  # fmt: skip
    assert result.returncode == 2
    assert f"--token-file {token} is readable by others (mode 644)" in result.stderr
    assert f"chmod 600 {token}" in result.stderr
    assert "syt_secret_token_value" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("rules", "flags", "message"),
    [
        ('[[rule]]\nkinds = ["exec"]\n', (), "config file {file}: [[rule]] number 1: unknown "
         "tool kind 'exec'"),
        ('[[rule]]\nkinds = ["execute"]\napprovers = ["@ops:t"]\nquorum = 2\n', (),
         "quorum = 2 but only 1 people could ever approve"),
        ('[rule]\nkinds = ["execute"]\n', (), "write each as [[rule]]"),
        ("rules = 1\n", (), "unknown key 'rules'"),
        ("", ("--escalate-to", "@ops:t"), "--escalate-to needs --escalate-after SECONDS"),
    ],
)  # fmt: skip
def test_approval_rules_that_cannot_work_stop_the_start_with_exit_2(
    rules: str, flags: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    """Checked at start-up, before the homeserver is contacted: exit 2 and the fix."""
    config = tmp_path / "chat.toml"
    config.write_text(rules)
    state = str(tmp_path / "chat.sqlite")
    env = clean_env(ACP_RELAY_MATRIX_TOKEN="t")
    result = run_cli(*BASE, *flags, "--config", str(config), "--state", state, env=env)
    assert result.returncode == 2
    assert " ".join(message.format(file=config).split()) in " ".join(result.stderr.split())
    assert not (tmp_path / "chat.sqlite").exists()


def test_a_pickle_key_others_may_read_or_without_the_e2ee_extra_stops_the_start(
    tmp_path: Path,
) -> None:
    """A --pickle-key-file others may read: exit 2 with the chmod; an empty one: exit 2; a
    key given where the chat-e2ee extra is missing (libolm's binding not importable): exit
    2 with the install command; the key never echoed."""
    key = tmp_path / "pickle.key"
    key.write_text("the-pickle-key-value\n")
    key.chmod(0o644)
    state = ["--state", str(tmp_path / "chat.sqlite")]
    env = clean_env(ACP_RELAY_MATRIX_TOKEN="t")
    loose = run_cli(*BASE, "--pickle-key-file", str(key), *state, env=env)
    assert loose.returncode == 2
    assert f"chmod 600 {key}" in loose.stderr
    key.chmod(0o600)
    hidden = tmp_path / "no-olm"
    hidden.mkdir()
    (hidden / "olm.py").write_text("raise ModuleNotFoundError(\"No module named 'olm'\", "
                                   "name='olm')\n")  # fmt: skip
    without = run_cli(*BASE, "--pickle-key-file", str(key), *state,
                      env={**env, "PYTHONPATH": str(hidden)})  # fmt: skip
    assert without.returncode == 2
    assert "pip install 'acp-relay[chat-e2ee]'" in without.stderr
    key.write_text("\n")
    empty = run_cli(*BASE, "--pickle-key-file", str(key), *state, env=env)
    assert empty.returncode == 2
    assert "is empty" in empty.stderr
    assert all("the-pickle-key-value" not in r.stderr for r in (loose, without, empty))
