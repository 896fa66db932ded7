"""Write transactions queued at the SQLite store's thread commit together (memory/dialect_sqlite.py `_group_sync`):
each one a savepoint of ONE transaction, its own error undoing it alone, no caller told of a success before the
COMMIT. Turns at concurrency 8 queued 2-8 writes behind one another (bench/web_load.py)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.types import InboundMessage
from memory.dialect_sqlite import SqliteDb, SqliteStore
from memory.store import StoreError, StoreUnavailable


def _msg(k: int) -> InboundMessage:
    return InboundMessage(surface="telegram", sender=f"p{k}", external_id=f"m{k}", handle=f"p{k}",
                          text=f"message {k} about the garden")


async def _queued(store: SqliteStore, *calls: Awaitable[Any]) -> list[Any]:
    """Run `calls` queued behind one another: the store's thread is held until all are queued. Their outcomes."""
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    assert store._executor is not None
    held = asyncio.ensure_future(store._executor.call(hold))
    await asyncio.to_thread(started.wait, 10)
    running = [asyncio.ensure_future(c) for c in calls]
    await asyncio.sleep(0)  # each one queued its hop
    release.set()
    await held
    return await asyncio.gather(*running, return_exceptions=True)


async def _statements(store: SqliteStore) -> list[str]:
    seen: list[str] = []
    await store._call(lambda: store._open_conn().set_trace_callback(seen.append))
    return seen


