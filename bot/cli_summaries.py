"""`hilo summaries --user U [--json] [--drop]`: the episode summaries the model wrote about a person (the
`summarize` job, bot/summary_job.py), and their undo: `--drop` clears them (their episodes' messages stay, and
they are not written again). An added command: every other command of the CLI contract stays as it was."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any

from bot.config import Settings

Command = Callable[[Settings, Any], Awaitable[int]]


def add(sub: Any, common: argparse.ArgumentParser, run: Callable[[argparse.Namespace, Command], int]) -> None:
    """Add the command to the `hilo` parser; `run(args, fn)` runs `fn(settings, store)` on the configured store."""
    s = sub.add_parser("summaries", parents=[common], help="episode summaries written about a person (--drop: undo)")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("--json", action="store_true")
    s.add_argument("--drop", action="store_true", help="clear them (messages are never deleted)")
    s.set_defaults(fn=lambda args: run(args, lambda settings, store: command(args, settings, store)))


async def command(args: argparse.Namespace, settings: Settings, store: Any) -> int:
    from bot import inspect_text
    from kernel import catalog

    language = settings.language
    user_id = await store.user_id(args.user)
    rows = [] if user_id is None else await store.summaries(user_id)
    if args.drop:
        dropped = 0 if user_id is None else await store.drop_summaries(user_id)
        print(catalog.t("summaries_dropped", language, count=dropped, handle=args.user))
    elif args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    elif not rows:
        print(catalog.t("no_summaries", language, handle=args.user))
    else:
        print("\n".join(inspect_text.summary_line(r) for r in rows))
    return 0
