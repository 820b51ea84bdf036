"""``acp-relay chat``'s options: their table, and their values from flags, environment and a
TOML file.

Pure. Precedence as for ``serve``: flag > ``ACP_RELAY_*`` > the file named by ``--config``
(or ``ACP_RELAY_CONFIG``) > default. The Matrix access token is never a flag: it is read
from ``--token-file`` or taken from ``ACP_RELAY_MATRIX_TOKEN`` (see :data:`TOKEN_ENV`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

from relay.config import convert
from relay.config.errors import UsageError
from relay.config.options import Option
from relay.config.settings import config_toml

TOKEN_ENV = "ACP_RELAY_MATRIX_TOKEN"  # the bot's access token itself (else --token-file)
PICKLE_ENV = "ACP_RELAY_MATRIX_PICKLE_KEY"  # the key that locks its room keys (else a file)
THOUGHTS = ("folded", "hidden", "shown")
BOXES_URL = "ws://connect-command/acp"  # with --connect-command: each thread gets its own
SHARE_BY = ("approvers", "prompters")
RULES_KEY = "rule"  # the config file's [[rule]] tables: approval rules per kind of tool call


def _user_id(value: object) -> str:
    text = convert.text(value).strip()
    localpart, colon, server = text[1:].partition(":")
    if not text.startswith("@") or not colon or not localpart or not server:
        raise ValueError(f"expected a Matrix user id such as @alice:example.org, got {text!r}")
    return text


ROOM_ID_HOW = "in Element: Room settings → Advanced → Internal room ID"


def _room_id(value: object) -> str:
    text = convert.text(value).strip()
    if not text.startswith("!") or len(text) < 2 or any(c.isspace() for c in text):
        alias = " (that is an alias)" if text.startswith("#") else ""
        raise ValueError(
            f"expected a room id such as !abc123:example.org, got {text!r}"
            f"{alias}; a room's id is {ROOM_ID_HOW}"
        )
    return text


def _homeserver(value: object) -> str:
    text = convert.text(value).strip().rstrip("/")
    if not text.startswith(("http://", "https://")) or len(text) < 10:
        raise ValueError(f"expected the homeserver's http(s):// URL, got {text!r}")
    return text


def _level(value: object) -> int:
    number: object = value
    if isinstance(value, str):
        try:
            number = int(convert.text(value).strip())
        except ValueError:
            number = None
    if not isinstance(number, int) or isinstance(number, bool):
        raise ValueError(
            f"expected a power level, an integer such as 50 (moderators) or 100 "
            f"(admins), got {value!r}"
        )
    return number


OPTIONS: tuple[Option, ...] = (
    Option(
        "homeserver",
        "the homeserver's client URL, e.g. https://matrix.example.org",
        None,
        "URL",
        _homeserver,
    ),
    Option(
        "user", "the bot's Matrix user id, e.g. @relay-bot:example.org", None, "USER_ID", _user_id
    ),
    Option(
        "token-file",
        f"file holding the bot's access token (else ${TOKEN_ENV}; never a flag value)",
        None,
        "FILE",
        convert.non_empty,
        is_path=True,
    ),
    Option(
        "room",
        "a room the bot serves, by id (every other room and invitation is ignored)",
        (),
        "ROOM_ID",
        _room_id,
        repeatable=True,
    ),
    Option(
        "approver",
        "a user who may answer the agent's permission requests",
        (),
        "USER_ID",
        _user_id,
        repeatable=True,
    ),
    Option(
        "approver-level",
        "also approvers: members with at least this power level",
        None,
        "LEVEL",
        _level,
    ),
    Option(
        "prompter",
        "a user who may prompt",
        (),
        "USER_ID",
        _user_id,
        repeatable=True,
        default_text="the approvers",
    ),
    Option(
        "prompter-level",
        "also prompters: members with at least this power level",
        None,
        "LEVEL",
        _level,
    ),
    Option(
        "cwd",
        "the folder sessions open in, as the relay's --cwd-map expects (an editor-side path)",
        None,
        "PATH",
        convert.non_empty,
        default_text="the current directory",
    ),
    Option(
        "state",
        "the bot's state file (SQLite, created 0600: it holds resume secrets)",
        None,
        "FILE",
        convert.non_empty,
        is_path=True,
    ),
    Option(
        "thoughts",
        "the agent's thoughts: folded, hidden or shown",
        "folded",
        "HOW",
        convert.one_of(*THOUGHTS),
    ),
    Option(
        "approval-timeout",
        "refuse a permission request (its reject option, never an "
        "allow; 'cancelled' only if it has none) after this many seconds without a "
        "decision (a [[rule]]'s timeout wins)",
        None,
        "SECONDS",
        convert.positive_seconds,
        default_text="wait",
    ),
    Option(
        "remind-after",
        "once, after this many seconds without a decision, mention again "
        "in the thread the people who may answer a request and have not",
        None,
        "SECONDS",
        convert.positive_seconds,
        default_text="never",
    ),
    Option(
        "escalate-after",
        "after this many seconds without a decision, add the "
        "--escalate-to people to those who may answer a request, mentioning them "
        "(a [[rule]] may set its own)",
        None,
        "SECONDS",
        convert.positive_seconds,
        default_text="never",
    ),
    Option(
        "escalate-to",
        "a user added to a request's approvers by --escalate-after",
        (),
        "USER_ID",
        _user_id,
        repeatable=True,
    ),
    Option(
        "pickle-key-file",
        f"file holding the key that locks the bot's room keys (else "
        f"${PICKLE_ENV}; never a flag value): given, the bot serves encrypted rooms (the "
        "chat-e2ee extra)",
        None,
        "FILE",
        convert.non_empty,
        is_path=True,
    ),
    Option(
        "crypto-state",
        "the bot's end-to-end encryption keys (SQLite, created 0600: it "
        "holds the keys that read the served rooms)",
        None,
        "FILE",
        convert.non_empty,
        is_path=True,
        default_text="the --state file's name with -crypto",
    ),
    Option(
        "max-attachment-bytes",
        "largest image or text file that joins a prompt, in bytes "
        "or with KiB/MiB (fetched from the homeserver within it; base64 adds a third on "
        "the way to the agent)",
        8 << 20,
        "SIZE",
        convert.size,
    ),
    Option(
        "audit-retention",
        "days the state file keeps a permission request's audit "
        "record (acp-relay chat audit), whatever became of its thread",
        365.0,
        "DAYS",
        convert.seconds,
    ),
    Option(
        "ticket-command",
        "command that prints a fresh ticket, split like a shell but "
        "never run by one; run for each connection and each resume",
        None,
        "COMMAND",
        convert.text,
    ),
    Option(
        "ticket-file",
        "file holding a ticket, read again for each connection",
        None,
        "FILE",
        convert.text,
        is_path=True,
    ),
    Option(
        "connect-command",
        "instead of URL and a ticket source: a command that prints "
        "'URL TICKET' for each new thread (a box of its own), and, given that URL as its "
        "last argument, a fresh ticket for each resume",
        None,
        "COMMAND",
        convert.command,
    ),
    Option(
        "watch-ticket-command",
        "command that prints a watcher's ticket (with "
        "--may-answer) for the connection id given as its last argument, for "
        "'share CONNECTION_ID', e.g. 'acp-relay ticket --may-answer --watch'; or 'URL "
        "TICKET' to name the connection's relay; told who asks in "
        "$ACP_RELAY_CHAT_REQUESTER and the room in $ACP_RELAY_CHAT_ROOM, it may refuse "
        "by exiting non-zero",
        None,
        "COMMAND",
        convert.command,
    ),
    Option(
        "share-by",
        "who may attach a room to an editor's connection with share: "
        "approvers or prompters (its approvers may then answer that editor's requests)",
        "approvers",
        "WHO",
        convert.one_of(*SHARE_BY),
    ),
    Option(
        "max-threads",
        "the most threads the bot runs at once (each is a relay "
        "connection and an agent); a mention past it is refused with a reply",
        16,
        "N",
        convert.positive_int,
    ),
    Option(
        "max-threads-per-person",
        "the most live threads one person may have opened",
        4,
        "N",
        convert.positive_int,
    ),
    Option(
        "keep-ended",
        "days the state file keeps an ended thread and a decided "
        "permission request (the thread's secret and view go when it ends)",
        30.0,
        "DAYS",
        convert.seconds,
    ),
    Option(
        "idle-timeout",
        "end a thread's session after this many seconds without a "
        "prompt or agent activity (0: never)",
        3600.0,
        "SECONDS",
        convert.seconds,
    ),
)

REQUIRED = ("homeserver", "user", "room", "state")


def resolve_chat(
    options: Iterable[Option],
    flags: Mapping[str, object],
    env: Mapping[str, str],
    file_text: str | None,
    *,
    cwd: str,
    file_name: str | None = None,
) -> dict[str, Any]:
    """Each option's value by ``dest``: its flag, else its variable, else the file's key,
    else its default; relative paths taken against ``cwd``. UsageError naming the source."""
    options = tuple(options)
    table = _file(file_text, file_name, options)
    values: dict[str, Any] = {}
    for option in options:
        raw, source = _raw(option, flags, env, table, file_name)
        try:
            value = option.default_value() if raw is None else option.parse(_items(option, raw))
        except ValueError as exc:
            raise UsageError(f"{source}: {exc}") from None
        if option.is_path and isinstance(value, str):
            value = str(PurePath(cwd) / value)
        values[option.dest] = value
    values[RULES_KEY] = table.get(RULES_KEY)
    missing = [f"--{name}" for name in REQUIRED if values.get(name.replace("-", "_")) in (None, ())]
    if missing:
        raise UsageError(
            f"acp-relay chat needs {', '.join(missing)} (flag, ACP_RELAY_* or config file)"
        )
    return values


def _raw(
    option: Option,
    flags: Mapping[str, object],
    env: Mapping[str, str],
    table: Mapping[str, object],
    file_name: str | None,
) -> tuple[object, str]:
    flag = flags.get(option.dest)
    if flag is not None and flag != []:
        return flag, f"flag {option.flag}"
    if env.get(option.env):
        return env[option.env], f"env {option.env}"
    if option.dest in table:
        return table[option.dest], f"config file key {option.name} in {file_name}"
    return None, "default"


def _items(option: Option, raw: object) -> object:
    """A repeatable option's variable holds its items split like a shell."""
    if option.repeatable and isinstance(raw, str):
        return convert.shell_words(raw)
    return raw


def _file(text: str | None, name: str | None, options: tuple[Option, ...]) -> dict[str, object]:
    if text is None:
        return {}
    data = config_toml(text, f"config file {name}")
    known = {option.dest: option for option in options}
    table: dict[str, object] = {}
    for key, value in data.items():
        if key == RULES_KEY:  # [[rule]] tables: read by relay.chat.rules, not an option
            table[key] = value
            continue
        if key.replace("-", "_") not in known:
            raise UsageError(
                f"config file {name}: unknown key {key!r}; valid keys: "
                f"{', '.join(o.name for o in options)}, and [[rule]] "
                "tables"
            )
        table[key.replace("-", "_")] = value
    return table
