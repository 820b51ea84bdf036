"""Tests for relay.config.startupchecks: what serve warns about or refuses in its own set-up."""

from __future__ import annotations

import pytest

from relay.config.errors import UsageError
from relay.config.startupchecks import (
    closest_env_name,
    environment_warnings,
    may_search,
    secret_file_warnings,
    secret_warnings,
)


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("ACP_RELAY_MAX_CONECTIONS", "ACP_RELAY_MAX_CONNECTIONS"),
        ("ACP_RELAY_SECRETFILE", "ACP_RELAY_SECRET_FILE"),
        ("acp_relay_agent", "ACP_RELAY_AGENT"),
        ("ACP_RELAY_AGNET", "ACP_RELAY_AGENT"),
        ("ACP_RELAY_COLOUR_SCHEME", None),
    ],
)
def test_closest_env_name(name: str, meant: str | None) -> None:
    """A misspelt variable is matched to the setting it most likely meant, if any is close."""
    assert closest_env_name(name) == meant


def test_environment_warnings_name_each_unknown_variable_once() -> None:
    """Each unknown ACP_RELAY_* variable gets one warning; known ones, connect's and others none."""
    env = {
        "ACP_RELAY_MAX_CONECTIONS": "1",
        "ACP_RELAY_AGENT": "cat",
        "ACP_RELAY_SECRET": "s",
        "ACP_RELAY_CONFIG": "/etc/relay.toml",
        "ACP_RELAY_TICKET": "t",
        "HOME": "/root",
        "acp_relay_dev": "1",
    }
    warnings = environment_warnings(env)
    assert [(w.event, dict(w.fields)) for w in warnings] == [
        (
            "unknown environment variable ignored",
            {"name": "ACP_RELAY_MAX_CONECTIONS", "did_you_mean": "ACP_RELAY_MAX_CONNECTIONS"},
        ),
        (
            "unknown environment variable ignored",
            {"name": "acp_relay_dev", "did_you_mean": "ACP_RELAY_DEV"},
        ),
    ]


@pytest.mark.parametrize(
    ("secrets", "short"),
    [
        (("a" * 32,), []),
        (("a" * 31,), [(1, 31)]),
        (("a" * 40, "b" * 16), [(2, 16)]),
        (("é" * 16,), []),  # bytes, not characters: 32 bytes of UTF-8
    ],
)
def test_short_secrets_are_warned_about(
    secrets: tuple[str, ...], short: list[tuple[int, int]]
) -> None:
    """A secret of 16 to 31 bytes is accepted with a warning naming its position and size."""
    warnings = secret_warnings(secrets, "--secret-file /run/s")
    assert [(w.fields["secret"], w.fields["bytes"]) for w in warnings] == short
    for each in warnings:
        assert each.event == "short ticket secret"
        assert each.fields["source"] == "--secret-file /run/s"
        assert "secrets.token_urlsafe(32)" in each.fields["fix"]
        assert "a" * 16 not in str(each.fields)


@pytest.mark.parametrize("secrets", [("a" * 15,), ("a" * 40, "short"), ("",)])
def test_a_secret_under_16_bytes_is_refused_with_the_fix(secrets: tuple[str, ...]) -> None:
    """A secret under 16 bytes stops start-up, saying which one and how to make a good one."""
    with pytest.raises(UsageError) as caught:
        secret_warnings(secrets, "ACP_RELAY_SECRET")
    message = str(caught.value)
    assert message.startswith(f"ACP_RELAY_SECRET: secret {len(secrets)} is ")
    assert "under the 16 a ticket secret needs" in message
    assert "secrets.token_urlsafe(32)" in message
    assert "short" not in message.replace("a ticket secret", "")


@pytest.mark.parametrize(
    ("mode", "warned"),
    [
        (0o100600, False),
        (0o100400, False),
        (0o100700, False),
        (0o100640, True),
        (0o100604, True),
        (0o100644, True),
        (0o100620, False),  # writable by the group, not readable: not a leak of the secret
    ],
)
def test_secret_file_readable_by_others_is_warned_about(mode: int, warned: bool) -> None:
    """A secret file its group or others can read gets a warning with the chmod that fixes it."""
    warnings = secret_file_warnings("/etc/relay/secret", mode)
    if not warned:
        assert warnings == []
        return
    (warning,) = warnings
    assert warning.event == "secret file readable by group or others"
    assert dict(warning.fields) == {
        "file": "/etc/relay/secret",
        "mode": f"{mode & 0o7777:04o}",
        "fix": "chmod 600 /etc/relay/secret",
    }


@pytest.mark.parametrize(
    ("mode", "owner", "group", "uid", "gids", "allowed"),
    [
        (0o700, 1000, 1000, 1000, (1000,), True),  # the owner
        (0o700, 1000, 1000, 65534, (65534,), False),
        (0o710, 1000, 50, 65534, (65534, 50), True),  # through a supplementary group
        (0o701, 1000, 50, 65534, (65534,), True),  # others
        (0o070, 65534, 65534, 65534, (65534,), False),  # the owner's bits count, not the group's
        (0o700, 1000, 1000, 0, (0,), True),  # root, with any x bit
        (0o600, 1000, 1000, 0, (0,), False),
    ],
)
def test_may_search(
    mode: int, owner: int, group: int, uid: int, gids: tuple[int, ...], allowed: bool
) -> None:
    """A directory is searched (a file run) by its owner, group or others by their x bit."""
    assert may_search(mode, owner, group, uid, gids) is allowed
