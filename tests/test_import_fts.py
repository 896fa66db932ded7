"""SQLite's bulk import indexes a batch's messages in FTS5 with one statement after the rows (memory/dialect_sqlite.py
`bulk_fts`), not row by row through the insert trigger: the index must be what the trigger makes. Built from the
trigger as the schema holds it, so a migration that changes the trigger changes both; this test compares them."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.corpus import sentence
from memory.dialect_sqlite import BULK_FTS_ROWS, SqliteStore
from memory.store import ImportRow

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _rows(n: int) -> list[ImportRow]:
    rng = random.Random(5)
    return [ImportRow(f"p{i % 3}", ("telegram", "whatsapp", "web")[i % 3], ("user", "assistant")[i % 2],
                      sentence(rng, ("en", "es")[i % 2]), T0 + timedelta(minutes=7 * i), 9, f"e{i}")
            for i in range(n)]


async def _import(path: Path, rows: list[ImportRow], batch: int) -> None:
    store = SqliteStore(str(path))
    await store.open()
    try:
        for k in range(0, len(rows), batch):
            await store.import_rows(rows[k:k + batch])
        # a batch that skips what is stored (a resumed import) goes through the bulk path too
        await store.import_rows(rows[: 2 * BULK_FTS_ROWS])
    finally:
        await store.close()


def _index(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")  # raises when it differs
        conn.execute("CREATE VIRTUAL TABLE temp.inst USING fts5vocab(main, messages_fts, 'instance')")
        instances = conn.execute("SELECT term, doc, col, offset FROM temp.inst ORDER BY 1, 2, 3, 4").fetchall()
        messages = conn.execute("SELECT id, external_id FROM messages ORDER BY id").fetchall()
        triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name").fetchall()
    return instances, [*messages, *triggers]


async def test_a_bulk_batch_indexes_its_messages_as_the_trigger_does(tmp_path: Path) -> None:
    rows = _rows(3 * BULK_FTS_ROWS + 17)
    await _import(tmp_path / "bulk.db", rows, 2 * BULK_FTS_ROWS)  # batches of the bulk path
    await _import(tmp_path / "trigger.db", rows, BULK_FTS_ROWS - 1)  # every row through the trigger
    bulk, by_trigger = _index(tmp_path / "bulk.db"), _index(tmp_path / "trigger.db")
    assert len(bulk[0]) > 5 * len(rows)  # every message's index terms, each an instance
    assert bulk == by_trigger
