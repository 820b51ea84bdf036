"""A thread's real events rendered as a Matrix client shows a thread, for a picture of it.

No Matrix web client runs offline from the registries here, so this page stands for one:
the thread's events as the person's client received them (edits applied, reactions
counted: :meth:`tests.support.matrix.Person.thread`), laid out like a client's thread
panel. The bot's ``formatted_body`` is shown as HTML limited to the tags clients allow
(the bot builds it with the agent's text escaped); every other body as text.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime

from tests.support.matrix import Seen

ALLOWED = re.compile(r"</?(b|i|em|strong|code|pre|br|details|summary)>")
COLOURS = ("#0dbd8b", "#368bd6", "#ac3ba8", "#e64f7a", "#ff812d", "#2dc2c5")

STYLE = """
body { margin: 0; font: 15px/1.45 Inter, 'Noto Sans', sans-serif; background: #fff;
       color: #17191c; }
.panel { width: 760px; margin: 0 auto; border-left: 1px solid #e3e8f0;
         border-right: 1px solid #e3e8f0; min-height: 100vh; }
header { padding: 14px 20px; border-bottom: 1px solid #e3e8f0; font-weight: 600;
         font-size: 17px; }
header small { color: #737d8c; font-weight: 400; margin-left: 8px; }
.event { display: flex; padding: 8px 20px; }
.event.root { border-bottom: 1px solid #e3e8f0; padding-bottom: 14px; }
.avatar { flex: none; width: 32px; height: 32px; border-radius: 50%; color: #fff;
          font-weight: 600; display: flex; align-items: center; justify-content: center;
          margin-right: 12px; }
.who { font-weight: 600; }
.when { color: #737d8c; font-size: 12px; margin-left: 8px; }
.text { white-space: pre-wrap; word-break: break-word; }
.notice { color: #5c6470; }
.edited { color: #8d97a5; font-size: 12px; margin-left: 4px; }
pre { background: #f4f6fa; border-radius: 6px; padding: 8px 10px; margin: 6px 0;
      white-space: pre-wrap; font-size: 13px; }
details summary { cursor: pointer; color: #5c6470; }
.reactions { margin-top: 6px; }
.reaction { display: inline-block; border: 1px solid #e3e8f0; border-radius: 12px;
            padding: 1px 8px; margin-right: 6px; font-size: 13px; background: #f4f6fa; }
.reaction.mine { border-color: #0dbd8b; background: #e8f8f3; }
"""


def render(root: Seen, thread: list[Seen], viewer: str, names: dict[str, str]) -> str:
    """The thread of ``root`` as ``viewer`` sees it; ``names`` gives display names by id."""
    parts = [_event(root, viewer, names, "root")]
    parts += [_event(seen, viewer, names, "") for seen in thread]
    title = html.escape(names.get(root.sender, root.sender))
    return (
        f"<!doctype html><meta charset=utf-8><style>{STYLE}</style><div class=panel>"
        f"<header>Thread<small>started by {title}</small></header>{''.join(parts)}</div>"
    )


def _event(seen: Seen, viewer: str, names: dict[str, str], kind: str) -> str:
    name = names.get(seen.sender, seen.sender)
    colour = COLOURS[sum(map(ord, seen.sender)) % len(COLOURS)]
    when = datetime.fromtimestamp(seen.ts / 1000, UTC).strftime("%H:%M") if seen.ts else ""
    if seen.html is not None:
        body = ALLOWED.sub(lambda m: m[0], _only_allowed(seen.html))
    else:
        body = html.escape(seen.body)
    notice = " notice" if seen.msgtype == "m.notice" else ""
    edited = "<span class=edited>(edited)</span>" if seen.edits else ""
    chips = "".join(
        f"<span class='reaction{' mine' if viewer in who else ''}'>{html.escape(key)} "
        f"{len(who)}</span>"
        for key, who in sorted(seen.reactions.items())
    )
    return (
        f"<div class='event {kind}'><div class=avatar style='background:{colour}'>"
        f"{html.escape(name[:1].upper())}</div><div><span class=who>{html.escape(name)}</span>"
        f"<span class=when>{when}</span><div class='text{notice}'>{body}{edited}</div>"
        f"{f'<div class=reactions>{chips}</div>' if chips else ''}</div></div>"
    )


def _only_allowed(markup: str) -> str:
    """``markup`` with every tag escaped but the allowed ones (a client's sanitiser, simply)."""
    pieces = re.split(r"(<[^>]*>)", markup)
    return "".join(p if ALLOWED.fullmatch(p) or not p.startswith("<") else html.escape(p)
                   for p in pieces)  # fmt: skip
