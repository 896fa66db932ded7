"""The conversation windows the SQLite store keeps between turns (memory/windows.py): a turn reads only the rows
written after the window it kept, and what it sees is what the statement without a window gives, whatever
changed the rows meanwhile (this connection's forget, rewrite or rollback; another connection's delete)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from kernel.types import InboundMessage, utcnow
from memory import sql_turns
from memory.dialect_sqlite import SqliteStore
from memory.rows import Db, Rollback
from memory.store import ContextQuery, ContextRows, Ingested
from memory.windows import PER_MESSAGE, SLACK, WATCHED_COLUMNS, weight


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "hilo.db")
    await s.open()
    yield s
    await s.close()


def _msg(ext: str, text: str, sender: str = "ana", surface: str = "telegram") -> InboundMessage:
    return InboundMessage(surface=surface, sender=sender, handle=sender, external_id=ext, text=text)


def _query(turn: Ingested, recent: int = 200, **kw: object) -> ContextQuery:
    at = kw.pop("at", utcnow())
    return ContextQuery(user_id=turn.user_id, surface=turn.message.surface, conversation_id=turn.conversation_id,
                        current_message_id=kw.pop("current", turn.message.id), at=at,  # type: ignore[arg-type]
                        cross_since=at - timedelta(hours=48), recent_limit=recent,  # type: ignore[operator]
                        search_text=turn.message.content, **kw)  # type: ignore[arg-type]


async def _without_window(db: Db, q: ContextQuery) -> ContextRows:
    db.windows = None  # the statement alone, as before windows (and as Postgres reads it)
    return await sql_turns.load_context(db, q)


async def _both(store: SqliteStore, q: ContextQuery) -> tuple[ContextRows, ContextRows]:
    """What the store's turn reads (through its window) and what the statement alone gives, at one moment."""
    return await store.load_context(q), await store._tx("read", _without_window, q)


def _ids(rows: ContextRows) -> tuple[list[int], list[int], list[int]]:
    return ([m.id for m in rows.conversation], [m.id for m in rows.cross_surface], [m.id for m in rows.recalled])


async def _turn(store: SqliteStore, ext: str, text: str, reply: str | None = "noted", **kw: str) -> Ingested:
    turn = await store.ingest(_msg(ext, text, **kw), 5)
    assert turn is not None
    if reply is not None:
        async with store.turn_lock(turn.conversation_id, turn.message.id):
            await store.finish_turn(turn, reply, 1, [])
    return turn


async def test_a_turn_reads_only_what_was_written_after_its_window(store: SqliteStore) -> None:
    recent = 6  # a window shorter than the conversation: it is trimmed as the conversation grows
    for i in range(30):
        turn = await _turn(store, f"m{i}", f"my parrot Kiwi ate mango number {i}", reply=None)
        rows, alone = await _both(store, _query(turn, recent))
        assert _ids(rows) == _ids(alone)
        assert [m.content for m in rows.conversation] == [m.content for m in alone.conversation]
        assert len(rows.conversation) == min(recent, 2 * i)
        async with store.turn_lock(turn.conversation_id, turn.message.id):
            await store.finish_turn(turn, f"noted {i}", 1, [])
    counters = store.windows.counters
    assert counters["hits"] == 29 and counters["loads"] == 1 and counters["fallbacks"] == 0
    kept = next(iter(store.windows.entries.values()))
    assert len(kept.messages) == recent + SLACK and not kept.complete
    assert store.windows.held == kept.size == weight(kept.messages)  # what trimming let go is no longer counted
    assert kept.after == turn.message.id  # its reply was written after the turn read


async def test_queued_turns_see_what_the_statement_sees(store: SqliteStore) -> None:
    await _turn(store, "q0", "Kiwi sings at dawn")
    # eleven messages arrive while the first of them waits for its turn: more than the window's slack
    queued = [await _turn(store, f"q{i}", f"and then Kiwi said {i}", reply=None) for i in range(1, 12)]
    for recent in (1, 2, 200):
        rows, alone = await _both(store, _query(queued[0], recent))
        assert _ids(rows) == _ids(alone)
        assert [m.content for m in rows.conversation] == ["Kiwi sings at dawn", "noted"][-recent:]
    # the window read first holds the newest 1 + SLACK rows: queued turns only, none of which the turn sees
    assert store.windows.counters["fallbacks"] == 3
    for turn in queued:  # their turns run, in order
        async with store.turn_lock(turn.conversation_id, turn.message.id):
            await store.finish_turn(turn, "noted", 1, [])
    for i in range(20):  # the conversation grows past its window
        await _turn(store, f"x{i}", f"more about mango {i}")
    late = await _turn(store, "late", "and a late one", reply=None)
    for recent in (1, 3):
        rows, alone = await _both(store, _query(late, recent, current=queued[0].message.id))
        assert _ids(rows) == _ids(alone)
        assert [m.content for m in rows.conversation] == ["noted"] * recent  # every user message is queued
    assert store.windows.counters["fallbacks"] == 3  # the window read anew holds replies enough


