"""relay.config.settings: layering, parsing, errors, secrets, argparse, the docs' table."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from relay.acp.rewrite import Files
from relay.config import convert
from relay.config.serveoptions import GROUPS, OPTIONS, option_named
from relay.config.settings import (
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_DOTS,
    ConfigError,
    Option,
    Settings,
    add_options,
    add_serve_arguments,
    agent_environment,
    config_file_path,
    parse_secrets,
    resolve,
    resolve_option,
    resolve_some,
    settings_given,
    unknown_env_names,
)

CWD = "/srv/here"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def settle(
    flags: dict[str, object] | None = None,
    env: dict[str, str] | None = None,
    toml: str | None = None,
) -> Settings:
    return resolve(flags or {}, env or {}, toml, cwd=CWD, file_name="relay.toml")


def error_of(
    flags: dict[str, object] | None = None,
    env: dict[str, str] | None = None,
    toml: str | None = None,
) -> str:
    with pytest.raises(ConfigError) as info:
        settle(flags, env, toml)
    return str(info.value)


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(prog="acp-relay serve")
    add_serve_arguments(result)
    return result


def test_defaults() -> None:
    """With nothing given every setting has its documented default."""
    assert settle() == Settings(
        host="127.0.0.1",
        port=8765,
        path="/acp",
        agent_argv=None,
        workspace=CWD,
        agent_env=(),
        secret_file=None,
        secret_env=None,
        allow_origins=(),
        max_connections=64,
        max_message_bytes=64 * 1024 * 1024,
        ping_interval=20.0,
        ping_timeout=20.0,
        kill_grace=3.0,
        ticket_ttl=60.0,
        audience=None,
        open_timeout=10.0,
        log_format=None,
        log_level="info",
        dev=False,
        config_file=None,
        workspace_given=False,
    )


@pytest.mark.parametrize(
    ("flags", "env", "toml", "given"),
    [
        ({}, {}, None, False),
        ({"workspace": "w"}, {}, None, True),
        ({}, {"ACP_RELAY_WORKSPACE": "w"}, None, True),
        ({}, {}, 'workspace = "w"', True),
    ],
)
def test_whether_the_workspace_was_given(
    flags: dict[str, object], env: dict[str, str], toml: str | None, given: bool
) -> None:
    """workspace_given says whether --workspace came from a flag, the environment or the
    file, rather than being the current directory by default."""
    assert settle(flags, env, toml).workspace_given is given


@pytest.mark.parametrize(
    ("flags", "env", "toml", "expected"),
    [
        ({}, {}, None, 64),
        ({}, {}, "max-connections = 3", 3),
        ({}, {"ACP_RELAY_MAX_CONNECTIONS": "2"}, "max-connections = 3", 2),
        ({"max_connections": "1"}, {"ACP_RELAY_MAX_CONNECTIONS": "2"}, "max-connections = 3", 1),
        ({"max_connections": None}, {"ACP_RELAY_MAX_CONNECTIONS": ""}, "max-connections = 3", 3),
    ],
)
def test_precedence_scalar(
    flags: dict[str, object], env: dict[str, str], toml: str | None, expected: int
) -> None:
    """A scalar comes from flag, else env, else file, else default; None/empty mean unset."""
    assert settle(flags, env, toml).max_connections == expected


FILE_ORIGINS = 'allow-origin = ["https://file.example", "https://file2.example"]'


@pytest.mark.parametrize(
    ("flags", "env", "toml", "expected"),
    [
        ({}, {}, None, ()),
        ({}, {}, FILE_ORIGINS, ("https://file.example", "https://file2.example")),
        (
            {},
            {"ACP_RELAY_ALLOW_ORIGIN": "https://env.example"},
            FILE_ORIGINS,
            ("https://env.example",),
        ),
        (
            {"allow_origin": ["https://flag.example"]},
            {"ACP_RELAY_ALLOW_ORIGIN": "https://env.example"},
            FILE_ORIGINS,
            ("https://flag.example",),
        ),
        ({}, {}, "allow-origin = []", ()),
    ],
)
def test_precedence_repeatable(
    flags: dict[str, object], env: dict[str, str], toml: str | None, expected: tuple[str, ...]
) -> None:
    """A repeatable option's higher layer replaces the lower ones wholesale."""
    assert settle(flags, env, toml).allow_origins == expected


