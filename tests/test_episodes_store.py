"""Episodes and stemmed recall in the store, on both backends: episode assignment (the hour's gap, one
conversation each), recall across inflections, forget, and the upgrade of rows stored before migration 0013."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from memory.episodes import MAX_MESSAGES
from memory.migrate import apply_postgres, apply_sqlite, discover
from memory.open import open_store
from memory.rows import as_dt
from memory.store import ContextQuery, ImportRow, Store
from tests.backends import Backend, TestClock
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.test_store_contract import msg, put, query

T0 = datetime(2025, 3, 1, 9, tzinfo=UTC)


def episodes_of(backend: Backend) -> list[tuple[int, int]]:
    """(message id, episode id) of every message, by message id."""
    return [(int(m), int(e)) for m, e in backend.select("SELECT id, episode_id FROM messages ORDER BY id")]


async def test_a_gap_over_an_hour_starts_a_new_episode(store: Store, backend: Backend) -> None:
    await put(store, msg("telegram", "1", "a1", "first", T0))
    await put(store, msg("telegram", "1", "a2", "59 minutes later", T0 + timedelta(minutes=59)))
    await put(store, msg("telegram", "1", "a3", "then 61 minutes later", T0 + timedelta(minutes=120)))
    rows = episodes_of(backend)
    assert len(rows) == 3
    first, second = rows[0][1], rows[2][1]
    assert rows[1][1] == first, "a message within the hour joins the episode"
    assert second != first
    counts = dict(backend.select("SELECT id, message_count FROM episodes"))
    assert counts == {first: 2, second: 1}


async def test_a_message_delivered_late_joins_its_episode_and_moves_its_start_back(store: Store,
                                                                                 backend: Backend) -> None:
    await put(store, msg("telegram", "1", "b1", "sent second, stored first", T0 + timedelta(minutes=10)))
    await put(store, msg("telegram", "1", "b2", "sent first, delivered late", T0))
    await put(store, msg("telegram", "1", "b3", "and one more", T0 + timedelta(minutes=20)))
    rows = episodes_of(backend)
    assert len({e for _, e in rows}) == 1, "all three are one run of the conversation"
    (start, end, n), = backend.select("SELECT started_at, ended_at, message_count FROM episodes")
    assert (as_dt(start), as_dt(end), n) == (T0, T0 + timedelta(minutes=20), 3)


async def test_a_reply_joins_the_episode_of_what_it_answers(store: Store, backend: Backend, clock: TestClock) -> None:
    turn = await put(store, msg("telegram", "1", "a1", "a question", clock()))
    await store.finish_turn(turn, "an answer", 2, [])
    rows = episodes_of(backend)
    assert len(rows) == 2 and rows[0][1] == rows[1][1]
    assert backend.select("SELECT message_count, token_count FROM episodes") == [(2, len("a question".split()) + 2)]


async def test_each_conversation_has_its_own_episodes(store: Store, backend: Backend) -> None:
    await put(store, msg("telegram", "1", "t1", "on telegram", T0, handle="ana"))
    await put(store, msg("cli", "1", "c1", "on the cli a minute later", T0 + timedelta(minutes=1), handle="ana"))
    rows = episodes_of(backend)
    assert rows[0][1] != rows[1][1]


async def test_an_import_places_its_rows_in_episodes_once(store: Store, backend: Backend) -> None:
    rows = [ImportRow("ana", "telegram", "user", f"line {i} about hiking", T0 + timedelta(minutes=20 * i), 3, f"i{i}")
            for i in range(4)]
    rows.append(ImportRow("ana", "telegram", "user", "next day", T0 + timedelta(days=1), 2, "i9"))
    assert (await store.import_rows(rows)).inserted == 5
    assert (await store.import_rows(rows)).inserted == 0  # again: skipped, and counted once
    assert sorted(c for _, c in backend.select("SELECT id, message_count FROM episodes")) == [1, 4]
    terms = backend.select("SELECT terms FROM episodes WHERE message_count = 4")[0][0]
    assert terms.split().count("hike") == 4


async def test_recall_finds_a_stemmed_variant(store: Store) -> None:
    said = await put(store, msg("cli", "ana", "s1", "We went hiking in the mountains", T0, handle="ana"))
    await put(store, msg("cli", "ana", "s2", "Caminatas por la sierra", T0 + timedelta(minutes=2), handle="ana"))
    for question, found in (("Where did I hike?", "s1"), ("¿Dónde hice la caminata?", "s2"),
                            ("¿cuándo fue la CAMINATA?", "s2")):
        rows = await store.load_context(query(said, search_text=question, current_message_id=None,
                                              conversation_id=None))
        assert rows.recalled[0].external_id == found, question
        assert set(rows.recall_scores[rows.recalled[0].id]) >= {"bm25", "episode", "neighbour", "date", "fused"}


async def test_forget_removes_episodes(store: Store, backend: Backend) -> None:
    ana = await put(store, msg("telegram", "1", "a1", "hello hiking", T0))
    await put(store, msg("telegram", "2", "b1", "hello from bob", T0))
    assert backend.count("episodes") == 2
    assert await store.forget(ana.handle)
    assert backend.select("SELECT user_id FROM episodes") == [(ana.user_id + 1,)]


async def test_rows_stored_before_0013_get_terms_and_episodes_on_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        every = discover("sqlite")
        apply_sqlite(conn, [m for m in every if m.name < "0013"])
        ts = [f"2025-03-01T09:{m:02d}:00.000000Z" for m in range(3)]
        conn.execute("INSERT INTO users(id, handle, created_at) VALUES (1, 'ana', ?)", (ts[0],))
        conn.execute("INSERT INTO conversations(id, user_id, surface, singleton, created_at, updated_at) "
                     "VALUES (1, 1, 'cli', 1, ?, ?)", (ts[0], ts[0]))
        for i, text in enumerate(["I went hiking today", "lovely, where?", "Caminatas en la sierra"]):
            conn.execute("INSERT INTO messages(conversation_id, user_id, surface, role, content, created_at) "
                         "VALUES (1, 1, 'cli', ?, ?, ?)", ("user" if i != 1 else "assistant", text, ts[i]))
    store = open_store(f"sqlite:///{path}")
    await store.open()  # migrates, then reindexes what 0013 could not
    try:
        rows = await store.load_context(query_for(1, "Where did I hike?"))
        assert [m.content for m in rows.recalled][:2] == ["I went hiking today", "lovely, where?"]
        rows = await store.load_context(query_for(1, "caminata"))
        assert rows.recalled[0].content == "Caminatas en la sierra"
    finally:
        await store.close()
    with closing(sqlite3.connect(path)) as conn:
        left = conn.execute("SELECT count(*) FROM messages WHERE terms IS NULL OR episode_id IS NULL").fetchone()
        assert left == (0,)
        assert conn.execute("SELECT message_count FROM episodes").fetchall() == [(3,)]


def query_for(user_id: int, text: str) -> ContextQuery:
    at = datetime(2025, 3, 2, tzinfo=UTC)
    return ContextQuery(user_id=user_id, surface="web", conversation_id=None, current_message_id=None, at=at,
                        cross_since=at, search_text=text)


async def test_postgres_rows_stored_before_0013_get_terms_and_episodes_on_upgrade() -> None:
    url = SERVER.create_database()
    conn = await asyncpg.connect(SERVER.uri(db_name(url)))
    try:
        await apply_postgres(conn, [m for m in discover("postgres") if m.name < "0013"])
        await conn.execute("INSERT INTO users(id, handle, created_at) VALUES (1, 'ana', $1)", T0)
        await conn.execute("INSERT INTO conversations(id, user_id, surface, singleton, created_at, updated_at) "
                           "VALUES (1, 1, 'cli', true, $1, $1)", T0)
        for i, text in enumerate(["I went hiking today", "lovely, where?", "Caminatas en la sierra"]):
            await conn.execute("INSERT INTO messages(conversation_id, user_id, surface, role, content, created_at) "
                               "VALUES (1, 1, 'cli', $1, $2, $3)", "user" if i != 1 else "assistant", text,
                               T0 + timedelta(minutes=i))
    finally:
        await conn.close()
    store = open_store(url)
    await store.open()
    try:
        rows = await store.load_context(query_for(1, "Where did I hike?"))
        assert [m.content for m in rows.recalled][:2] == ["I went hiking today", "lovely, where?"]
        rows = await store.load_context(query_for(1, "caminata"))
        assert rows.recalled[0].content == "Caminatas en la sierra"
    finally:
        await store.close()
    left = SERVER.query(db_name(url), "SELECT count(*) FROM messages WHERE terms IS NULL OR episode_id IS NULL")
    assert left[0][0] == 0
    assert [tuple(r) for r in SERVER.query(db_name(url), "SELECT message_count FROM episodes")] == [(3,)]


async def test_an_episode_holds_at_most_max_messages_live_and_imported(store: Store, backend: Backend) -> None:
    # live: a message a minute, never an hour's gap
    for i in range(MAX_MESSAGES + 3):
        await put(store, msg("telegram", "1", f"live{i}", f"note {i}", T0 + timedelta(minutes=i)))
    live = backend.select("SELECT message_count FROM episodes ORDER BY id")
    assert live == [(MAX_MESSAGES,), (3,)]
    # imported: the run continues the open episode until it is full, then new ones (another conversation)
    rows = [ImportRow("bo", "whatsapp", "user", f"line {i}", T0 + timedelta(minutes=i), 2, f"imp{i}")
            for i in range(2 * MAX_MESSAGES + 5)]
    await store.import_rows(rows[:10])
    await store.import_rows(rows[10:])
    imported = backend.select("SELECT message_count FROM episodes WHERE surface = 'whatsapp' ORDER BY id")
    assert imported == [(MAX_MESSAGES,), (MAX_MESSAGES,), (5,)]
    per_episode = backend.select("SELECT episode_id, count(*) FROM messages WHERE surface = 'whatsapp' "
                                 "GROUP BY episode_id ORDER BY episode_id")
    assert [n for _, n in per_episode] == [MAX_MESSAGES, MAX_MESSAGES, 5]
