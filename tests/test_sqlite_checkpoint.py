"""WAL checkpoints run on the store's checkpoint thread, not in a turn's commit (memory/sqlite_checkpoint.py).

Before: the commit that took the WAL past 1,000 pages copied it into the database itself, on the store's one
worker thread: 10-15 ms more for that turn's ingest at 1,000 people x 1,000 messages."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from kernel.types import InboundMessage
from memory import sqlite_checkpoint
from memory.dialect_sqlite import SqliteStore


def _msg(k: int) -> InboundMessage:
    return InboundMessage(surface="telegram", sender=f"p{k % 7}", external_id=f"m{k}", handle=f"p{k % 7}",
                          text=f"message number {k} about the garden, the bikes and the bread")


async def test_the_commits_leave_checkpoints_to_the_checkpoint_thread(tmp_path: Path) -> None:
    path = tmp_path / "hilo.db"
    store = SqliteStore(path)
    await store.open()
    try:
        assert store.checkpointer is not None
        # the store's connection checkpoints only past the safety margin
        pages = await store._call(lambda: store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        assert pages == sqlite_checkpoint.SAFETY_PAGES
        store.checkpointer.done.clear()
        before = store.checkpointer.checkpoints
        for k in range(60):
            turn = await store.ingest(_msg(k), 9)
            assert turn is not None
            await store.finish_turn(turn, f"reply {k}", 2, [])
        assert store.checkpointer.done.wait(timeout=30), "no checkpoint after the writes"
        assert store.checkpointer.checkpoints > before
        thread = store.checkpointer._thread
        assert thread.name == "hilo-sqlite-checkpoint" and thread.is_alive()
    finally:
        await store.close()
    assert not thread.is_alive(), "close stops the thread"
    with closing(sqlite3.connect(path)) as reopened:  # everything is in the database file
        assert reopened.execute("SELECT count(*) FROM messages").fetchone()[0] == 120


async def test_an_in_memory_store_has_no_checkpoint_thread() -> None:
    store = SqliteStore(":memory:")
    await store.open()
    try:
        assert store.checkpointer is None
        assert await store.ingest(_msg(1), 9) is not None
    finally:
        await store.close()
