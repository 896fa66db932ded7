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


def test_the_checkpoint_thread_never_recreates_a_wal_removed_under_it(tmp_path: Path) -> None:
    """Its connection holds the store's -wal from the start: a checkpoint after the -wal was moved away copies
    that file (the one the store writes), and never creates an empty -wal at the path. Before: the connection
    opened the -wal at its first checkpoint, so a -wal moved away between the store's open and that checkpoint
    came back as a new, empty file (tests/test_sqlite_file.py's -wal case failed in CI on it)."""
    path = tmp_path / "hilo.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as store:  # the store's connection, -wal open
        store.execute("PRAGMA journal_mode = WAL")
        store.execute("CREATE TABLE t (x)")
        checkpointer = sqlite_checkpoint.Checkpointer(str(path))
        try:
            store.execute("INSERT INTO t VALUES (1)")
            wal = tmp_path / "hilo.db-wal"
            wal.rename(tmp_path / "away")
            checkpointer.nudge()
            assert checkpointer.done.wait(timeout=10), "no checkpoint"
            assert not wal.exists(), "the checkpoint created a new -wal"
            assert checkpointer.checkpoints == 1  # it copied the store's frames: they were in the moved file
        finally:
            checkpointer.close()
        (tmp_path / "away").rename(wal)
    with closing(sqlite3.connect(path)) as reopened:
        assert reopened.execute("SELECT x FROM t").fetchall() == [(1,)]
