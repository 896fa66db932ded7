"""`hilo import FILE.jsonl`: bulk history in, idempotent on (surface, external_id).

Each line: {"user", "surface", "role", "content", "created_at"[, "external_id"][, "conversation"]}.
The whole file is validated first (a bad line stops the import before anything is written, naming the line),
then stored in batches, one transaction each. Token counts are computed here, once, like for live messages.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kernel import tokens
from kernel.errors import HiloError
from kernel.types import SURFACES
from memory.store import ImportResult, ImportRow, Store

BATCH = 5000
ROLES = ("user", "assistant")


class ImportFileError(HiloError):
    """A line of the import file is not valid; the message names the line and the fix."""


def _row(lineno: int, raw: str) -> ImportRow:
    def bad(why: str) -> ImportFileError:
        return ImportFileError(f"line {lineno}: {why}")

    try:
        data: Any = json.loads(raw)
    except ValueError:
        raise bad("not valid JSON") from None
    if not isinstance(data, dict):
        raise bad('expected an object like {"user", "surface", "role", "content", "created_at"}')
    for key in ("user", "surface", "role", "content", "created_at"):
        if not isinstance(data.get(key), str) or (key != "content" and not data[key].strip()):
            raise bad(f'"{key}" is missing or not a string')
    if data["surface"] not in SURFACES:
        raise bad(f'"surface" must be one of {", ".join(SURFACES)}')
    if data["role"] not in ROLES:
        raise bad('"role" must be "user" or "assistant"')
    try:
        created = datetime.fromisoformat(data["created_at"].replace("Z", "+00:00"))
    except ValueError:
        raise bad('"created_at" is not an ISO date-time such as 2026-11-29T10:00:00Z') from None
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    for key in ("external_id", "conversation"):
        if data.get(key) is not None and not isinstance(data[key], str | int):
            raise bad(f'"{key}" must be a string')
    ext, conv = data.get("external_id"), data.get("conversation")
    return ImportRow(
        user=data["user"].strip(), surface=data["surface"], role=data["role"], content=data["content"],
        created_at=created.astimezone(UTC), token_count=tokens.count(data["content"]),
        external_id=str(ext) if ext is not None else None, conversation=str(conv) if conv is not None else None,
    )


def read_rows(path: str | Path) -> list[ImportRow]:
    """Parse and validate the whole file (raises ImportFileError naming the first bad line)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [_row(n, line) for n, line in enumerate(fh, 1) if line.strip()]
    except OSError as exc:
        raise ImportFileError(f"cannot read {path}: {exc.strerror}") from None


def _batches(rows: list[ImportRow]) -> Iterator[list[ImportRow]]:
    for start in range(0, len(rows), BATCH):
        yield rows[start:start + BATCH]


async def import_file(store: Store, path: str | Path,
                      on_batch: Callable[[int, int], None] | None = None) -> ImportResult:
    """Validate the whole file, then store it BATCH rows a transaction; `on_batch(rows, total)` after each."""
    rows = await asyncio.to_thread(read_rows, path)
    inserted = skipped = 0
    for batch in _batches(rows):
        result = await store.import_rows(batch)
        inserted += result.inserted
        skipped += result.skipped
        if on_batch is not None:
            on_batch(len(batch), len(rows))
    return ImportResult(inserted, skipped)
