"""What ``acp-relay serve --dev`` prints on stdout once it listens: ready-to-use URLs.

Never in the logs: the banner holds a ticket (it works once), the console's token and
where the secret is.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from relay.commands.devfolder import DevFolder
from relay.config.defaults import DEV_TICKET_TTL
from relay.config.resolved import RelayConfig
from relay.config.settings import Settings
from relay.core.ticketurls import with_ticket


def self_command() -> str:
    """How to run this acp-relay again: the script's full path, or ``python -m relay``.

    The banner's commands then work without the virtualenv on PATH.
    """
    script = Path(sys.argv[0])
    if script.name == "acp-relay":
        return shlex.quote(str(script.resolve()))
    return shlex.join([sys.executable, "-m", "relay"])


def dev_secret_source(settings: Settings) -> str:
    """Which secret signs the --dev tickets, for the banner."""
    if settings.secret_file:
        return f"the first line of {settings.secret_file} (--secret-file)"
    if settings.secret_env:
        return "ACP_RELAY_SECRET, from the environment"
    return "a throwaway one, new at each start (--secret-file FILE keeps one)"


def dev_agent(settings: Settings, config: RelayConfig) -> str:
    """Which agent each socket gets, for the banner."""
    if settings.agent_argv is not None:
        return f"{shlex.join(config.agent_argv)} (--agent)"
    return "the built-in demo agent (--agent COMMAND for another)"


def dev_workspace(settings: Settings, dev: DevFolder) -> str:
    """Where the agents run, for the banner."""
    if settings.workspace_given:
        return f"{settings.workspace} (--workspace)"
    return f"{dev.workspace}, fresh, removed with the relay (--workspace DIR for another)"


def mint_command(me: str, secret_file: Path, audience: str | None) -> str:
    """``ticket`` with the run's secret (and audience): a fresh ticket each time it runs."""
    mint = f"{me} ticket --secret-file {shlex.quote(str(secret_file))}"
    if audience is not None:
        mint += f" --audience {shlex.quote(audience)}"
    return mint


def editor_command(me: str, url: str, secret_file: Path, audience: str | None) -> str:
    """``connect`` with a ticket command: an editor may launch it again and again, and it
    resumes after a network cut (each socket gets a fresh ticket)."""
    mint = mint_command(me, secret_file, audience)
    return f"{me} connect {url} --ticket-command {shlex.quote(mint)}"


def watch_command(me: str, url: str, secret_file: Path, audience: str | None) -> str:
    """``watch`` with a ticket command minting a watcher's ticket: CONNECTION_ID stands for
    the whole id the log shows as connection_id."""
    mint = f"{mint_command(me, secret_file, audience)} --watch CONNECTION_ID"
    return f"{me} watch {url} --ticket-command {shlex.quote(mint)}"


def chat_command(me: str, url: str, secret_file: Path, audience: str | None) -> str:
    """``chat`` against this relay: its ticket and watch-ticket commands mint with the run's
    secret (by full paths: no PATH or secret needed); the Matrix side is the reader's."""
    mint = mint_command(me, secret_file, audience)
    return (
        f"{me} chat {url} --ticket-command {shlex.quote(mint)} --watch-ticket-command "
        f"{shlex.quote(mint + ' --may-answer --watch')} --homeserver http://127.0.0.1:8008 "
        "--user @relay-bot:localhost --token-file bot.token --room '!ROOM_ID:localhost' "
        "--approver @alice:localhost --state chat.sqlite"
    )


def print_dev_banner(
    url: str, secret: str, settings: Settings, config: RelayConfig, dev: DevFolder
) -> None:
    """Print ready-to-use URLs and commands on stdout (never in the logs): the URL's ticket
    works once, the console's address carries the run's token."""
    from relay.commands.ticket import fresh_ticket
    from relay.server.http import devconsole

    audience = settings.audience
    if settings.secret_file:
        secret_file = Path(settings.secret_file)
    else:
        secret_file = dev.secret
        secret_file.touch(mode=0o600)
        secret_file.write_text(secret + "\n")
    browser = fresh_ticket(secret, subject="dev-browser", audience=audience, ttl=DEV_TICKET_TTL)
    me = self_command()
    # The relay's ticket lifetime goes in as the relay's setting, as `ticket` reads it.
    more = (
        f"ACP_RELAY_TICKET_TTL={DEV_TICKET_TTL} {me} ticket"
        f" --secret-file {shlex.quote(str(secret_file))}"
        + ("" if audience is None else f" --audience {shlex.quote(audience)}")
        + f" --url {url}"
    )
    base = "http://" + url.split("/")[2]  # ws://HOST:PORT/path -> http://HOST:PORT
    console = devconsole.console_url(base, config.console_token)
    print(
        "\nacp-relay is running in --dev mode: not for production.\n"
        f"  Secret: {dev_secret_source(settings)}\n"
        f"  Agent: {dev_agent(settings, config)}\n"
        f"  Workspace: {dev_workspace(settings, dev)}\n"
        f"  Dev console (a fresh ticket per page load; keep the address to yourself):\n"
        f"    {console}\n"
        f"  WebSocket URL (single use):\n    {with_ticket(url, browser)}\n"
        "  Editor command (a fresh ticket at each launch and each resume):\n"
        f"    {editor_command(me, url, secret_file, audience)}\n"
        f"  More tickets:\n    {more}\n"
        "  Watch a connection (CONNECTION_ID: its whole connection_id in the log below, or "
        "the console's share):\n"
        f"    {watch_command(me, url, secret_file, audience)}\n"
        "  Team chat (needs the chat extra; your homeserver, bot, token file, room and "
        "approver in place of these):\n"
        f"    {chat_command(me, url, secret_file, audience)}\n",
        flush=True,
    )
