"""SQLite's FTS5 index written behind the turns (memory/sqlite_fts.py, migrations/sqlite/0046): a message is
recalled from the moment it is stored, the index catches up in batches on the store's worker when it is idle, a
message deleted or changed before then leaves the index as FTS5 itself would build it, and another process holding
the write lock defers the batch instead of making a turn wait."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog

from kernel.tokens import count
from kernel.types import InboundMessage
from memory import sqlite_fts, sqlite_terms
from memory.dialect_sqlite import SqliteStore
from memory.sqlite_worker import Worker
from memory.stems import query_terms
from memory.store import ContextQuery, ImportRow, Ingested

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def no_idle_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker never indexes by itself: only what a test calls does."""
    monkeypatch.setattr(sqlite_fts, "BATCH", 10**9)
    monkeypatch.setattr(sqlite_fts, "IDLE_S", 3600.0)


def _sql(path: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute(sql, args).fetchall()


def _upto(path: Path) -> int:
    return int(_sql(path, "SELECT upto FROM fts_progress")[0][0])


def _check(path: Path) -> None:
    """FTS5's integrity check of the index against its content, the messages up to `upto` (raises when they
    differ), and the index as FTS5 rebuilds it from that content is the same."""
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
        conn.execute("CREATE VIRTUAL TABLE temp.inst USING fts5vocab(main, messages_fts, 'instance')")
        before = conn.execute("SELECT term, doc FROM temp.inst ORDER BY 1, 2").fetchall()
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        assert conn.execute("SELECT term, doc FROM temp.inst ORDER BY 1, 2").fetchall() == before


async def _ingest(store: SqliteStore, sender: str, text: str, i: int) -> Ingested:
    """A turn's first hop: the message stored, its lease taken (SQLite: ingest_turn)."""
    turn = await store.ingest(InboundMessage(surface="telegram", sender=sender, external_id=f"{sender}-{i}",
                                             text=text, handle=sender, received_at=T0 + timedelta(minutes=i)),
                              count(text))
    assert turn is not None
    return turn


async def _say(store: SqliteStore, sender: str, text: str, i: int) -> int:
    return (await _ingest(store, sender, text, i)).message.id


async def test_a_message_is_recalled_before_the_index_holds_it(tmp_path: Path, no_idle_runs: None) -> None:
    path = tmp_path / "hilo.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        kayak = await _say(store, "kim", "we took the kayak out on the lake", 0)
        await _say(store, "kim", "lunch at noon", 1)
        await _say(store, "lee", "my kayak is red", 2)
        assert _upto(path) == 0  # all three behind the index
        kim = int(_sql(path, "SELECT user_id FROM messages WHERE id = ?", kayak)[0][0])

        async def hits(text: str) -> list[int]:
            q = ContextQuery(user_id=kim, surface="web", conversation_id=None, current_message_id=None,
                             at=T0 + timedelta(days=1), cross_since=T0 + timedelta(days=1), search_text=text)
            lexical, _ = await store._tx("reads", lambda db: db.hits(q, query_terms(text), db.ids([]), 10, 5))
            return [int(m) for m, _ in lexical]

        # the person's own message of the tail, not lee's, and not the one that holds none of the words
        assert await hits("kayak") == [kayak]
        assert await hits("zeppelin") == []
        assert await store.index_behind() == 3
        assert _upto(path) == 3
        assert await hits("kayak") == [kayak]  # the same, from the index now
        _check(path)
    finally:
        await store.close()


async def test_the_worker_indexes_a_batch_when_idle_and_a_smaller_tail_when_forced(
        tmp_path: Path, no_idle_runs: None, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hilo.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        monkeypatch.setattr(sqlite_fts, "BATCH", 4)
        await store._call(lambda: store._index_idle(True))  # what opening left: nothing
        ids = [await _say(store, "kim", f"note number {i}", i) for i in range(3)]
        # three writes: fewer than a batch, left for a forced run
        assert await store._call(lambda: store._index_idle(False)) is True
        assert _upto(path) == 0
        assert await store._call(lambda: store._index_idle(True)) is False
        assert _upto(path) == ids[-1]
        more = [await _ingest(store, "kim", f"note number {i}", i) for i in range(3, 7)]
        # a batch's worth, but the last write was a turn's first hop: its second hop is near, and would wait for
        # the batch, so the batch waits for it
        assert await store._call(lambda: store._index_idle(False)) is True
        assert _upto(path) == ids[-1]
        await store.finish_turn(more[-1], "noted", 1, [])
        # after the turn's second hop: indexed at once (its reply too), the worker then owes nothing
        assert await store._call(lambda: store._index_idle(False)) is False
        assert _upto(path) == _sql(path, "SELECT max(id) FROM messages")[0][0] > more[-1].message.id
        assert await store._call(lambda: store._index_idle(False)) is False
        # a turn's first hops only, HOLD batches' worth of them: indexed at once all the same
        held = [await _say(store, "kim", f"note number {i}", i)
                for i in range(10, 10 + sqlite_fts.BATCH * sqlite_fts.HOLD)]
        assert await store._call(lambda: store._index_idle(False)) is False
        assert _upto(path) == held[-1]
        # a tail longer than a slice: one slice a run, and more is said to be left
        monkeypatch.setattr(sqlite_fts, "SLICE", 2)
        last = [await _say(store, "kim", f"note number {i}", i) for i in range(7, 10)]
        assert await store._call(lambda: store._index_idle(True)) is True
        assert _upto(path) == last[1]
        assert await store._call(lambda: store._index_idle(True)) is False
        assert _upto(path) == last[2]
        _check(path)
    finally:
        await store.close()


async def test_deleted_and_changed_messages_behind_the_index_leave_it_consistent(tmp_path: Path,
                                                                                no_idle_runs: None) -> None:
    path = tmp_path / "hilo.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        indexed = await _say(store, "kim", "the indexed one about kayaks", 0)
        await store.index_behind()
        behind = [await _say(store, "kim", f"kayak day {i}", i) for i in range(1, 4)]
        other = await _say(store, "lee", "kayak for lee", 9)
        # one of the tail deleted, one changed, and an indexed one changed (its postings move through the trigger)
        _sql(path, "DELETE FROM messages WHERE id = ?", behind[0])
        _sql(path, "UPDATE messages SET terms = 'zeppelin' WHERE id IN (?, ?)", behind[1], indexed)
        await store.index_behind()
        _check(path)
        assert _upto(path) == other
        # a person's messages gone (`hilo forget`): the index holds none of theirs, the other's still
        kim, lee = (_sql(path, "SELECT user_id FROM messages WHERE id = ?", i)[0][0] for i in (indexed, other))
        assert await store.forget("kim") is True
        _check(path)
        owners = "SELECT term, doc FROM messages_fts_vocab WHERE term IN (?, ?)"
        assert _sql(path, owners, f"u{kim}", f"u{lee}") == [(f"u{lee}", 1)]
    finally:
        await store.close()


async def test_another_writer_defers_the_batch_instead_of_making_a_turn_wait(tmp_path: Path,
                                                                           no_idle_runs: None) -> None:
    path = tmp_path / "hilo.db"
    store = SqliteStore(str(path), busy_timeout_ms=5000)
    await store.open()
    try:
        said = await _say(store, "kim", "kayak trip", 0)
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # another process writes: the lock is held
            with structlog.testing.capture_logs() as logs:
                # not the store's 5 s busy wait: at once, and nothing is lost
                assert await asyncio.wait_for(store._call(lambda: store._index_idle(True)), 2.0) is False
            other.execute("ROLLBACK")
        assert [e["event"] for e in logs] == ["store.fts_deferred"] and logs[0]["waiting"] >= 1
        assert _upto(path) == 0
        # the store's own busy wait is back for its turns, and the next run indexes the tail
        assert await store._call(lambda: store._open_conn().execute("PRAGMA busy_timeout").fetchone()[0]) == 5000
        assert await store._call(lambda: store._index_idle(True)) is False
        assert _upto(path) == said
    finally:
        await store.close()


async def test_close_leaves_nothing_behind_the_index(tmp_path: Path, no_idle_runs: None) -> None:
    path = tmp_path / "hilo.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        last = [await _say(store, "kim", f"note {i}", i) for i in range(5)][-1]
        assert _upto(path) == 0
    finally:
        await store.close()
    assert _upto(path) == last
    _check(path)


async def test_the_worker_runs_its_idle_work_between_calls() -> None:
    """memory/sqlite_worker.py's `idle`: called unforced when a call ends and none waits; when it asks for it, called
    forced once the thread has been idle `idle_after`, again while it says more is left."""
    seen: list[bool] = []
    forced = threading.Event()
    answers = [True, True, True, False]  # unforced: later, please; forced: more, more, done; then nothing left

    def idle(force: bool) -> bool:
        seen.append(force)
        if force and seen.count(True) == 3:
            forced.set()
        return answers.pop(0) if answers else False

    worker = Worker("hilo-sqlite-idle-test", idle, idle_after=0.05)
    try:
        assert await worker.call(lambda: "first") == "first"
        assert await asyncio.to_thread(forced.wait, 10)
        assert await worker.call(lambda: "after") == "after"
        assert seen[:4] == [False, True, True, True]
    finally:
        worker.close()


async def test_close_does_not_wait_for_another_writer_and_the_next_write_indexes_what_it_left(
        tmp_path: Path, no_idle_runs: None) -> None:
    path = tmp_path / "hilo.db"
    store = SqliteStore(str(path), busy_timeout_ms=5000)
    await store.open()
    # imported, not a turn: a turn's lease is released at close, and that write does wait for the lock
    await store.import_rows([ImportRow("kim", "telegram", "user", "kayak trip", T0, 3, "kim-0", "talk")])
    first = int(_sql(path, "SELECT max(id) FROM messages")[0][0])
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        await asyncio.wait_for(store.close(), 2.0)  # not the 5 s busy wait
        other.execute("ROLLBACK")
    assert _upto(path) == 0
    store = SqliteStore(str(path))
    await store.open()
    try:
        second = await _say(store, "lee", "canoe trip", 1)
        assert await store._call(lambda: store._index_idle(True)) is False
        assert _upto(path) == second > first
        _check(path)
    finally:
        await store.close()


async def test_a_failing_idle_run_leaves_the_worker_serving() -> None:
    failed = threading.Event()

    def idle(force: bool) -> bool:
        failed.set()
        raise RuntimeError("a bug in the idle work")

    worker = Worker("hilo-sqlite-idle-test", idle, idle_after=0.05)
    try:
        with structlog.testing.capture_logs() as logs:
            assert await worker.call(lambda: 1) == 1
            assert await asyncio.to_thread(failed.wait, 10)
            # the thread got through its failed idle run (logged) before it took this call
            assert await worker.call(lambda: 2) == 2
        assert logs[0] == {"event": "store.idle_failed", "error": "RuntimeError", "log_level": "error"}
        assert {e["event"] for e in logs} == {"store.idle_failed"}
    finally:
        worker.close()


async def test_recall_reads_the_tail_as_a_rowid_range_whatever_the_persons_history(tmp_path: Path) -> None:
    """The tail is seconds of messages after `upto`: read by the rowid, never through the person's user_id index
    (which holds all of their history: recall's cost would grow with it)."""
    path = tmp_path / "hilo.db"
    store = SqliteStore(str(path))
    await store.open()
    await store.close()
    with closing(sqlite3.connect(path)) as conn:
        sql = sqlite_terms.hits_sql(2)
        params = [None] * max(int(n) for n in re.findall(r"\?(\d+)", sql))
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    # (the tail's step reads `messages` by that name; `x` is the candidates' rows, read by their ids)
    assert [step for step in plan if step.startswith("SEARCH messages ")] == [
        "SEARCH messages USING INTEGER PRIMARY KEY (rowid>?)"]
