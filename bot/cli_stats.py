"""`hilo stats [--days N] [--since YYYY-MM-DD] [--surface S] [--json]`: per surface and per UTC day, the turns,
exchanges per conversation (mean, p90), tokens and cost per conversation and per person, fallback and model
failure rates, delivery failures and the messages retention deleted (memory/sql_stats.py; docs/stats.md has
the JSON shape). Ids and counts only: never a message's text or a handle. An added command."""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from bot.config import Settings
from kernel.errors import ConfigError
from kernel.types import SURFACES

Command = Callable[[Settings, Any], Awaitable[int]]
MAX_DAYS = 366


def add(sub: Any, common: argparse.ArgumentParser, run: Callable[[argparse.Namespace, Command], int]) -> None:
    """Add the command to the `hilo` parser; `run(args, fn)` runs `fn(settings, store)` on the configured store."""
    s = sub.add_parser("stats", parents=[common], help="turns, exchanges, tokens, cost, fallbacks and failures "
                       "per surface and per day (UTC)")
    s.add_argument("--days", type=int, default=7, metavar="N", help="how many days (default 7)")
    s.add_argument("--since", metavar="YYYY-MM-DD", help="the first day (default: N days up to today)")
    s.add_argument("--surface", choices=SURFACES, metavar="S", help=f"only this surface ({', '.join(SURFACES)})")
    s.add_argument("--json", action="store_true", help="machine-readable (docs/stats.md)")
    s.set_defaults(fn=lambda args: run(args, lambda settings, store: command(args, store)))


def first_day(since: str | None, days: int, today: date) -> date:
    """The range's first day: `since`, or the `days` days that end today."""
    if not 1 <= days <= MAX_DAYS:
        raise ConfigError(f"--days {days}: give 1 to {MAX_DAYS}")
    if since is None:
        return today - timedelta(days=days - 1)
    try:
        return date.fromisoformat(since)
    except ValueError:
        raise ConfigError(f"--since {since!r} is not a date, e.g. 2026-12-01") from None


async def command(args: argparse.Namespace, store: Any) -> int:
    start = first_day(args.since, args.days, datetime.now(UTC).date())
    data = await store.stats(start, args.days, SURFACES, args.surface)
    print(json.dumps(data, indent=2) if args.json else render(data))
    return 0


#: the table's columns: heading, and how a row's figure is written
COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("day", lambda r: r["day"]),
    ("surface", lambda r: r["surface"]),
    ("turns", lambda r: str(r["turns"])),
    ("convs", lambda r: str(r["conversations"])),
    ("people", lambda r: str(r["people"])),
    ("exch mean", lambda r: f"{r['exchanges_per_conversation']['mean']:.2f}"),
    ("exch p90", lambda r: str(r["exchanges_per_conversation"]["p90"])),
    ("tok in/conv", lambda r: f"{r['per_conversation']['tokens_in']:.1f}"),
    ("tok out/conv", lambda r: f"{r['per_conversation']['tokens_out']:.1f}"),
    ("$/conv", lambda r: f"{r['per_conversation']['cost_usd']:.4f}"),
    ("$/person", lambda r: f"{r['per_person']['cost_usd']:.4f}"),
    ("cost $", lambda r: f"{r['cost_usd']:.4f}"),
    ("fallback", lambda r: f"{r['fallback_rate']:.1%}"),
    ("model fail", lambda r: f"{r['model_failure_rate']:.1%}"),
    ("deliv fail", lambda r: str(r["delivery_failures"])),
    ("retention del", lambda r: str(r["retention_deleted"])),
)


def _active(row: dict[str, Any]) -> bool:
    return any(row[k] for k in ("conversations", "model_calls", "delivery_failures", "retention_deleted"))


def render(data: dict[str, Any]) -> str:
    """The readable table: one line per (day, surface) with anything in it, then the range's total line."""
    rows = [[fmt(r) for _, fmt in COLUMNS] for r in data["rows"] if _active(r)]
    rows.append([fmt({**data["totals"], "day": "total", "surface": data["surface"] or "all"}) for _, fmt in COLUMNS])
    head = [name for name, _ in COLUMNS]
    widths = [max(len(x) for x in column) for column in zip(head, *rows, strict=True)]
    lines = ["  ".join(cell.rjust(w) if i > 1 else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths,
                                                                                                    strict=True)))
             for line in (head, *rows)]
    return f"hilo stats {data['since']} .. {data['until']} (UTC)\n" + "\n".join(lines)
