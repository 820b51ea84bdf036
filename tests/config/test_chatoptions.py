from pathlib import Path

import pytest

from relay.config.chatoptions import OPTIONS, resolve_chat
from relay.config.errors import UsageError

BASE: dict[str, object] = {"homeserver": "http://127.0.0.1:8008", "user": "@bot:t", "room": ["!r"],
        "state": "chat.sqlite"}  # fmt: skip


def resolved(flags: dict[str, object], env: dict[str, str] | None = None,
             text: str | None = None) -> dict[str, object]:  # fmt: skip
    return resolve_chat(OPTIONS, flags, env or {}, text, cwd="/srv", file_name="chat.toml")


def test_flag_over_environment_over_file_over_default() -> None:
    """Each layer wins over the next; a repeatable variable is split like a shell."""
    text = 'thoughts = "shown"\napprover = ["@file:t"]\napproval-timeout = 30\n'
    values = resolved({**BASE, "thoughts": "hidden"},
                      {"ACP_RELAY_APPROVER": "@env:t '@two:t'"}, text)  # fmt: skip
    assert values["thoughts"] == "hidden"
    assert values["approver"] == ("@env:t", "@two:t")
    assert values["approval_timeout"] == 30.0
    assert resolved(BASE)["thoughts"] == "folded"


def test_relative_paths_are_taken_against_the_working_directory() -> None:
    """--state and --token-file relative to where the bot starts."""
    values = resolved({**BASE, "token_file": "bot.token"})
    assert values["state"] == str(Path("/srv/chat.sqlite"))
    assert values["token_file"] == str(Path("/srv/bot.token"))


@pytest.mark.parametrize(
    ("flags", "text", "message"),
    [
        ({**BASE, "user": "bot"}, None, "flag --user: expected a Matrix user id"),
        ({**BASE, "room": ["#alias:t"]}, None, "flag --room: expected a room id"),
        (
            {**BASE, "room": ["#alias:t"]},
            None,
            "that is an alias.*Room settings → Advanced → Internal room ID",
        ),
        (
            {**BASE, "approver_level": "high"},
            None,
            "flag --approver-level: expected a power level, an integer such as 50",
        ),
        ({**BASE, "homeserver": "matrix.example.org"}, None, "expected the homeserver's"),
        ({**BASE, "thoughts": "loud"}, None, "flag --thoughts"),
        ({k: v for k, v in BASE.items() if k != "state"}, None, "needs --state"),
        (BASE, "tokens = 1\n", "unknown key 'tokens'"),
        (BASE, "room = [\n", "invalid TOML"),
        (BASE, "approver-level = true\n", "config file key approver-level"),
    ],
)
def test_a_mistake_is_one_usage_error_naming_its_source(
    flags: dict[str, object], text: str | None, message: str
) -> None:
    """A bad value says where it came from; a missing setting names the flag."""
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        resolved(flags, None, text)
