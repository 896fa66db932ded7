"""SQLite's FTS5 index keeps each person's postings apart (migrations/sqlite/0033, memory/sqlite_terms.py): a
term's postings and document frequency are the person's own, whoever else says it, and they follow the messages
when two people are linked into one."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kernel.tokens import count
from kernel.types import InboundMessage
from memory import sqlite_terms
from memory.dialect_sqlite import SqliteStore
from memory.pg_terms import idf
from memory.stems import query_terms
from memory.store import ImportRow

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def rows(handle: str, texts: list[str], surface: str = "web") -> list[ImportRow]:
    return [ImportRow(handle, surface, "user", text, T0 + timedelta(minutes=5 * i), count(text), f"{handle}-{i}",
                      "talk") for i, text in enumerate(texts)]


def postings(path: Path, user_id: int, term: str) -> list[int]:
    with closing(sqlite3.connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid",
                                           (sqlite_terms.term_query(user_id, term),))]


async def test_a_terms_postings_and_frequency_are_the_persons_own(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "hilo.db"))
    await store.open()
    try:
        await store.import_rows(rows("kim", ["we took the kayak out", *[f"lunch at noon, day {i}" for i in range(9)]]))
        await store.import_rows(rows("lee", [f"kayak session number {i}" for i in range(300)]))
        kim, lee = await store.user_id("kim"), await store.user_id("lee")
        (kayak,) = query_terms("kayak")
        with closing(sqlite3.connect(tmp_path / "hilo.db")) as conn:
            kims = [r[0] for r in conn.execute("SELECT id FROM messages WHERE user_id = ? AND content LIKE '%kayak%'",
                                               (kim,))]
        assert postings(tmp_path / "hilo.db", kim, kayak) == kims and len(kims) == 1
        assert len(postings(tmp_path / "hilo.db", lee, kayak)) == 300

        async def weights(user_id: int) -> list[float]:
            idfs, _ = await store._tx("reads", lambda db: sqlite_terms.weights(db, "messages", user_id, [kayak]))
            return list(idfs)
        # rare in kim's ten messages, whatever lee says all day; in every one of lee's: the floor
        assert await weights(kim) == [idf(1, 10)] and idf(1, 10) > 1.5
        assert await weights(lee) == [idf(300, 300)] == [1e-6]
    finally:
        await store.close()


async def test_linking_moves_the_postings_to_the_person_they_join(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "hilo.db"))
    await store.open()
    try:
        await store.import_rows(rows("kim", ["hello there"]))
        turn = await store.ingest(InboundMessage(surface="telegram", sender="42", external_id="t1",
                                                 text="booked the zanzibar flights"), 5)
        zanzibar = query_terms("zanzibar")[0]
        assert postings(tmp_path / "hilo.db", turn.user_id, zanzibar) == [turn.message.id]
        kim = await store.link_identity("kim", "telegram", "42", "operator")
        assert kim is not None and kim != turn.user_id
        assert postings(tmp_path / "hilo.db", kim, zanzibar) == [turn.message.id]
        assert postings(tmp_path / "hilo.db", turn.user_id, zanzibar) == []
    finally:
        await store.close()