@pytest.mark.parametrize(
    ("env_name", "text", "field", "expected"),
    [
        ("LISTEN", "0.0.0.0:0", "port", 0),
        ("LISTEN", "[::1]:9000", "host", "::1"),
        ("PATH", "/ws/acp", "path", "/ws/acp"),
        ("AGENT", "my-agent --acp 'two words'", "agent_argv", ("my-agent", "--acp", "two words")),
        ("AGENT", "echo $HOME;rm", "agent_argv", ("echo", "$HOME;rm")),
        ("WORKSPACE", "proj", "workspace", "/srv/here/proj"),
        ("WORKSPACE", "/abs/dir", "workspace", "/abs/dir"),
        ("AGENT_ENV", 'A=1 "B=x y" C=', "agent_env", (("A", "1"), ("B", "x y"), ("C", ""))),
        ("AGENT_ENV", "_X=a=b", "agent_env", (("_X", "a=b"),)),
        ("SECRET_FILE", "keys.txt", "secret_file", "/srv/here/keys.txt"),
        ("ALLOW_ORIGIN", "* https://a.example", "allow_origins", ("*", "https://a.example")),
        ("MAX_CONNECTIONS", "7", "max_connections", 7),
        ("MAX_MESSAGE_BYTES", "16MiB", "max_message_bytes", 16 * 1024 * 1024),
        ("PING_INTERVAL", "0.5", "ping_interval", 0.5),
        ("PING_TIMEOUT", "30", "ping_timeout", 30.0),
        ("KILL_GRACE", "0", "kill_grace", 0.0),
        ("TICKET_TTL", "120", "ticket_ttl", 120.0),
        ("AUDIENCE", "relay.example", "audience", "relay.example"),
        ("OPEN_TIMEOUT", "2.5", "open_timeout", 2.5),
        ("LOG_FORMAT", "JSON", "log_format", "json"),
        ("LOG_FORMAT", "console", "log_format", "console"),
        ("LOG_FORMAT", "auto", "log_format", None),
        ("LOG_LEVEL", "DEBUG", "log_level", "debug"),
        ("LOG_LEVEL", "Warning", "log_level", "warning"),
        ("DEV", "1", "dev", True),
        ("DEV", "Yes", "dev", True),
        ("DEV", "ON", "dev", True),
        ("DEV", "true", "dev", True),
        ("DEV", "0", "dev", False),
        ("DEV", "off", "dev", False),
        ("DEV", "NO", "dev", False),
        ("DEV", "False", "dev", False),
        ("FILES", "shared", "files", "shared"),
        ("FILES", "PASS", "files", "pass"),
    ],
)
def test_env_values(env_name: str, text: str, field: str, expected: object) -> None:
    """Each option parses its environment form into the typed setting."""
    assert getattr(settle(env={f"ACP_RELAY_{env_name}": text}), field) == expected


@pytest.mark.parametrize(
    ("env", "expected"), [({}, Files.BOX), ({"ACP_RELAY_FILES": "Pass"}, Files.PASS)]
)
def test_the_files_policy_is_parsed_once_into_its_enum(
    env: dict[str, str], expected: Files
) -> None:
    """--files (its default too) is resolved to a Files member, which the boundary carries."""
    assert settle(env=env).files is expected


@pytest.mark.parametrize(
    ("toml", "field", "expected"),
    [
        ('listen = "localhost:1234"', "port", 1234),
        ('agent = ["my agent", "--flag"]', "agent_argv", ("my agent", "--flag")),
        ('agent = "my-agent --flag"', "agent_argv", ("my-agent", "--flag")),
        ('agent_env = ["A=1", "B=two words"]', "agent_env", (("A", "1"), ("B", "two words"))),
        ("max_message_bytes = 1024", "max_message_bytes", 1024),
        ('max-message-bytes = "2KiB"', "max_message_bytes", 2048),
        ("ping-interval = 5", "ping_interval", 5.0),
        ("ping-interval = 0.25", "ping_interval", 0.25),
        ('max-connections = "9"', "max_connections", 9),
        ("dev = true", "dev", True),
        ('log-level = "ERROR"', "log_level", "error"),
        ('workspace = "rel"', "workspace", "/srv/here/rel"),
        ('files = "pass"', "files", "pass"),
    ],
)
def test_file_values(toml: str, field: str, expected: object) -> None:
    """Config file keys take TOML types, dashed or underscored names."""
    assert getattr(settle(toml=toml), field) == expected


