"""Tests for relay.config: layering, parsing, errors, origins, secrets, argparse."""

from __future__ import annotations

import argparse

import pytest

from relay.config import (
    OPTIONS,
    ConfigError,
    Settings,
    add_serve_arguments,
    agent_environment,
    check_origin_pattern,
    config_file_path,
    origin_allowed,
    parse_listen,
    parse_secrets,
    parse_size,
    resolve,
    unknown_env_names,
)

CWD = "/srv/here"


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
    )


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
    ],
)
def test_env_values(env_name: str, text: str, field: str, expected: object) -> None:
    """Each option parses its environment form into the typed setting."""
    assert getattr(settle(env={f"ACP_RELAY_{env_name}": text}), field) == expected


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
        ("audience", " ", "must not be empty"),
        ("log-format", "xml", "json, console, auto"),
        ("log-level", "verbose", "debug, info, warning, error"),
        ("dev", "maybe", "1/true/yes/on"),
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
        ("[serve]\nlisten = '1:1'", ["unknown key 'serve'", "ticket-ttl"]),
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
    ("text", "expected"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("localhost:0", ("localhost", 0)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
        ("relay.internal.example:443", ("relay.internal.example", 443)),
        ("[::1]:8765", ("::1", 8765)),
        ("[::]:80", ("::", 80)),
        ("[0:0:0:0:0:0:0:1]:1", ("::1", 1)),
    ],
)
def test_listen_forms(text: str, expected: tuple[str, int]) -> None:
    """HOST:PORT parses, IPv6 in brackets comes back without them, port 0 allowed."""
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("8765", "no port"),
        ("[::1]", "no port"),
        ("::1:8765", "IPv6 addresses need brackets"),
        (":8765", "no host"),
        ("host:", "port must be a number"),
        ("host:65536", "port must be a number"),
        ("host:-1", "port must be a number"),
        ("host:http", "port must be a number"),
        ("[nope]:1", "not an IPv6 address"),
        ("ho st:1", "not a host name"),
        ("999.1.1.1:80", "not a host name"),
        ("-bad-:80", "not a host name"),
    ],
)
def test_listen_errors(text: str, problem: str) -> None:
    """Malformed listen addresses are refused with the reason and the expected form."""
    with pytest.raises(ValueError, match="expected HOST:PORT") as info:
        parse_listen(text)
    assert problem in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", 1),
        (" 1024 ", 1024),
        (4096, 4096),
        ("1KiB", 1024),
        ("16MiB", 16 * 1024**2),
        ("16 mib", 16 * 1024**2),
        ("2GiB", 2 * 1024**3),
        ("67108864", 67108864),
    ],
)
def test_sizes(text: str | int, expected: int) -> None:
    """Sizes are plain byte counts or whole numbers with a KiB/MiB/GiB suffix."""
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "MiB", "1.5MiB", "16MB", "16K", "-1", "0", "0KiB", "ten", True]
)
def test_bad_sizes(text: str | int) -> None:
    """Sizes that are not positive whole KiB/MiB/GiB amounts are refused."""
    with pytest.raises(ValueError, match=r"16MiB|at least 1 byte"):
        parse_size(text)


@pytest.mark.parametrize(
    "pattern",
    [
        "*",
        "https://app.example.com",
        "http://localhost:3000",
        "https://*.example.com",
        "HTTPS://App.Example.COM:8443",
        "http://127.0.0.1:8080",
        "http://[::1]:3000",
        "chrome-extension://abcdef",
    ],
)
def test_valid_origin_patterns(pattern: str) -> None:
    """Well-formed origins and wildcard patterns are accepted unchanged."""
    assert check_origin_pattern(pattern) == pattern


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("https://app.example.com/", "no path"),
        ("https://app.example.com/x", "no path"),
        ("app.example.com", "scheme://host"),
        ("null", "scheme://host"),
        ("https://", "not a valid host"),
        ("https://a*.example.com", "whole first label"),
        ("https://a.*.example.com", "whole first label"),
        ("https://*", "whole first label"),
        ("https://*.com", "at least two labels"),
        ("https://example.com:0", "port must be"),
        ("https://example.com:99999", "port must be"),
        ("https://user@example.com", "no path, query, user"),
        ("https://[::1", "unclosed ["),
        ("https://exa mple.com", "not a valid host"),
        ("1http://example.com", "scheme://host"),
    ],
)
def test_invalid_origin_patterns(pattern: str, problem: str) -> None:
    """Malformed allow-origin values are refused with the reason and examples."""
    with pytest.raises(ValueError, match=r"write it like https://app\.example\.com") as info:
        check_origin_pattern(pattern)
    assert problem in str(info.value)


WILD = ["https://*.example.com"]


@pytest.mark.parametrize(
    ("origin", "patterns", "allowed"),
    [
        ("https://app.example.com", ["https://app.example.com"], True),
        ("HTTPS://APP.Example.com", ["https://app.example.com"], True),
        ("https://app.example.com", ["HTTPS://APP.EXAMPLE.COM"], True),
        ("http://app.example.com", ["https://app.example.com"], False),
        ("https://other.example.com", ["https://app.example.com"], False),
        ("https://app.example.com:443", ["https://app.example.com"], True),
        ("https://app.example.com", ["https://app.example.com:443"], True),
        ("http://app.example.com:80", ["http://app.example.com"], True),
        ("https://app.example.com:8443", ["https://app.example.com"], False),
        ("https://app.example.com", ["https://app.example.com:8443"], False),
        ("http://localhost:3000", ["http://localhost:3000"], True),
        ("http://localhost:3001", ["http://localhost:3000"], False),
        ("https://a.example.com", WILD, True),
        ("https://a.b.example.com", WILD, True),
        ("https://example.com", WILD, False),
        ("https://evil-example.com", WILD, False),
        ("https://a.example.com.evil.net", WILD, False),
        ("https://aexample.com", WILD, False),
        ("http://a.example.com", WILD, False),
        ("https://a.example.com:444", WILD, False),
        ("https://*.example.com", WILD, False),
        ("https://app.example.com", ["*"], True),
        ("null", ["*"], True),
        ("null", ["https://app.example.com"], False),
        ("https://app.example.com/", ["https://app.example.com"], False),
        ("", ["https://app.example.com"], False),
        ("https://b.example.org", ["https://a.example.org", "https://b.example.org"], True),
        ("http://localhost:3000", [], True),
        ("http://LOCALHOST", [], True),
        ("https://127.0.0.1:8443", [], True),
        ("http://127.9.9.9", [], True),
        ("http://[::1]:5173", [], True),
        ("http://localhost.evil.net", [], False),
        ("http://10.0.0.1", [], False),
        ("https://app.example.com", [], False),
        ("null", [], False),
        ("http://localhost:3000", ["https://app.example.com"], False),
    ],
)
def test_origin_allowed(origin: str, patterns: list[str], allowed: bool) -> None:
    """Origins match exactly or by a leading '*' label; with no patterns only loopback."""
    assert origin_allowed(origin, patterns) is allowed


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
