"""`hilo backup FILE`: a consistent, checked copy of the SQLite database, taken while `hilo serve` runs
(memory/sqlite_backup.py). An added command: docs/deploy.md, "Backups", says how to schedule it and restore."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bot.config import Settings
from kernel.errors import HiloError


def add(sub: Any, common: argparse.ArgumentParser, settings: Callable[[argparse.Namespace], Settings]) -> None:
    """Add the command to the `hilo` parser; `settings(args)` gives the settings (--db applied)."""
    s = sub.add_parser("backup", parents=[common], help="a consistent copy of the SQLite database, while it runs")
    s.add_argument("file", metavar="FILE", help="the copy to write (replaced only once the new copy is checked)")
    s.set_defaults(fn=lambda args: command(args, settings(args)))


def command(args: argparse.Namespace, settings: Settings) -> int:
    from memory.open import POSTGRES_SCHEMES, scheme_of, sqlite_path
    from memory.sqlite_backup import PG_DUMP, backup

    if scheme_of(settings.database_url) in POSTGRES_SCHEMES:
        raise HiloError(PG_DUMP)
    report = backup(sqlite_path(settings.database_url.strip()), args.file)
    print(f"backed up to {report.path}: {report.size_bytes / 1e6:.1f} MB, {report.messages:,} messages of "
          f"{report.people:,} people, schema {report.schema}, in {report.seconds:.2f} s")
    return 0