def test_config_file_recorded() -> None:
    """Settings remember which config file was loaded, and only if one was."""
    assert settle(toml="").config_file == "relay.toml"
    assert settle().config_file is None


def test_secret_env_is_kept_raw() -> None:
    """The secret comes only from ACP_RELAY_SECRET, as raw text; empty means unset."""
    assert settle(env={"ACP_RELAY_SECRET": " s1\ns2 "}).secret_env == " s1\ns2 "
    assert settle(env={"ACP_RELAY_SECRET": ""}).secret_env is None
    assert settle(flags={"secret": "leak"}).secret_env is None


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("listen", "8765", "no port"),
        ("listen", "::1:8765", "IPv6 addresses need brackets"),
        ("path", "acp", "must start with /"),
        ("agent", "   ", "agent command is empty"),
        ("agent", "'unclosed", "cannot split"),
        ("workspace", "", "must not be empty"),
        ("agent-env", "NOEQUALS", "bad entry 'NOEQUALS'"),
        ("agent-env", "=x", "bad entry '=x'"),
        ("agent-env", "1A=x", "bad entry '1A=x'"),
        ("agent-env", "A-B=x", "bad entry 'A-B=x'"),
        ("allow-origin", "https://a.example/", "no path"),
        ("max-connections", "0", "must be at least 1"),
        ("max-connections", "1.5", "whole number"),
        ("max-connections", "lots", "whole number"),
        ("max-message-bytes", "16MB", "KiB, MiB or GiB"),
        ("ping-interval", "0", "greater than 0"),
        ("ping-timeout", "-1", "greater than 0"),
        ("ping-timeout", "soon", "number of seconds"),
        ("ticket-ttl", "inf", "finite"),
        ("open-timeout", "nan", "finite"),
        ("kill-grace", "-0.1", "0 or more"),
        ("resume-grace", "604801", "at most 604800 s (a week)"),
        ("resume-buffer", "1025GiB", "at most 1099511627776 bytes (1TiB)"),
        ("audience", " ", "must not be empty"),
        ("log-format", "xml", "json, console, auto"),
        ("log-level", "verbose", "debug, info, warning, error"),
        ("dev", "maybe", "1/true/yes/on"),
        ("files", "editor", "box, shared, pass"),
    ],
)
def test_errors_name_source_and_problem(name: str, value: str, problem: str) -> None:
    """A bad value from flag, env or file fails with its source and the problem."""
    dest, env_name = name.replace("-", "_"), "ACP_RELAY_" + name.replace("-", "_").upper()
    flag_value: object = [value] if name in ("agent-env", "allow-origin") else value
    toml_value = f"[{value!r}]" if name in ("agent-env", "allow-origin") else repr(value)
    cases = [
        (error_of(flags={dest: flag_value}), f"flag --{name}: "),
        (error_of(env={env_name: value}), f"env {env_name}: ") if value else None,
        (error_of(toml=f"{name} = {toml_value}"), f"config file key {name} in relay.toml: "),
    ]
    for case in filter(None, cases):
        message, source = case
        assert message.startswith(source)
        assert problem in message


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ("max-connections = true", "whole number"),
        ("max-connections = 2.0", "whole number"),
        ("ping-interval = true", "number of seconds"),
        ('dev = "sometimes"', "1/true/yes/on"),
        ("path = 5", "expected a string"),
        ('allow-origin = "https://a.example"', "array of strings"),
        ("agent-env = [1, 2]", "array of strings"),
        ("agent = []", "agent command is empty"),
        ("max-message-bytes = 0", "at least 1 byte"),
        ("max-message-bytes = [1]", "size such as 16MiB"),
    ],
)
def test_file_type_errors(toml: str, problem: str) -> None:
    """Wrong TOML types are refused with the key, file and expected type."""
    message = error_of(toml=toml)
    assert message.startswith("config file key ")
    assert "relay.toml" in message
    assert problem in message


