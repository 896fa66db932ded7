"""SQLite's FTS5 index keeps each person's postings apart (migrations/sqlite/0033, memory/sqlite_terms.py): a
term's postings and document frequency are the person's own, whoever else says it, and they follow the messages
when two people are linked into one."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kernel.tokens import count
from kernel.types import InboundMessage
from memory import sqlite_fts, sqlite_terms
from memory.dialect_sqlite import EXTRA_HITS, SqliteStore
from memory.pg_terms import idf
from memory.stems import query_terms
from memory.store import ContextQuery, ImportRow

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def rows(handle: str, texts: list[str], surface: str = "web") -> list[ImportRow]:
    return [ImportRow(handle, surface, "user", text, T0 + timedelta(minutes=5 * i), count(text), f"{handle}-{i}",
                      "talk") for i, text in enumerate(texts)]


def postings(path: Path, user_id: int, term: str) -> list[int]:
    with closing(sqlite3.connect(path)) as conn:
        return [r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid",
                                           (sqlite_terms.term_query(user_id, term),))]


def integrity_check(path: Path) -> None:
    """FTS5's own check of the index against its content, the messages up to `upto` (raises when they differ; rank
    1 compares the content too)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")


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
            return list(await store._tx("reads", lambda db: sqlite_terms.weights(db, user_id, [kayak])))
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
        later = await store.ingest(InboundMessage(surface="telegram", sender="42", external_id="t2",
                                                  text="zanzibar it is"), 5)
        zanzibar = query_terms("zanzibar")[0]
        # the first message indexed (through the update trigger it moves), the second still behind the index
        # (memory/sqlite_fts.py: indexed after the link, under its new owner)
        with closing(sqlite3.connect(tmp_path / "hilo.db")) as conn, conn:
            assert sqlite_fts.index_tail(conn, 2) == 2  # kim's imported message, then this one
        assert postings(tmp_path / "hilo.db", turn.user_id, zanzibar) == [turn.message.id]
        kim = await store.link_identity("kim", "telegram", "42", "operator")
        assert kim is not None and kim != turn.user_id
        assert postings(tmp_path / "hilo.db", kim, zanzibar) == [turn.message.id]
        assert await store.index_behind() >= 1
        assert postings(tmp_path / "hilo.db", kim, zanzibar) == [turn.message.id, later.message.id]
        assert postings(tmp_path / "hilo.db", turn.user_id, zanzibar) == []
        integrity_check(tmp_path / "hilo.db")
    finally:
        await store.close()


async def test_episodes_are_found_through_their_messages_postings(tmp_path: Path) -> None:
    """Migration 0044: episodes have no FTS5 index of their own (a message stored rewrote its whole episode there),
    so an episode is a hit when one of its messages holds a term, found in the same statement as the lexical hits:
    whether it was imported or just stored, and never another person's."""
    store = SqliteStore(str(tmp_path / "hilo.db"))
    await store.open()
    try:
        day = timedelta(days=1)
        kim_rows = [ImportRow("kim", "web", "user", "we took the kayak out" if i == 6 else f"lunch at noon, {i}",
                              T0 + timedelta(minutes=5 * i), 5, f"kim-a{i}", "a") for i in range(10)]
        kim_rows += [ImportRow("kim", "web", "user", f"lunch at noon again, {i}", T0 + 2 * day + timedelta(minutes=i),
                               5, f"kim-b{i}", "b") for i in range(10)]
        await store.import_rows(kim_rows)
        await store.import_rows(rows("lee", [f"kayak session number {i}" for i in range(5)]))
        stored = await store.ingest(InboundMessage(surface="web", sender="kim", external_id="kim-live",
                                                   text="the canoe is blue", handle="kim",
                                                   received_at=T0 + 5 * day), count("the canoe is blue"))
        kim = await store.user_id("kim")
        with closing(sqlite3.connect(tmp_path / "hilo.db")) as conn:
            episode_of = dict(conn.execute("SELECT external_id, episode_id FROM messages WHERE user_id = ?", (kim,)))
            kayak_id = conn.execute("SELECT id FROM messages WHERE external_id = 'kim-a6'").fetchone()[0]
            # nothing but the episode's own row is written when a message joins it
            assert conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'episodes' AND type = 'trigger'"
                                ).fetchall() == []

        async def hits(text: str) -> tuple[list[int], list[int]]:
            q = ContextQuery(user_id=kim, surface="web", conversation_id=None, current_message_id=None,
                             at=T0 + 6 * day, cross_since=T0 + 6 * day, search_text=text)
            lexical, episodes = await store._tx("reads", lambda db: db.hits(q, query_terms(text), db.ids([]), 10, 5))
            return [int(m) for m, _ in lexical], [int(e) for e, _ in episodes]

        # one message of ten holds the word: its episode, not the other one, and none of lee's five
        assert await hits("kayak") == ([kayak_id], [episode_of["kim-a6"]])
        # a message stored a moment ago: its episode at once
        assert await hits("canoe") == ([stored.message.id], [episode_of["kim-live"]])
        assert episode_of["kim-live"] not in (episode_of["kim-a6"], episode_of["kim-b0"])
    finally:
        await store.close()