async def _count(store: SqliteStore, sql: str) -> int:
    return int(await store._call(lambda: store._open_conn().execute(sql).fetchone()[0]))


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    opened = SqliteStore(tmp_path / "hilo.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_turns_queued_together_commit_once_and_each_gets_its_own_outcome(store: SqliteStore) -> None:
    first = await store.ingest(_msg(0), 5)
    assert first is not None
    seen = await _statements(store)
    outcomes = await _queued(store, *(store.ingest(_msg(k), 5) for k in range(1, 6)),
                             store.ingest(_msg(0), 5))  # a redelivery: rolled back to its savepoint
    assert [o.message.external_id for o in outcomes[:5]] == [f"m{k}" for k in range(1, 6)]
    assert outcomes[5].resumed and outcomes[5].message.id == first.message.id  # unanswered: its turn resumes
    assert seen.count("BEGIN IMMEDIATE") == 1 and seen.count("COMMIT") == 1
    assert seen.count("SAVEPOINT tx") == 6
    assert await _count(store, "SELECT count(*) FROM messages") == 6


async def test_a_failing_write_in_a_group_is_undone_alone(store: SqliteStore) -> None:
    async def fails(db: SqliteDb) -> None:
        await db.run("INSERT INTO users (handle, created_at) VALUES ('ghost', '2026-12-07T00:00:00Z')")
        raise ValueError("after its insert")

    seen = await _statements(store)
    outcomes = await _queued(store, store.ingest(_msg(1), 5), store._tx("write", fails), store.ingest(_msg(2), 5))
    assert seen.count("COMMIT") == 1 and seen.count("ROLLBACK TO tx") == 1  # in one group, its savepoint undone
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[0].message.external_id == "m1" and outcomes[2].message.external_id == "m2"
    assert await _count(store, "SELECT count(*) FROM users WHERE handle = 'ghost'") == 0
    assert await _count(store, "SELECT count(*) FROM messages") == 2


async def test_an_error_that_ends_the_transaction_fails_the_writes_before_it_and_not_those_after(
        store: SqliteStore) -> None:
    """Disk full or an I/O error may roll the whole transaction back, not the statement alone: the writes released
    before it went with it (their callers get StoreUnavailable, to retry), the ones after run on their own."""
    async def ends(db: SqliteDb) -> None:
        db.conn.execute("ROLLBACK")  # what SQLite does on such an error
        raise sqlite3.OperationalError("database or disk is full")

    outcomes = await _queued(store, store.ingest(_msg(1), 5), store._tx("write", ends), store.ingest(_msg(2), 5))
    assert isinstance(outcomes[0], StoreUnavailable) and "rolled back" in str(outcomes[0])
    assert isinstance(outcomes[1], StoreUnavailable) and "full" in str(outcomes[1])
    assert outcomes[2].message.external_id == "m2"
    assert [r[0] for r in await store._call(lambda: store._open_conn().execute(
        "SELECT external_id FROM messages").fetchall())] == ["m2"]


async def test_a_commit_that_fails_fails_every_write_of_the_group(store: SqliteStore) -> None:
    """Nobody hears of a success before the COMMIT: when it fails, nothing of the group is stored and every caller
    gets the error. (A deferred foreign key is checked at COMMIT: hilo's schema has none, disk full is the real
    case; the test's own table makes the COMMIT fail.)"""
    await store._call(lambda: store._open_conn().executescript(
        "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
        "CREATE TABLE child (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);"))

    async def orphan(db: SqliteDb) -> str:
        await db.run("INSERT INTO child (p) VALUES (42)")
        return "released"

    outcomes = await _queued(store, store.ingest(_msg(1), 5), store._tx("write", orphan), store.ingest(_msg(2), 5))
    assert all(isinstance(o, StoreError) and "FOREIGN KEY" in str(o) for o in outcomes), outcomes
    assert await _count(store, "SELECT count(*) FROM messages") == 0
    assert await _count(store, "SELECT count(*) FROM child") == 0
    turn = await store.ingest(_msg(3), 5)  # the store goes on
    assert turn is not None and await _count(store, "SELECT count(*) FROM messages") == 1


LIMITS = [("web:visitor:v1", 100, 60), ("web:ip:127.0.0.1", 100, 60)]  # (key, hits allowed, window in s)


class Locked:
    """A store that waits 300 ms for a lock, the statements it runs, and another connection to lock it with."""

    def __init__(self, store: SqliteStore, holder: sqlite3.Connection, seen: list[str]) -> None:
        self.store, self.holder, self.seen = store, holder, seen

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Inside: another connection holds the write lock (a process writing, a backup, `sqlite3` at a prompt)."""
        self.holder.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            self.holder.execute("ROLLBACK")


@pytest.fixture
async def locked(tmp_path: Path) -> AsyncIterator[Locked]:
    store = SqliteStore(tmp_path / "hilo.db", busy_timeout_ms=300)
    await store.open()
    holder = sqlite3.connect(tmp_path / "hilo.db", isolation_level=None)
    try:
        yield Locked(store, holder, await _statements(store))
    finally:
        holder.close()
        await store.close()


@pytest.mark.parametrize("limits", [[], LIMITS], ids=["no limits", "web limits"])
async def test_a_group_that_waited_for_a_lock_in_vain_fails_each_write_without_waiting_again(
        locked: Locked, limits: list[tuple[str, int, int]]) -> None:
    """Another process holds the write lock past busy_timeout: the group's BEGIN waited it once for every write
    queued in it. Each write then tries once more on its own, without waiting: a webhook's message goes to the
    journal and is acknowledged after one busy_timeout, not after one more for each message queued before it (16
    webhooks at once waited 85 s for the first acknowledgement: tests/test_inbound_faults.py). A web message's
    rate limits, counted apart when it was not stored, do not wait either, nor wait again once counted."""
    store, seen = locked.store, locked.seen
    with locked.held():
        outcomes = await _queued(store, *(store.ingest(_msg(k), 5, limits=limits) for k in range(1, 6)))
    assert all(isinstance(o, StoreUnavailable) and "locked" in str(o) for o in outcomes), outcomes
    begins = [k for k, sql in enumerate(seen) if sql == "BEGIN IMMEDIATE"]
    assert len(begins) == 1 + 5 * (2 if limits else 1)  # the group's, then each write's own try (and its count)
    waits = [sql for sql in seen if sql.startswith("PRAGMA busy_timeout")]
    assert waits == ["PRAGMA busy_timeout = 0", "PRAGMA busy_timeout = 300"]
    assert seen.index(waits[0]) < begins[1] and begins[-1] < seen.index(waits[1])
    turn = await store.ingest(_msg(6), 5)  # the lock gone, the store goes on, and waits for a lock again
    assert turn is not None and await _count(store, "PRAGMA busy_timeout") == 300


async def test_a_lone_write_that_waited_for_a_lock_in_vain_counts_its_limits_without_waiting_again(
        locked: Locked) -> None:
    """A web message alone in the queue waits busy_timeout for another process's lock, then fails; its rate limits
    are still counted apart (a refused message counts), but without a second wait: its 503 comes after one
    busy_timeout (5 s by default), not two."""
    store = locked.store
    with locked.held(), pytest.raises(StoreUnavailable, match="locked"):
        await store.ingest(_msg(1), 5, limits=LIMITS)
    assert [sql for sql in locked.seen if sql.startswith(("BEGIN", "PRAGMA busy_timeout"))] == [
        "BEGIN IMMEDIATE",  # the message's transaction: waited 300 ms in vain
        "PRAGMA busy_timeout = 0", "BEGIN IMMEDIATE", "PRAGMA busy_timeout = 300"]  # its limits, not waiting
    turn = await store.ingest(_msg(2), 5, limits=LIMITS)  # the lock gone: stored, and its limits counted
    assert turn is not None and await _count(store, "PRAGMA busy_timeout") == 300
    # the refused message's hits could not be written either (the lock was held): only this one's
    assert await _count(store, "SELECT max(hits) FROM rate_counters") == 1
