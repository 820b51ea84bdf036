"""``acp-relay chat``: a Matrix bot that runs agent sessions in threads of a team's rooms.

Resolves the options (flag > ``ACP_RELAY_*`` > ``--config`` file > default:
:mod:`relay.config.chatoptions`), the relay's URL and dialing flags as ``connect`` takes
them (:mod:`relay.commands.dialflags`), reads the access token from its file or
``ACP_RELAY_MATRIX_TOKEN`` (never from a flag, never logged), opens the state file, checks
the token against ``--user``, then runs the bot (:mod:`relay.client.chatbot.bot`) until
SIGTERM or SIGINT, which keep every thread's connection for the next start to resume.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import stat
from collections.abc import Mapping
from typing import TYPE_CHECKING

import uvloop

from relay.chat.access import Access
from relay.chat.limits import Limits
from relay.chat.rules import RuleError, policy_from
from relay.commands.dialflags import dial_config
from relay.config import convert, defaults
from relay.config.chatoptions import (
    BOXES_URL,
    OPTIONS,
    PICKLE_ENV,
    RULES_KEY,
    TOKEN_ENV,
    resolve_chat,
)
from relay.config.dialoptions import DIALING
from relay.config.errors import UsageError
from relay.config.options import Option, add_options
from relay.core.redaction import Redactor
from relay.observe import logs
from relay.streams.filereader import read_named

if TYPE_CHECKING:
    from relay.client.chatbot.botconfig import ChatConfig

CHAT_EXTRA = ("mautrix", "aiohttp", "yarl", "multidict")  # what `pip install acp-relay[chat]` adds
E2EE_EXTRA = ("olm", "aiosqlite", "asyncpg", "Crypto", "unpaddedbase64", "base58")  # chat-e2ee

LOGGING: tuple[Option, ...] = (
    Option(
        "log-format",
        "log format on stderr: json, console or auto",
        "auto",
        "FORMAT",
        convert.log_format,
        default_text="auto: console on a terminal, else json",
        layered=False,
    ),
    Option(
        "log-level",
        "log level: debug, info, warning or error",
        defaults.LOG_LEVEL,
        "LEVEL",
        convert.log_level,
        layered=False,
    ),
)


ALL_OPTIONS = (*OPTIONS, *DIALING, *LOGGING)  # as --help and docs/configuration.md list them


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``chat`` subcommand."""
    parser = commands.add_parser(
        "chat",
        allow_abbrev=False,  # --token must not be taken for --token-file: no token in a flag
        help="a Matrix bot: agent sessions in threads, permission requests answered there",
        description="Serve the given Matrix rooms: a message that mentions the bot opens a "
        "thread with one relay connection (to URL) and one ACP session; each reply in the "
        "thread is the next prompt (!cancel cancels the turn, !end ends the session). The "
        "agent's permission requests are answered by an approver's keycap reaction. The "
        "state file keeps every thread across restarts.",
    )
    parser.add_argument(
        "url",
        metavar="URL",
        nargs="?",
        default=None,
        help="the relay's endpoint, ws:// or wss:// (none with --connect-command)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help=f"TOML file of these options, keys named like the flags (env {defaults.CONFIG_ENV})",
    )
    add_options(parser, ALL_OPTIONS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the bot until SIGTERM or SIGINT."""
    config, token = chat_config(args, os.environ)
    redacting = Redactor()
    redacting.add_secret(token)
    if config.pickle_key is not None:
        redacting.add_secret(config.pickle_key)
    logs.configure(args.log_level, args.log_format, redacting=redacting)
    from relay.client.chatbot.run import run_chat  # the bot's libraries, once the flags are good

    return uvloop.run(run_chat(config, _stop_on_signals))


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


def chat_config(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[ChatConfig, str]:
    """The bot's configuration and its access token; UsageError saying the fix."""
    try:
        from relay.client.chatbot import bot  # noqa: F401  mautrix and aiohttp: only to run
        from relay.client.chatbot.botconfig import ChatConfig
    except ModuleNotFoundError as exc:
        error = _missing(exc, CHAT_EXTRA, "acp-relay chat needs", "chat")
        if error is None:
            raise
        raise error from None

    path = args.config or env.get(defaults.CONFIG_ENV) or None
    text = read_named(path, "--config") if path else None
    values = resolve_chat(OPTIONS, vars(args), env, text, cwd=os.getcwd(), file_name=path)
    token = _token(values["token_file"], env)
    pickle_key = _pickle_key(values["pickle_key_file"], env)
    if pickle_key is not None:
        _e2ee_installed()
    connect_command = values["connect_command"]
    if connect_command is not None:
        if values["ticket_command"] is not None or values["ticket_file"] is not None:
            raise UsageError(
                "--connect-command prints the ticket too: give no --ticket-command "
                "or --ticket-file with it"
            )
        values["ticket_command"] = shlex.join(connect_command)  # for the dialing flags' checks
    elif values["ticket_command"] is None and values["ticket_file"] is None:
        raise UsageError(
            "acp-relay chat opens a connection per thread and resumes it: give "
            "--ticket-command CMD (or --ticket-file FILE) for a fresh ticket each time, or "
            "--connect-command CMD"
        )
    if args.url is None and connect_command is None:
        raise UsageError("give the relay's URL (ws:// or wss://), or --connect-command")
    url = args.url or BOXES_URL
    dial_args = argparse.Namespace(
        **{
            **vars(args),
            "url": url,
            "ticket": None,
            "ticket_command": values["ticket_command"],
            "ticket_file": values["ticket_file"],
        }
    )
    dial = dial_config(dial_args, {})
    access = Access(
        approvers=frozenset(values["approver"]),
        approver_level=values["approver_level"],
        prompters=frozenset(values["prompter"]) if values["prompter"] else None,
        prompter_level=values["prompter_level"],
        share_by=values["share_by"],
    )
    if not access.approvers and access.approver_level is None:
        raise UsageError(
            "nobody could answer a permission request: give --approver USER_ID "
            "or --approver-level LEVEL"
        )
    try:
        policy = policy_from(
            values[RULES_KEY],
            access,
            timeout=values["approval_timeout"],
            escalate_after=values["escalate_after"],
            escalate_to=frozenset(values["escalate_to"]),
            remind_after=values["remind_after"],
        )
    except RuleError as exc:
        where = f"config file {path}: " if path and str(exc).startswith("[[rule]]") else ""
        raise UsageError(f"{where}{exc}") from None
    config = ChatConfig(
        homeserver=values["homeserver"],
        user=values["user"],
        token=token,
        rooms=frozenset(values["room"]),
        access=access,
        dial=dial,
        cwd=values["cwd"] or os.getcwd(),
        state=values["state"],
        thoughts=values["thoughts"],
        policy=policy,
        watch_ticket_command=values["watch_ticket_command"],
        connect_command=connect_command,
        limits=Limits(
            values["max_threads"], values["max_threads_per_person"], values["idle_timeout"]
        ),
        keep_ended_days=values["keep_ended"],
        audit_retention_days=values["audit_retention"],
        max_attachment_bytes=values["max_attachment_bytes"],
        pickle_key=pickle_key,
        crypto_state=values["crypto_state"] or f"{values['state']}-crypto",
    )
    return config, token


def _token(token_file: str | None, env: Mapping[str, str]) -> str:
    token, where = _secret(token_file, "--token-file", env, TOKEN_ENV, "the bot's access token")
    if not token:
        raise UsageError(
            f"no access token: put the bot's token in a file named by "
            f"--token-file, or in ${TOKEN_ENV} ({where} is empty)"
        )
    if not (token.isascii() and token.isprintable()) or " " in token:
        raise UsageError(f"{where} is not one access token: it has spaces or control characters")
    return token


def _pickle_key(path: str | None, env: Mapping[str, str]) -> str | None:
    """The key that locks the bot's room keys: from its file (0600) or the environment;
    None (encrypted rooms not served) when neither gives one."""
    holds = "the key that unlocks the bot's room keys"
    key, where = _secret(path, "--pickle-key-file", env, PICKLE_ENV, holds)
    if path is not None and not key:
        raise UsageError(f"{where} is empty: put a long random key in it")
    return key or None


def _secret(
    path: str | None, flag: str, env: Mapping[str, str], name: str, holds: str
) -> tuple[str, str]:
    """A secret from the file ``flag`` names (a regular file, read bounded, refused when
    others may read what it ``holds``), else from the variable ``name``; and where from."""
    if path is None:
        return env.get(name, "").strip(), f"${name}"
    value = read_named(path, flag).strip()
    _private(path, flag, holds)
    return value, f"{flag} {path}"


def _e2ee_installed() -> None:
    """Encrypted rooms need the chat-e2ee extra (libolm's binding and the crypto store's)."""
    try:
        import aiosqlite  # noqa: F401
        import olm  # noqa: F401
        from mautrix.crypto.store.asyncpg import PgCryptoStore  # noqa: F401
    except ModuleNotFoundError as exc:
        why = "a pickle key serves encrypted rooms, which need"
        error = _missing(exc, E2EE_EXTRA, why, "chat-e2ee")
        if error is None:
            raise
        raise error from None


def _missing(
    exc: ModuleNotFoundError, modules: tuple[str, ...], what: str, extra: str
) -> UsageError | None:
    """The usage error for a module of ``extra`` that is not installed (one line, with the
    install command); None for any other missing module (raised as it was)."""
    if exc.name is None or exc.name.split(".")[0] not in modules:
        return None
    install = f"pip install 'acp-relay[{extra}]'"
    return UsageError(f"{what} the {extra} extra ({exc.name} is missing): {install}")


def _private(path: str, flag: str, holds: str) -> None:
    """A secret's file others may read is refused, as the state file is."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # read_named says what is wrong with it
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(
            f"{flag} {path} is readable by others (mode "
            f"{stat.S_IMODE(mode):o}): it holds {holds}; "
            f"chmod 600 {path}"
        )
