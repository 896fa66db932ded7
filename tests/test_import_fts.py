"""SQLite's FTS5 index is written behind the messages (memory/sqlite_fts.py): a bulk import batch indexes its own
messages in its transaction (memory/dialect_sqlite.py `insert_messages`), a smaller one leaves them to the store's
worker (when idle, or at close). Both must make the same index, the one FTS5 itself builds from the content
('rebuild'), and pass FTS5's integrity check against the content."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.corpus import sentence
from memory import sqlite_fts
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


def _index(path: Path, rebuild: bool = False) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with closing(sqlite3.connect(path)) as conn:
        if rebuild:  # FTS5's own index of the content
            conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        # raises when the index and the content differ
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
        conn.execute("CREATE VIRTUAL TABLE temp.inst USING fts5vocab(main, messages_fts, 'instance')")
        instances = conn.execute("SELECT term, doc, col, offset FROM temp.inst ORDER BY 1, 2, 3, 4").fetchall()
        messages = conn.execute("SELECT id, external_id FROM messages ORDER BY id").fetchall()
        upto = conn.execute("SELECT upto FROM fts_progress").fetchall()
    return instances, [*messages, *upto]


async def test_bulk_and_small_batches_index_their_messages_as_fts5_itself_does(tmp_path: Path) -> None:
    rows = _rows(3 * BULK_FTS_ROWS + 17)
    await _import(tmp_path / "bulk.db", rows, 2 * BULK_FTS_ROWS)  # batches of the bulk path
    await _import(tmp_path / "small.db", rows, BULK_FTS_ROWS - 1)  # every batch left to the worker
    bulk, small = _index(tmp_path / "bulk.db"), _index(tmp_path / "small.db")
    assert len(bulk[0]) > 5 * len(rows)  # every message's index terms, each an instance
    assert bulk[1][-1] == (len(rows),)  # `upto`: the last message
    assert bulk == small == _index(tmp_path / "small.db", rebuild=True)


async def test_a_bulk_batch_indexes_its_messages_in_its_own_transaction(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_fts, "BATCH", 10**9)  # the worker's idle runs never come in this test
    monkeypatch.setattr(sqlite_fts, "IDLE_S", 3600.0)
    store = SqliteStore(str(tmp_path / "hilo.db"))
    await store.open()
    try:
        await store.import_rows(_rows(BULK_FTS_ROWS))
        with closing(sqlite3.connect(tmp_path / "hilo.db")) as conn:
            assert conn.execute("SELECT upto, (SELECT max(id) FROM messages) FROM fts_progress").fetchone() == (
                BULK_FTS_ROWS, BULK_FTS_ROWS)
    finally:
        await store.close()
