"""`hilo export --user U [--output FILE]`: everything stored about a person as JSON (GDPR articles 15 and 20;
memory/sql_export.py), on stdout or in FILE (created 0600: it is the person's whole record). An added command;
`hilo forget` (bot/cli.py) prints what it deleted with `deleted_counts`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bot.config import Settings

Command = Callable[[Settings, Any], Awaitable[int]]


def add(sub: Any, common: argparse.ArgumentParser, run: Callable[[argparse.Namespace, Command], int]) -> None:
    """Add the command to the `hilo` parser; `run(args, fn)` runs `fn(settings, store)` on the configured store."""
    s = sub.add_parser("export", parents=[common], help="everything stored about a person, as JSON (GDPR)")
    s.add_argument("--user", required=True, metavar="U")
    s.add_argument("--output", metavar="FILE", help="write it to FILE (mode 0600) instead of stdout")
    s.set_defaults(fn=lambda args: run(args, lambda settings, store: command(args, store)))


def dumps(data: dict[str, Any]) -> str:
    """The export as text: what `hilo export`, `/export` and `GET /api/export` all give."""
    return json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n"


async def command(args: argparse.Namespace, store: Any) -> int:
    data = await store.export(args.user)
    if data is None:
        print(f"hilo: nothing is stored about {args.user}", file=sys.stderr)
        return 1
    text = dumps(data)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_private(Path(args.output), text)
    print(f"exported {args.user} to {args.output} ({len(text.encode())} bytes)", file=sys.stderr)
    return 0


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only (0600 from the first byte, also over a file there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def deleted_counts(counts: dict[str, int]) -> str:
    """`hilo forget`'s second line: the rows deleted, per table."""
    return "deleted: " + ", ".join(f"{table} {n}" for table, n in counts.items())
