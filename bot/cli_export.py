"""`hilo export --user U [--output FILE] [--media DIR]`: everything stored about a person as JSON (GDPR articles
15 and 20; memory/sql_export.py), on stdout or in FILE (created 0600: it is the person's whole record). An added
command; `hilo forget` (bot/cli.py) prints what it deleted with `deleted_counts`.

Their media files (voice notes still kept: bot/media_store.py) are listed in the JSON as the `media` table's rows
(`path`: the file in HILO_DATA_DIR/media, or "supabase://bucket/key"); `--media DIR` also copies each one, from
wherever it lives, into DIR (0700) as `<media id>-<file name>` (0600), and prints how many."""

from __future__ import annotations

import argparse
import asyncio
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
    s.add_argument("--media", metavar="DIR", help="also copy the person's kept media files into DIR (mode 0700)")
    s.set_defaults(fn=lambda args: run(args, lambda settings, store: command(args, store, settings)))


def dumps(data: dict[str, Any]) -> str:
    """The export as text: what `hilo export`, `/export` and `GET /api/export` all give."""
    return json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n"


async def command(args: argparse.Namespace, store: Any, settings: Settings | None = None) -> int:
    data = await store.export(args.user)
    if data is None:
        print(f"hilo: nothing is stored about {args.user}", file=sys.stderr)
        return 1
    text = dumps(data)
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_private(Path(args.output), text)
        print(f"exported {args.user} to {args.output} ({len(text.encode())} bytes)", file=sys.stderr)
    kept = [r for r in data.get("tables", {}).get("media", []) if r.get("path")]
    if getattr(args, "media", None) is None or settings is None:
        if kept:
            print(f"{len(kept)} media files are listed (tables.media); add --media DIR to copy them",
                  file=sys.stderr)
        return 0
    return await copy_media(settings, kept, Path(args.media))


async def copy_media(settings: Settings, rows: list[dict[str, Any]], folder: Path) -> int:
    """Copy the files of these media rows into `folder` (0700; files 0600), from wherever they live."""
    from bot.media_store import MediaStoreError, media_files

    files = media_files(settings)
    copied = failed = 0
    for row in rows:
        try:
            data = await files.read(str(row["path"]))
        except MediaStoreError as exc:
            print(f"hilo: media {row['id']} could not be read ({exc})", file=sys.stderr)
            failed += 1
            continue
        await asyncio.to_thread(_save, folder, f"{int(row['id'])}-{Path(str(row['path'])).name}", data)
        copied += 1
    print(f"copied {copied} media files to {folder}" + (f"; {failed} could not be read" if failed else ""),
          file=sys.stderr)
    return 1 if failed else 0


def _save(folder: Path, name: str, data: bytes) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only (0600 from the first byte, also over a file there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def deleted_counts(counts: dict[str, int]) -> str:
    """`hilo forget`'s second line: the rows deleted, per table."""
    return "deleted: " + ", ".join(f"{table} {n}" for table, n in counts.items())
