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
A store that takes batches side by side (Store.import_lanes: Postgres, whose server inserts on one backend per
connection) gets the lines split into lanes by person: each person's lines stay in one lane, in the file's order
(their conversations and episodes go on from batch to batch as in one lane), and each lane stores its batches one
after another while the others store theirs. Postgres's server, not the reader, was the limit: one lane stored
1,000,000 lines at ~9,300-11,700 lines/s, the server busy ~80% of the time and the client waiting for it.
A bad line stops the import there, naming the line: the lines before it are stored (and said so), nothing after;
fix the line and run the import again: it goes on from there. Token counts are computed here, like for live
messages.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import zlib
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


def unreadable(path: str | Path, exc: OSError) -> ImportFileError:
    """The error of a file that cannot be read (only the file's: a store's socket error is the store's)."""
    return ImportFileError(f"cannot read {path}: {exc.strerror}")


def count_lines(path: str | Path) -> int:
    """The file's non-empty line count, for the progress bar: a pass over raw bytes, no line held."""
    total = 0
    try:
        with open(path, "rb") as fh:
            for line in fh:
                if line.strip():
                    total += 1
    except OSError as exc:
        raise unreadable(path, exc) from None
    return total


def lane_of(user: str, lanes: int) -> int:
    """The lane of a person's lines (0 .. lanes - 1): the same on every run of the same file (crc32, not hash())."""
    return zlib.crc32(user.encode()) % lanes if lanes > 1 else 0


def batches(path: str | Path, bad_line: list[ImportFileError], terms: Callable[[], bool] = lambda: True,
            lanes: int = 1) -> Iterator[tuple[int, list[ImportRow]]]:
    """The file's valid rows as (lane, rows), at most BATCH rows, a lane's rows in the file's order; at a bad
    line, every lane's rows before it, then `bad_line` holds its error. Rows carry their index terms when
    `terms()` says so as the batch before them is given out."""
    pending: list[list[ImportRow]] = [[] for _ in range(lanes)]
    with_terms = terms()
    for n, line in _lines(path):
        if line is not None and not line.strip():
            continue
        try:
            if line is None:
                raise ImportFileError(f"line {n}: not UTF-8 text")
            row = _row(n, line, with_terms)
        except ImportFileError as exc:
            bad_line.append(exc)
            break
        lane = lane_of(row.user, lanes)
        pending[lane].append(row)
        if len(pending[lane]) >= BATCH:
            yield lane, pending[lane]
            pending[lane], with_terms = [], terms()
    for lane, rows in enumerate(pending):
        if rows:
            yield lane, rows


def _lines(path: str | Path) -> Iterator[tuple[int, str | None]]:
    """(line number, line) of the file, None for a line that is not UTF-8 text (the last given); an error opening
    or reading it as the file's (ImportFileError)."""
    try:
        with open(path, "rb") as fh:  # bytes, each line decoded: a bad byte is named at its own line
            for n, raw in enumerate(fh, 1):
                try:
                    line = raw.decode()
                except UnicodeDecodeError:
                    yield n, None
                    return
                yield n, line
    except OSError as exc:
        raise unreadable(path, exc) from None


class ImportStopped(ImportFileError):
    """A bad line stopped a streamed import: what was stored before it is in `result`."""

    def __init__(self, error: ImportFileError, result: ImportResult) -> None:
        super().__init__(f"{error}; the {result.inserted + result.skipped} lines before it are stored "
                         f"({result.inserted} new, {result.skipped} already there), nothing after it: fix the line "
                         "and run the import again (the stored lines are skipped)")
        self.result = result


async def import_file(store: Store, path: str | Path,
                      on_batch: Callable[[int, int], None] | None = None) -> ImportResult:
    """Store the file BATCH lines a transaction, streamed, in the store's lanes (`batches`); `on_batch(lines,
    total)` after each (total: the file's line count, counted first only when on_batch is given). Raises
    ImportStopped at a bad line."""
    inserted = skipped = 0
    total = await asyncio.to_thread(count_lines, path) if on_batch is not None else 0
    bad: list[ImportFileError] = []
    # Terms are found as lines are read when the store wants them so (Store.import_terms_ahead) and batches bring
    # new rows; while they are all stored already (a re-run, the start of a resumed import) the reader skips
    # them: the store never uses a skipped row's terms.
    storing = store.import_terms_ahead
    lines = batches(path, bad, lambda: storing, max(1, store.import_lanes))
    running: dict[int, tuple[asyncio.Future[ImportResult], int]] = {}  # lane -> its batch being stored, size

    async def landed(lane: int) -> None:
        nonlocal inserted, skipped, storing
        task, size = running.pop(lane)
        result = await task
        inserted += result.inserted
        skipped += result.skipped
        storing = store.import_terms_ahead and result.inserted > 0
        if on_batch is not None:
            on_batch(size, total)

    ahead = asyncio.ensure_future(asyncio.to_thread(next, lines, None))
    try:
        while (item := await ahead) is not None:
            lane, batch = item
            ahead = asyncio.ensure_future(asyncio.to_thread(next, lines, None))  # read on meanwhile
            if lane in running:  # a lane's batches one after another: its people's episodes go on in order
                await landed(lane)
            running[lane] = (asyncio.ensure_future(store.import_rows(batch)), len(batch))
        for lane in sorted(running):
            await landed(lane)
    except BaseException:
        for task, _ in running.values():
            task.cancel()  # its transaction rolls back: the next run stores its lines
        await asyncio.gather(ahead, *(task for task, _ in running.values()), return_exceptions=True)
        raise
    if bad:
        raise ImportStopped(bad[0], ImportResult(inserted, skipped))
    return ImportResult(inserted, skipped)