def test_env_shell_split_error() -> None:
    """A repeatable env value that does not split like a shell names the variable."""
    message = error_of(env={"ACP_RELAY_AGENT_ENV": "A='x"})
    assert message.startswith("env ACP_RELAY_AGENT_ENV: cannot split")


@pytest.mark.parametrize(
    ("toml", "parts"),
    [
        (
            "max-conections = 3",
            [
                "unknown key 'max-conections'",
                "did you mean 'max-connections'",
                "valid keys: listen",
            ],
        ),
        (
            "[serve]\nlisten = '1:1'",
            [
                "'serve' is a table ([serve] or serve.NAME = ...), but the file has none: "
                "each option is a key at the top level, above any [section] line, named like "
                'its flag without the dashes, e.g. listen = "127.0.0.1:8765"'
            ],
        ),
        ("serve.listen = '1:1'", ["'serve' is a table"]),
        ("[agent]\nx = 1", ["'agent' is a table"]),
        ("secret = 'x'", ["key 'secret' is not allowed", "ACP_RELAY_SECRET", "secret-file"]),
        ("max-connections = 3\nmax_connections = 4", ["max-connections is given twice"]),
        ("listen = \n", ["config file relay.toml: invalid TOML", "line 1"]),
        ("a = 1\nb = = 2\nc = 3", ["config file relay.toml: invalid TOML", "line 2"]),
    ],
)
def test_file_structure_errors(toml: str, parts: list[str]) -> None:
    """Unknown keys, the secret, duplicates and bad syntax are refused with file and line."""
    message = error_of(toml=toml)
    for part in parts:
        assert part in message


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ("allow-origin = " + "[" * 9 + "'x'" + "]" * 9, "arrays or tables more than 8 levels"),
        ("allow-origin = " + "[" * 5_000 + "]" * 5_000, "arrays or tables more than 8 levels"),
        ("agent = " + "{a = " * 5_000 + "1" + "}" * 5_000, "arrays or tables more than 8 levels"),
        ("[agent" + ".a" * 4_000 + "]", "arrays or tables more than 8 levels"),
        ("agent" + ".a" * 4_097 + " = 1", "4097 dots, at most 4096: dotted keys make tables"),
        ("agent" + ".a" * 500_000 + " = 1", "500000 dots, at most 4096"),
    ],
    ids=["one past", "deep array", "deep inline table", "table header", "dots", "many dots"],
)
def test_a_file_nested_too_deeply_is_refused(toml: str, said: str) -> None:
    """A config file nested deeper than any option's value is refused, saying so (never a
    RecursionError, whether in the parser or in the message about a value); so is one with
    more dots than any such file holds, before parsing (a long dotted key costs the parser
    the square of its length)."""
    assert error_of(toml=toml).startswith(f"config file relay.toml: nested too deeply ({said}")


def test_dots_in_values_count_too_but_a_file_may_hold_many() -> None:
    """Up to MAX_CONFIG_DOTS dots, wherever they are, the file is parsed as usual."""
    dotted = "." * MAX_CONFIG_DOTS
    assert settle(toml=f"agent = 'run {dotted}'").agent_argv == ("run", dotted)


def test_a_file_at_the_nesting_limit_is_read_as_usual() -> None:
    """Nesting up to the limit is no error of its own: the value's converter judges it."""
    toml = "allow-origin = " + "[" * (MAX_CONFIG_DEPTH - 1) + "'x'" + "]" * (MAX_CONFIG_DEPTH - 1)
    assert "expected an array of strings" in error_of(toml=toml)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("one", ("one",)),
        ("  first  \n\nsecond\n", ("first", "second")),
        ("# comment\nkey#with-hash\n   # indented comment\n\tlast\t", ("key#with-hash", "last")),
        ("new\r\nold\r\n", ("new", "old")),
    ],
)
def test_parse_secrets(text: str, expected: tuple[str, ...]) -> None:
    """Secrets are stripped non-blank, non-comment lines, in order (first signs)."""
    assert parse_secrets(text) == expected