async def test_a_turn_at_an_earlier_moment_sees_no_later_row(store: SqliteStore) -> None:
    await _turn(store, "p0", "Kiwi sings at dawn")
    second = await _turn(store, "p1", "Kiwi eats mango")
    third = await _turn(store, "p2", "Kiwi sleeps")
    await store.load_context(_query(third))  # the window holds the whole conversation
    rows, alone = await _both(store, _query(second, at=second.message.created_at))
    assert _ids(rows) == _ids(alone)
    assert [m.content for m in rows.conversation] == ["Kiwi sings at dawn", "noted"]  # not its reply, nor later
    assert store.windows.counters == {"hits": 1, "loads": 1, "fallbacks": 0}


async def test_what_this_connection_deletes_or_rewrites_leaves_every_window(store: SqliteStore) -> None:
    await _turn(store, "a0", "Kiwi is my parrot")
    await _turn(store, "b0", "my cat is Tom", sender="bea")
    turn = await _turn(store, "a1", "Kiwi likes mango", reply=None)
    rows = await store.load_context(_query(turn))
    assert [m.content for m in rows.conversation] == ["Kiwi is my parrot", "noted"]
    assert await store.rewrite_message(turn.user_id, rows.conversation[0].id, "Kiwi is a green parrot", 6)
    rows, alone = await _both(store, _query(turn))
    assert [m.content for m in rows.conversation] == ["Kiwi is a green parrot", "noted"] == [
        m.content for m in alone.conversation]
    bea = await _turn(store, "b1", "Tom sleeps", reply=None, sender="bea")
    assert [m.content for m in (await store.load_context(_query(bea))).conversation] == ["my cat is Tom", "noted"]
    assert await store.forget("bea")  # a cascade from the person: every row of theirs goes
    assert (await store.load_context(_query(bea))).conversation == []
    assert [m.content for m in (await store.load_context(_query(turn))).conversation] == [
        "Kiwi is a green parrot", "noted"]


async def test_another_connections_new_messages_keep_the_windows(store: SqliteStore, tmp_path: Path) -> None:
    # A second daemon on the file (or `hilo chat`, `hilo import`) stores turns: the windows are read on from where
    # they were, its rows found by the `id > n` read. Before migration 0045 any commit of another connection dropped
    # every window (with two processes on one file, none outlived the other's next message).
    await _turn(store, "a0", "Kiwi is my parrot")
    turn = await _turn(store, "a1", "Kiwi likes mango", reply=None)
    await store.load_context(_query(turn))  # the window is kept
    second = SqliteStore(tmp_path / "hilo.db")
    await second.open()
    try:
        # the same conversation, from the other process; its reply written at once (through turn_lock it would
        # wait out the order cap, 60 s, for "Kiwi likes mango", left unanswered here)
        other = await _turn(second, "a2", "Kiwi sleeps at nine", reply=None)
        await second.finish_turn(other, "noted", 1, [])
        await _turn(second, "b0", "my cat is Tom", sender="bea")
        reindexed = await second._tx("write", lambda db: db.run("UPDATE messages SET terms = 'kiwi' WHERE id = $1",
                                                                turn.message.id))
        assert reindexed == 1  # not a column a window holds
    finally:
        await second.close()
    loads, hits = store.windows.counters["loads"], store.windows.counters["hits"]
    later = await _turn(store, "a3", "and Kiwi?", reply=None)
    rows, alone = await _both(store, _query(later))
    assert [m.content for m in rows.conversation] == [
        "Kiwi is my parrot", "noted", "Kiwi likes mango", "Kiwi sleeps at nine", "noted"] == [
        m.content for m in alone.conversation]
    assert (store.windows.counters["loads"] - loads, store.windows.counters["hits"] - hits) == (0, 1)


_REWORDED = "UPDATE messages SET content = 'Kiwi was my parrot' WHERE content = 'Kiwi is my parrot'"


@pytest.mark.parametrize(("changes", "seen"), [
    ([_REWORDED], [("Kiwi was my parrot", {}), ("noted", {})]),
    (["UPDATE messages SET metadata = '{\"edited\": true}' WHERE content = 'Kiwi is my parrot'"],
     [("Kiwi is my parrot", {"edited": True}), ("noted", {})]),
    (["DELETE FROM messages WHERE content = 'Kiwi is my parrot'"], [("noted", {})]),
    ([_REWORDED, "DELETE FROM messages WHERE role = 'assistant'"], [("Kiwi was my parrot", {})]),
])
async def test_another_connections_change_of_a_held_message_is_seen(
    store: SqliteStore, tmp_path: Path, changes: list[str], seen: list[tuple[str, dict[str, bool]]],
) -> None:
    await _turn(store, "a0", "Kiwi is my parrot")
    turn = await _turn(store, "a1", "Kiwi likes mango", reply=None)
    await store.load_context(_query(turn))  # the window is kept
    other = sqlite3.connect(tmp_path / "hilo.db", isolation_level=None)
    try:
        assert [other.execute(change).rowcount for change in changes] == [1] * len(changes)
    finally:
        other.close()
    rows, alone = await _both(store, _query(turn))
    assert [(m.content, m.metadata) for m in rows.conversation] == seen == [
        (m.content, m.metadata) for m in alone.conversation]


