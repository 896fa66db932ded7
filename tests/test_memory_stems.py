"""Memories' terms are stems (memory/memory_match.py over memory/stems.py), English and Spanish alike: a question
and `/forget <words>` meet a memory whatever the form of its words, on both backends; and memories stored before
migration 0018 (plain words) get their stems at open (memory/reindex.py), SQLite and Postgres."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import pytest

from memory.dialect_sqlite import SqliteStore
from memory.memory_match import memory_terms, query_words
from memory.memory_score import score_memories
from memory.migrate import Migration, apply_postgres, discover
from memory.open import open_store
from memory.store import ContextQuery, MemoryDraft, Store
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.test_migrate import old_sqlite


def test_a_memory_and_a_question_meet_through_their_stems() -> None:
    assert {"hike", "hiking"} <= set(memory_terms("I love hiking"))
    assert query_words("hike?") == (("hike", "hik"),)
    assert "sender" in memory_terms("Me encanta el senderismo") and ("senderista", "sender") in query_words(
        "senderista")


async def test_questions_and_forget_words_find_memories_by_stem(store: Store) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    hiking = (await store.add_memory(uid, MemoryDraft("I love hiking", kind="preference"))).memory
    senderismo = (await store.add_memory(uid, MemoryDraft("Me encanta el senderismo", kind="preference"))).memory
    await store.add_memory(uid, MemoryDraft("works at Acme"))
    assert [m.id for m in await store.find_memories(uid, "hike")] == [hiking.id]
    assert [m.id for m in await store.find_memories(uid, "senderista")] == [senderismo.id]
    at = store.clock()
    rows = await store.load_context(ContextQuery(user_id=uid, surface="cli", conversation_id=None,
                                                 current_message_id=None, at=at, cross_since=at - timedelta(days=1)))
    by_id = {m.id: m for m in rows.facts}
    for question, wanted in (("Do you know where I like to hike?", hiking.id),
                             ("¿Qué tal las caminatas de senderistas?", senderismo.id)):
        scores = score_memories(rows.facts, question, at)
        relevance = {m.id: s["relevance"] for m, s in zip(rows.facts, scores, strict=True)}
        assert max(relevance, key=lambda i: relevance[i]) == wanted, (question, relevance, by_id)
        assert relevance[wanted] > 0


def _before_stems(dialect: str) -> list[Migration]:
    return [m for m in discover(dialect) if m.name < "0018"]


OLD = "INSERT INTO memories(id, user_id, kind, content, terms, created_at, updated_at) VALUES "


async def _old_memories_get_stems(store: Store) -> None:
    await store.open()
    try:
        assert "0018_memory_stems" in store.applied
        found = {m.id: m for m in await store.memories(1)}
        assert set(found[3].terms) >= {"hike", "hiking"} and set(found[7].terms) >= {"senderismo", "sender"}
        assert [m.id for m in await store.find_memories(1, "hike")] == [3]
        assert [m.id for m in await store.find_memories(1, "senderista")] == [7]
    finally:
        await store.close()


async def test_sqlite_memories_stored_before_stems_get_them_at_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_sqlite(path, "0018", OLD + "(3, 1, 'preference', 'I love hiking', 'love hiking', ?, ?), "
               "(7, 1, 'preference', 'Me encanta el senderismo', 'encanta senderismo', ?, ?)")
    await _old_memories_get_stems(SqliteStore(path))
    with closing(sqlite3.connect(path)) as c:
        stored = dict(c.execute("SELECT id, terms FROM memories").fetchall())
    assert set(stored[3].split()) == set(memory_terms("I love hiking"))  # stored, not only computed on read


async def test_postgres_memories_stored_before_stems_get_them_at_open() -> None:
    import asyncpg

    url = SERVER.create_database()
    conn = await asyncpg.connect(url)
    try:
        await apply_postgres(conn, _before_stems("postgres"))
        await conn.execute(
            "INSERT INTO users(id, handle, created_at) VALUES (1, 'ana', now());"
            + OLD + "(3, 1, 'preference', 'I love hiking', 'love hiking', now(), now()), "
            "(7, 1, 'preference', 'Me encanta el senderismo', 'encanta senderismo', now(), now())")
    finally:
        await conn.close()
    await _old_memories_get_stems(open_store(url))
    conn = await asyncpg.connect(url)
    try:
        stored = await conn.fetchval("SELECT terms FROM memories WHERE id = 3")
    finally:
        await conn.close()
    assert set(stored.split()) == set(memory_terms("I love hiking"))


@pytest.mark.parametrize("text", ["", "the of and"])
def test_a_memory_with_no_word_worth_a_term_has_none(text: str) -> None:
    assert memory_terms(text) == ()