@pytest.mark.parametrize("text", ["", "\n  \n", "# only a comment\n"])
def test_parse_secrets_none(text: str) -> None:
    """A secret text with no secret in it is a ConfigError naming its source."""
    with pytest.raises(ConfigError, match=r"^secret file /run/s: no secret found"):
        parse_secrets(text, source="secret file /run/s")


def test_agent_environment() -> None:
    """The agent gets the relay's environment minus ACP_RELAY_* and systemd's credentials
    folder, plus agent-env on top."""
    base = {
        "PATH": "/usr/bin",
        "CREDENTIALS_DIRECTORY": "/run/credentials/acp-relay.service",
        "HOME": "/home/u",
        "ACP_RELAY_SECRET": "s3cret",
        "ACP_RELAY_CONFIG": "/etc/relay.toml",
        "ACP_RELAY_LISTEN": "0.0.0.0:1",
        "acp_relay_secret": "lower",
        "ACP_RELAYED": "kept",
    }
    result = agent_environment(base, [("HOME", "/work"), ("EXTRA", "1")])
    assert result == {"PATH": "/usr/bin", "HOME": "/work", "ACP_RELAYED": "kept", "EXTRA": "1"}
    assert base["ACP_RELAY_SECRET"] == "s3cret"


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ({}, {}, None),
        ({"config": "a.toml"}, {"ACP_RELAY_CONFIG": "b.toml"}, "a.toml"),
        ({}, {"ACP_RELAY_CONFIG": "b.toml"}, "b.toml"),
        ({}, {"ACP_RELAY_CONFIG": ""}, None),
    ],
)
def test_config_file_path(
    flags: dict[str, object], env: dict[str, str], expected: str | None
) -> None:
    """--config wins over ACP_RELAY_CONFIG; neither means no file."""
    assert config_file_path(flags, env) == expected


def test_unknown_env_names() -> None:
    """ACP_RELAY_* variables matching no option are reported, sorted, for a warning."""
    env = {"ACP_RELAY_MAX_CONECTIONS": "1", "ACP_RELAY_SECRET": "s", "ACP_RELAY_DEV": "1", "X": "1"}
    assert unknown_env_names(env) == ("ACP_RELAY_MAX_CONECTIONS",)


@pytest.mark.parametrize(
    ("argv", "field", "expected"),
    [
        (["--listen", "[::1]:0"], "host", "::1"),
        (["--agent", "my-agent --acp"], "agent_argv", ("my-agent", "--acp")),
        (["--agent-env", "A=1", "--agent-env", "B=2"], "agent_env", (("A", "1"), ("B", "2"))),
        (["--allow-origin", "https://x.example"], "allow_origins", ("https://x.example",)),
        (["--max-message-bytes", "1KiB"], "max_message_bytes", 1024),
        (["--dev"], "dev", True),
        ([], "dev", True),
        (["--dev-allow-remote"], "dev_allow_remote", True),
        ([], "dev_allow_remote", False),
        (["--log-level", "error"], "log_level", "error"),
        ([], "log_level", "warning"),
    ],
)
def test_argparse_round_trip(argv: list[str], field: str, expected: object) -> None:
    """Real argparse flags fed through vars() override env, and absent flags do not."""
    env = {"ACP_RELAY_DEV": "yes", "ACP_RELAY_LOG_LEVEL": "warning", "ACP_RELAY_AGENT_ENV": "Z=9"}
    flags = vars(parser().parse_args(argv))
    assert getattr(resolve(flags, env, None, cwd=CWD), field) == expected


def test_argparse_only_given_flags() -> None:
    """Flags not on the command line are absent from the namespace."""
    assert vars(parser().parse_args(["--config", "c.toml", "--dev"])) == {
        "config": "c.toml",
        "dev": True,
    }


def test_argparse_config_flag_names_file() -> None:
    """--config from argv names the file in Settings and in error messages."""
    flags = vars(parser().parse_args(["--config", "c.toml"]))
    settings = resolve(flags, {}, "path = '/x'", cwd=CWD)
    assert (settings.config_file, settings.path) == ("c.toml", "/x")
    with pytest.raises(ConfigError, match=r"^config file key path in c\.toml: must start"):
        resolve(flags, {}, "path = 'x'", cwd=CWD)