async def test_lexical_hits_are_only_messages_recall_may_return(tmp_path: Path) -> None:
    """The hits statement leaves out what ROWS would drop, as Postgres's hilo_recall_hits does: the context's window
    (the ids load_context excludes), a queued later question of the current conversation, and what came after the
    turn's moment; the best `limit` (+ EXTRA_HITS) of the rest are returned. Until it did, it returned the window's
    hits too (asking for the window's size more), and ROWS sought their neighbours to throw them away."""
    store = SqliteStore(str(tmp_path / "hilo.db"))
    await store.open()
    try:
        day = timedelta(days=1)
        # 80 messages of one text among the day's chatter: equal scores, the newest first; later, shorter ones would
        # score higher
        await store.import_rows(rows("kim", [("lunch at noon" if i % 4 else "we took the kayak trip out")
                                             for i in range(320)]))
        await store.import_rows([ImportRow("kim", "web", "user", f"kayak future {i}", T0 + 3 * day + timedelta(
            minutes=i), 3, f"kim-later-{i}", "later") for i in range(5)])
        kim = await store.user_id("kim")
        now, queued = [await store.ingest(InboundMessage(
            surface="telegram", sender="kim", external_id=f"kim-live-{i}", text=text, handle="kim",
            received_at=T0 + day + timedelta(minutes=i)), count(text)) for i, text in enumerate(["kayak now",
                                                                                                 "kayak again"])]
        assert now is not None and queued is not None and queued.conversation_id == now.conversation_id
        with closing(sqlite3.connect(tmp_path / "hilo.db")) as conn:
            trips = [r[0] for r in conn.execute("SELECT id FROM messages WHERE content LIKE '%kayak trip%' "
                                                "ORDER BY id")]
        window = trips[70:]
        q = ContextQuery(user_id=kim, surface="telegram", conversation_id=now.conversation_id,
                         current_message_id=now.message.id, at=T0 + day + timedelta(minutes=5),
                         cross_since=T0 + day, search_text="kayak")
        left_out = [*window, now.message.id]
        lexical, _ = await store._tx("reads", lambda db: db.hits(q, query_terms("kayak"), db.ids(left_out), 10, 5))
        wanted = 10 + EXTRA_HITS
        assert sorted(int(m) for m, _ in lexical) == trips[70 - wanted:70]
    finally:
        await store.close()


async def test_a_long_question_searches_its_rarest_terms_only(tmp_path: Path) -> None:
    """A question of more than SEARCHED_TERMS index terms walks the postings of the rarest of them in the person's
    messages (a statement's work grew with the square of a question's length); what only its rarest word finds is
    still found, and a short question searches every term."""
    terms = ["aa", "bb", "cc", "dd", "ee", "ff", "gg", "hh", "ii", "jj", "kk", "ll"]
    idfs = [0.1, 2.0, 0.3, 5.0, 0.2, 1.0, 0.4, 3.0, 0.5, 4.0, 0.6, 0.05]
    kept, weights = sqlite_terms.strongest(terms, idfs)
    # the 8 of highest idf (cc 0.3, ee 0.2, aa 0.1 and ll 0.05 are the commonest), in the question's order
    assert sqlite_terms.SEARCHED_TERMS == 8
    assert kept == ["bb", "dd", "ff", "gg", "hh", "ii", "jj", "kk"]
    assert weights == [w for w in idfs if w >= 0.4] and sqlite_terms.strongest(terms[:8], idfs[:8]) == (
        terms[:8], idfs[:8])
    store = SqliteStore(str(tmp_path / "hilo.db"))
    await store.open()
    try:
        common = "my friend said the weather today was nice and the coffee good at the market near home"
        await store.import_rows(rows("lea", [common] * 60 + ["the zeppelin flew over the market"] + [common] * 60))
        lea = await store.user_id("lea")
        question = ("did my friend say the weather today was nice, the coffee good at the market near home, "
                    "and the zeppelin")
        assert len(query_terms(question)) > sqlite_terms.SEARCHED_TERMS
        q = ContextQuery(user_id=lea, surface="web", conversation_id=None, current_message_id=None,
                         at=T0 + timedelta(days=1), cross_since=T0, search_text=question)
        statements: list[str] = []
        lexical, _ = await store._tx("reads", lambda db: _hits_seen(db, q, query_terms(question), statements))
        with closing(sqlite3.connect(tmp_path / "hilo.db")) as conn:
            (zeppelin,) = conn.execute("SELECT id FROM messages WHERE content LIKE '%zeppelin%'").fetchone()
        assert int(lexical[0][0]) == zeppelin, "the rarest term's message is the best hit"
        searched = [s.count("MATCH") for s in statements if "messages_fts MATCH" in s]
        assert searched == [sqlite_terms.SEARCHED_TERMS]
    finally:
        await store.close()


async def _hits_seen(db: Any, q: ContextQuery, terms: list[str], seen: list[str]) -> Any:
    """db.hits, keeping the text of each statement it runs."""
    run = db.all

    async def all_(sql: str, *args: Any) -> Any:
        seen.append(sql)
        return await run(sql, *args)

    db.all = all_
    return await db.hits(q, terms, db.ids([]), 10, 5)
