"""`hilo import FILE.jsonl`: bulk history in, streamed, idempotent and resumable on (surface, external_id).

Each line: {"user", "surface", "role", "content", "created_at"[, "external_id"][, "conversation"]}.
The file is read and stored BATCH lines at a time, one transaction each: memory stays bounded whatever the file's
size. A line without "external_id" gets one derived from what it says (`line:` + a hash of user, surface, role,
created_at and content), so every line has a key: a second run, or a run after an import was stopped (Ctrl-C,
SIGKILL, a full disk), skips the lines already stored with one indexed look-up per batch and stores the rest.
The next batch is read (parsed, validated, its tokens counted and, for Postgres, its index terms found) on one
thread while the store writes the last one on its own: SQLite and Postgres work without the GIL (SQLite's C code
releases it; Postgres is another process), so on two cores the two overlap. On Postgres the terms are found here,
not in the store's transaction, because the store's Python work runs while the server waits for it
(Store.import_terms_ahead).
A bad line stops the import there, naming the line: the lines before it are stored (and said so), nothing after;
fix the line and run the import again: it goes on from there. Token counts are computed here, like for live
messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kernel import tokens
from kernel.errors import HiloError
from kernel.types import SURFACES
from memory.stems import index_terms
from memory.store import ImportResult, ImportRow, Store

BATCH = 10_000
ROLES = ("user", "assistant")


class ImportFileError(HiloError):
    """A line of the import file is not valid; the message names the line and the fix."""


def _row(lineno: int, raw: str, terms: bool = True) -> ImportRow:
    """A valid line as a row, its tokens counted and (with `terms`) its index terms found: here, on the reading
    thread, it overlaps the store's work."""
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
    user, created = data["user"].strip(), created.astimezone(UTC)
    return ImportRow(
        user=user, surface=data["surface"], role=data["role"], content=data["content"], created_at=created,
        token_count=tokens.count(data["content"]),
        external_id=str(ext) if ext is not None else derived_key(user, data, created),
        conversation=str(conv) if conv is not None else None, terms=index_terms(data["content"]) if terms else None,
    )


def derived_key(user: str, data: dict[str, Any], created: datetime) -> str:
    """The key of a line without external_id: the same line (same person, surface, conversation, role, time and
    text) has the same key, in any file, at any position."""
    parts = (user, data["surface"], str(data.get("conversation") or ""), data["role"], created.isoformat(),
             data["content"])
    return "line:" + hashlib.blake2b("\x1f".join(parts).encode(), digest_size=12).hexdigest()


def count_lines(path: str | Path) -> int:
    """The file's non-empty line count, for the progress bar: a pass over raw bytes, no line held."""
    total = 0
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                total += 1
    return total


def batches(path: str | Path, bad_line: list[ImportFileError],
            terms: Callable[[], bool] = lambda: True) -> Iterator[list[ImportRow]]:
    """The file's valid rows, BATCH at a time; at a bad line, the rows before it, then `bad_line` holds its error.
    A batch's rows carry their index terms when `terms()` says so as it begins."""
    batch: list[ImportRow] = []
    with_terms = terms()
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                batch.append(_row(n, line, with_terms))
            except ImportFileError as exc:
                bad_line.append(exc)
                break
            if len(batch) >= BATCH:
                yield batch
                batch, with_terms = [], terms()
    if batch:
        yield batch


class ImportStopped(ImportFileError):
    """A bad line stopped a streamed import: what was stored before it is in `result`."""

    def __init__(self, error: ImportFileError, result: ImportResult) -> None:
        super().__init__(f"{error}; the {result.inserted + result.skipped} lines before it are stored "
                         f"({result.inserted} new, {result.skipped} already there), nothing after it: fix the line "
                         "and run the import again (the stored lines are skipped)")
        self.result = result


async def import_file(store: Store, path: str | Path,
                      on_batch: Callable[[int, int], None] | None = None) -> ImportResult:
    """Store the file BATCH lines a transaction, streamed; `on_batch(lines, total)` after each (total: the file's
    line count, counted first only when on_batch is given). Raises ImportStopped at a bad line."""
    import asyncio

    try:
        total = await asyncio.to_thread(count_lines, path) if on_batch is not None else 0
        bad: list[ImportFileError] = []
        # Terms are found as lines are read when the store wants them so (Store.import_terms_ahead) and batches bring
        # new rows; while they are all stored already (a re-run, the start of a resumed import) the reader skips
        # them: the store never uses a skipped row's terms.
        storing = store.import_terms_ahead
        lines = batches(path, bad, lambda: storing)
        inserted = skipped = 0
        ahead = asyncio.ensure_future(asyncio.to_thread(next, lines, None))
        while (batch := await ahead) is not None:
            ahead = asyncio.ensure_future(asyncio.to_thread(next, lines, None))  # read on while this one is stored
            try:
                result = await store.import_rows(batch)
            except BaseException:
                await asyncio.gather(ahead, return_exceptions=True)
                raise
            inserted += result.inserted
            skipped += result.skipped
            storing = store.import_terms_ahead and result.inserted > 0
            if on_batch is not None:
                on_batch(len(batch), total)
    except OSError as exc:
        raise ImportFileError(f"cannot read {path}: {exc.strerror}") from None
    if bad:
        raise ImportStopped(bad[0], ImportResult(inserted, skipped))
    return ImportResult(inserted, skipped)

