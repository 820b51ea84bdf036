"""Tests for relay.config.resolved: the server's configuration assembled from the settings and
what the CLI read and checked."""

from __future__ import annotations

import json

import pytest

from relay.acp.rewrite import Files
from relay.config.defaults import DEV_TICKET_TTL
from relay.config.errors import UsageError
from relay.config.resolved import admission_policy, assemble, mcp_servers, warm_agents
from relay.config.settings import Settings, resolve

SERVER = {"name": "github", "url": "https://mcp.example/x", "type": "http",
          "headers": [{"name": "Authorization", "value": "Bearer ${GH_TOKEN}"}]}  # fmt: skip


def settle(flags: dict[str, object]) -> Settings:
    return resolve(flags, {}, None, cwd="/srv")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [({}, 0), ({"dev": True}, 1), ({"dev": True, "warm_agents": "0"}, 0),
     ({"warm_agents": "3"}, 3)],
)  # fmt: skip
def test_dev_keeps_one_warm_agent_unless_told_otherwise(
    flags: dict[str, object], expected: int
) -> None:
    """--warm-agents defaults to 0, and to 1 under --dev; a given value wins either way."""
    settings = settle(flags)
    assert warm_agents(settings) == expected


@pytest.mark.parametrize(
    ("flags", "ttl"),
    [({}, 60.0), ({"ticket_ttl": "90"}, 90.0), ({"dev": True}, DEV_TICKET_TTL),
     ({"dev": True, "ticket_ttl": str(2 * DEV_TICKET_TTL)}, 2 * DEV_TICKET_TTL)],
)  # fmt: skip
def test_dev_tickets_stay_valid_a_working_day_at_least(
    flags: dict[str, object], ttl: float
) -> None:
    """--ticket-ttl as given; under --dev, a working day unless more is given."""
    assert admission_policy(settle(flags), ["s3cret"]).ticket_ttl == ttl


def test_assemble_carries_the_settings_and_what_the_cli_checked() -> None:
    """The settings and what the CLI found (agent, environment, servers, folders) become the
    server's configuration, field by field."""
    settings = settle({"listen": "127.0.0.1:9000", "files": "shared", "allow_origin": ["*"],
                       "max_watchers": "2", "mcp_merge": "replace"})  # fmt: skip
    servers = (SERVER,)
    config = assemble(
        settings,
        secrets=["one", "two"],
        agent_argv=["agent", "--acp"],
        agent_env={"HOME": "/home/agent"},
        account=None,
        mcp_servers=servers,
        trace_dir="/var/trace",
        state_dir=None,
    )
    assert (config.host, config.port, config.path) == ("127.0.0.1", 9000, "/acp")
    assert (config.agent_argv, config.agent_env) == (("agent", "--acp"), {"HOME": "/home/agent"})
    assert config.policy.secrets == ("one", "two")
    assert config.policy.allow_origins == ("*",)
    assert config.rewrite is not None
    assert config.rewrite.files is Files.SHARED
    assert (config.rewrite.mcp.servers, config.rewrite.mcp.merge) == (servers, "replace")
    assert config.rewrite.cwd.workspace == settings.workspace
    assert (config.trace_dir, config.state_dir, config.max_watchers) == ("/var/trace", None, 2)
    assert (config.console, config.warm_agents) == (False, 0)


def test_the_mcp_servers_file_is_validated_and_its_expanded_values_are_named() -> None:
    """A valid file gives its servers with ${VAR} expanded, and the values expanded (to be
    kept out of logs); the file's problems stop start-up naming the flag and the path."""
    env = {"GH_TOKEN": "ghp_abc"}
    servers, expanded = mcp_servers(json.dumps([SERVER]), env, "/etc/mcp.json")
    assert [server["name"] for server in servers] == ["github"]
    assert expanded == ("ghp_abc",)
    with pytest.raises(UsageError, match=r"--mcp-servers /etc/mcp\.json: not valid JSON"):
        mcp_servers("[", env, "/etc/mcp.json")