def test_help_mentions_env_and_defaults() -> None:
    """--help lists every option's flag, env variable and default, plus the secret's env."""
    text = " ".join(parser().format_help().split())
    for option in OPTIONS:
        assert option.flag in text
        assert f"env {option.env}" in text
    for default in [
        "127.0.0.1:8765",
        "/acp",
        "default: 64;",
        "64MiB",
        "default: 20;",
        "default: 3;",
    ]:
        assert default in text
    for default in ["default: 60;", "default: 10;", "default: info;", "default: off;"]:
        assert default in text
    assert "ACP_RELAY_CONFIG" in text
    assert "env ACP_RELAY_SECRET " in text


def test_help_wording_example() -> None:
    """The help of max-connections reads as documented."""
    option = next(o for o in OPTIONS if o.name == "max-connections")
    assert option.help_text() == "max sockets at once (default: 64; env ACP_RELAY_MAX_CONNECTIONS)"


def test_settings_has_one_field_per_option() -> None:
    """Settings is built from the option table: one field per option, listen as host and port."""
    fields = {f.name for f in dataclasses.fields(Settings)}
    from_options = {o.field for o in OPTIONS if o.name != "listen"}
    assert fields == from_options | {
        "host",
        "port",
        "secret_env",
        "config_file",
        "given",
        "workspace_given",
    }


def test_relative_paths_are_taken_against_cwd() -> None:
    """Every path option, and only those, is made absolute against the working directory."""
    env = {"ACP_RELAY_" + o.dest.upper(): "rel" for o in OPTIONS if o.is_path}
    settings = settle(env=env)
    assert {o.field for o in OPTIONS if o.is_path} == {
        "workspace",
        "secret_file",
        "mcp_servers",
        "trace_dir",
        "state_dir",
    }
    for o in OPTIONS:
        if o.is_path:
            assert getattr(settings, o.field) == "/srv/here/rel"


def test_resolve_option_alone() -> None:
    """One option resolves by itself: flag, else env, else default, errors naming the source."""
    secret_file = option_named("secret-file")
    env = {"ACP_RELAY_SECRET_FILE": "env.txt"}
    assert resolve_option(secret_file, {"secret_file": "flag.txt"}, env) == "flag.txt"
    assert resolve_option(secret_file, {}, env) == "env.txt"
    assert resolve_option(secret_file, {}, {}) is None
    with pytest.raises(ConfigError, match=r"^flag --secret-file: must not be empty"):
        resolve_option(secret_file, {"secret_file": " "}, {})


FLAG_ONLY = (
    Option("wait", "seconds to wait", 2.5, "SECONDS", convert.positive_seconds, layered=False),
    Option("tag", "a tag", (), "TAG", convert.non_empty, repeatable=True, layered=False),
    Option("name", "a name", None, "NAME", convert.text, layered=False),
)


def flag_only_parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(prog="acp-relay test", exit_on_error=False)
    add_options(result, FLAG_ONLY)
    return result


def test_flag_only_options_are_converted_by_argparse() -> None:
    """A flag-only option gets its converted default and its flags' converted values."""
    assert vars(flag_only_parser().parse_args([])) == {"wait": 2.5, "tag": [], "name": None}
    args = flag_only_parser().parse_args(["--wait", "1", "--tag", "a", "--tag", "b"])
    assert (args.wait, args.tag) == (1.0, ["a", "b"])


def test_flag_only_option_errors_are_argparse_errors() -> None:
    """A bad flag-only value is an argparse error naming the argument and the problem."""
    with pytest.raises(argparse.ArgumentError) as info:
        flag_only_parser().parse_args(["--wait", "0"])
    assert str(info.value).startswith("argument --wait: expected seconds greater than 0")


def test_flag_only_help_has_no_env() -> None:
    """A flag-only option's help shows its default (when it has one) but no variable."""
    wait, tag, name = FLAG_ONLY
    assert wait.help_text() == "seconds to wait (default: 2.5)"
    assert tag.help_text() == "a tag (repeatable; default: none)"
    assert name.help_text() == "a name"