async def test_the_counted_columns_are_the_ones_a_window_holds(store: SqliteStore) -> None:
    sql = await store._tx("read", lambda db: db.value(
        "SELECT sql FROM sqlite_master WHERE name = 'message_changes_update'"))
    counted = sql.split("AFTER UPDATE OF", 1)[1].split(" ON messages", 1)[0]
    assert [c.strip() for c in counted.split(",")] == list(WATCHED_COLUMNS)


async def _read_then_roll_back(db: Db, turn: Ingested) -> None:
    await db.run("INSERT INTO messages (conversation_id, user_id, surface, role, content, token_count, created_at, "
                 "metadata) VALUES ($1, $2, 'web', 'assistant', 'never kept', 2, $3, '{}')",
                 turn.conversation_id, turn.user_id, db.ts(turn.message.created_at))
    rows = await sql_turns.load_context(db, _query(turn))
    assert [m.content for m in rows.conversation][-1] == "never kept"
    raise Rollback(None)


async def test_a_window_never_keeps_what_a_write_transaction_read(store: SqliteStore) -> None:
    turn = await _turn(store, "a0", "Kiwi is my parrot", reply=None)
    await store.load_context(_query(turn))  # a window is kept
    await store._tx("write", _read_then_roll_back, turn)
    rows = await store.load_context(_query(turn))
    assert "never kept" not in [m.content for m in rows.conversation]


async def test_the_windows_together_stay_within_their_bound(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "hilo.db")
    store.windows.limit = 5 * (6 * PER_MESSAGE + 3 * len("line 0") + 3 * len("noted"))  # five of them
    await store.open()
    try:
        for person in range(12):
            for i in range(3):
                turn = await _turn(store, f"{person}-{i}", f"line {i}", sender=f"p{person}")
            await store.load_context(_query(turn))
            held = [w.messages for w in store.windows.entries.values()]
            assert store.windows.held == sum(weight(m) for m in held) <= store.windows.limit
        assert len(store.windows.entries) == 5  # the newest five people's: least recently used out first
        assert [w.messages[0].user_id for w in store.windows.entries.values()] == [turn.user_id - 4 + k
                                                                                for k in range(5)]
    finally:
        await store.close()


#: The probe as it was, comparing every entry with the left-out ids: the oracle of the counted one.
BY_IDS = ("SELECT EXISTS (SELECT 1 FROM messages m WHERE m.user_id = $1 AND m.created_at <= $2 "
          "AND m.id <> ALL($3::bigint[]))")


async def _probes(db: Db, q: ContextQuery) -> tuple[bool, bool]:
    """Recall's probe as a turn asks it (sql_recall.OUTSIDE: counted, with the window's messages at hand) and the
    answer of the statement that compared ids, for the same left-out ids."""
    read = await sql_turns.read_context(db, q)
    assert read.recall is not None
    return not read.recall.nothing, bool(await db.value(BY_IDS, q.user_id, db.ts(q.at), db.ids(read.excluded)))


async def test_the_counted_probe_answers_as_comparing_ids_did(store: SqliteStore) -> None:
    # sql_recall.OUTSIDE counts the person's messages instead of comparing ids: the same answer whether
    # everything is in the window, the oldest is not, one lies after the turn's moment, or another surface holds some
    first = await _turn(store, "t0", "my parrot Kiwi likes mango")
    turns = [first] + [await _turn(store, f"t{i}", f"Kiwi ate mango number {i}") for i in range(1, 6)]
    last = turns[-1]
    cases = [
        ("everything in the window", _query(last), False),
        ("the oldest messages out of a short window", _query(last, recent=4), True),
        ("only the current message, the moment before the rest", _query(first, recent=1, at=first.message.created_at),
         False),
        ("an earlier turn's view: the later user messages are left out", _query(turns[2]), True),
    ]
    for name, q, expected in cases:
        assert await store._tx("read", _probes, q) == (expected, expected), name
    await _turn(store, "w0", "hola desde la web", surface="web")  # another surface: cross-surface, held too
    for name, q, expected in [("a cross-surface message in the window", _query(last), False),
                              ("a cross-surface message left out", _query(last, cross_limit=0), True)]:
        assert await store._tx("read", _probes, q) == (expected, expected), name