def documented_table(name: str) -> str:
    """The options table of docs/configuration.md between its markers for ``name``."""
    text = DOCS.read_text()
    found = re.search(
        rf"<!-- options table: {name};[^\n]*-->\n(.*?)<!-- end of options table -->", text, re.S
    )
    assert found, f"no options table for {name} in {DOCS}"
    return found[1]


def test_help_groups_the_options_by_concern() -> None:
    """--help lists serve's options in groups, each under its title, every option in one."""
    text = parser().format_help()
    titles = [title for title, _ in GROUPS]
    assert titles == ["listening", "tickets and admission", "the agent", "paths and MCP",
                      "resuming", "sharing", "warm agents", "limits", "observability",
                      "dev"]  # fmt: skip
    sections = re.split(rf"^({'|'.join(map(re.escape, titles))}):$", text, flags=re.M)
    listed = dict(zip(sections[1::2], sections[2::2], strict=True))
    assert list(listed) == titles
    for title, options in GROUPS:
        flags = re.findall(r"^  (--[a-z-]+)", listed[title], re.M)
        assert flags == [o.flag for o in options], title
    assert [o for _, options in GROUPS for o in options] == list(OPTIONS)


def test_settings_given_say_their_value_and_where_each_came_from() -> None:
    """Each setting given by a flag, the environment or the config file is listed with its
    value in effect and its source; defaults are not; the secret by its source only, and
    --agent-env by its names only (values there are keys)."""
    flags = vars(parser().parse_args(
        ["--config", "relay.toml", "--listen", "127.0.0.1:0", "--agent-env", "KEY=sk-live-1",
         "--max-connections", "3"]
    ))  # fmt: skip
    env = {"ACP_RELAY_SECRET": "hunter2-hunter2-hunter2", "ACP_RELAY_LOG_LEVEL": "debug",
           "ACP_RELAY_SECRET_FILE": "s.txt", "ACP_RELAY_MAX_CONNECTIONS": "9"}  # fmt: skip
    toml = 'max-connections = 8\ncwd-map = ["/Users/a=/w"]\nagent = "my-agent --acp"\n'
    given = settings_given(resolve(flags, env, toml, cwd=CWD))
    in_file = "config file key {} in relay.toml"
    assert given == {
        "config": {"value": "relay.toml", "from": "flag --config"},
        "listen": {"value": "127.0.0.1:0", "from": "flag --listen"},
        "secret": {"from": "env ACP_RELAY_SECRET"},
        "secret-file": {"value": f"{CWD}/s.txt", "from": "env ACP_RELAY_SECRET_FILE"},
        "agent": {"value": "my-agent --acp", "from": in_file.format("agent")},
        "agent-env": {"value": ["KEY"], "from": "flag --agent-env"},
        "cwd-map": {"value": ["/Users/a=/w"], "from": in_file.format("cwd-map")},
        "max-connections": {"value": 3, "from": "flag --max-connections"},
        "log-level": {"value": "debug", "from": "env ACP_RELAY_LOG_LEVEL"},
    }
    assert "hunter2" not in repr(given)
    assert "sk-live" not in repr(given)
    assert settings_given(settle()) == {}


def test_resolve_some_layers_a_few_options_like_resolve() -> None:
    """A few of serve's options resolve as serve would: flag, env, file, default; paths made
    absolute; the file's keys checked (for `acp-relay ticket`)."""
    options = [option_named(n) for n in ("secret-file", "audience", "ticket-ttl")]
    toml = 'secret-file = "s.txt"\naudience = "file-aud"\nticket-ttl = 90\nlisten = "x:1"\n'
    found = resolve_some(options, {}, {"ACP_RELAY_AUDIENCE": "env-aud"}, toml, cwd=CWD)
    assert found == {"secret_file": f"{CWD}/s.txt", "audience": "env-aud", "ticket_ttl": 90.0}
    assert resolve_some(options, {"audience": "flag"}, {}, None, cwd=CWD) == {
        "secret_file": None,
        "audience": "flag",
        "ticket_ttl": 60.0,
    }
    with pytest.raises(ConfigError, match="unknown key 'audiense'"):
        resolve_some(options, {}, {}, 'audiense = "x"\n', cwd=CWD, file_name="r.toml")
