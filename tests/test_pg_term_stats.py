"""Recall's term statistics cached per process on Postgres (memory/pg_terms.py STATS / TermStats / cached,
migrations/postgres/0034): the weights computed in Python from pg_stats equal hilo_term_weights' to the last bit,
listed and unlisted words, messages and episodes; the context read handed them returns exactly what the read
that computes them in SQL returns; before any ANALYZE nothing is handed; the statistics cost one statement per
DF_TTL_S, not one per question."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import migrations
from kernel.types import InboundMessage, Ingested, utcnow
from memory import pg_context, pg_terms
from memory.stems import query_terms
from memory.store import ContextQuery, ImportRow
from tests.fakes.postgres import SERVER, fresh_store, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)

PEOPLE = ("ana", "bo", "cy")


def vocabulary(rng: random.Random) -> list[str]:
    """1,500 made-up words: drawn Zipf-like, the first are in most rows and the last in one or none, so that
    pg_stats lists some and not others."""
    letters = "bcdfghjklmnprstvz"
    vowels = "aeiou"
    words = {"".join(rng.choice(letters) + rng.choice(vowels) for _ in range(3)) for _ in range(1600)}
    return sorted(words)[:1500]


def sentence(rng: random.Random, vocab: list[str]) -> str:
    return " ".join(vocab[min(len(vocab) - 1, int(rng.paretovariate(0.7)) - 1)] for _ in range(9))


@pytest.fixture
async def store() -> AsyncIterator[Any]:
    async with fresh_store() as s:
        yield s


async def seeded(store: Any, analyze: bool) -> tuple[list[str], random.Random]:
    rng = random.Random(5)
    vocab = vocabulary(rng)
    if not analyze:  # turns one by one (an import ANALYZEs a new table: memory/pg_terms.stale)
        for k in range(60):
            person = PEOPLE[k % len(PEOPLE)]
            turn = await store.ingest(InboundMessage(surface="telegram", sender=person, external_id=f"h-{k}",
                                                     text=sentence(rng, vocab), handle=person), 10)
            await store.finish_turn(turn, sentence(rng, vocab), 10, [])
        return vocab, rng
    start = utcnow() - timedelta(days=30)
    rows = [ImportRow(user=p, surface="telegram", role="user" if i % 2 == 0 else "assistant",
                      content=sentence(rng, vocab), created_at=start + timedelta(minutes=37 * i), token_count=12,
                      external_id=f"{p}-{i}") for p in PEOPLE for i in range(700)]
    await store.import_rows(rows)
    await store._tx("lease", lambda db: db.run("ANALYZE messages, episodes"))
    return vocab, rng


async def test_the_weights_from_cached_statistics_are_hilo_term_weights_to_the_last_bit(store: Any) -> None:
    vocab, _ = await seeded(store, analyze=True)
    terms = [*vocab, "neverseen", "zzzz"]
    stats = await store._tx("reads", pg_terms.cached)
    for table in pg_terms.TABLES:
        assert stats[table] is not None
        listed = sum(t in stats[table].shares for t in terms)
        assert 0 < listed < len(terms)  # both kinds of word are compared
        row = await store._tx("reads", lambda db, t=table: db.all(
            "SELECT idfs, rare FROM hilo_term_weights($1, $2::text[], 1.0)", t, terms))
        idfs, rare = stats[table].weights(terms)
        assert idfs == list(row[0][0]) and rare == list(row[0][1]), table


async def test_nothing_is_handed_before_any_analyze(store: Any) -> None:
    await seeded(store, analyze=False)
    assert await store._tx("reads", pg_terms.cached) == {"messages": None, "episodes": None}
    assert await store._tx("reads", pg_context.weights, ["bob", "ana"]) == [None] * 4
    assert await store._tx("reads", pg_context.weights, []) == [None] * 4


@pytest.mark.parametrize("analyze", [False, True])
async def test_the_read_handed_the_weights_returns_what_the_read_computing_them_returns(store: Any,
                                                                                       analyze: bool) -> None:
    vocab, rng = await seeded(store, analyze)
    handed_none = [None] * 4
    turns = []
    for k in range(12):
        person = PEOPLE[k % len(PEOPLE)]
        turns.append(await store.ingest(InboundMessage(surface="telegram", sender=person, external_id=f"q-{k}",
                                                       text=sentence(rng, vocab), handle=person), 10))
    for turn in turns:
        at = utcnow() + timedelta(seconds=1)
        q = ContextQuery(user_id=turn.user_id, surface="telegram", conversation_id=turn.conversation_id,
                         current_message_id=turn.message.id, at=at, cross_since=at - timedelta(hours=48),
                         recent_limit=4, cross_limit=4, search_text=turn.message.content, search_limit=40)
        terms = query_terms(q.search_text)
        cached = await store._tx("reads", pg_context.weights, terms)
        assert (cached == handed_none) is (not analyze)
        # the mean row lengths given: the function takes handed weights only with them (as the store hands both)
        args = (terms, q.user_id, at, [], q.current_message_id, q.conversation_id, 100, 20, 9.0, 120.0)
        handed = await store._tx("reads", lambda db, a=args, w=cached: db.all(pg_context.HITS, *a, *w))
        computed = await store._tx("reads", lambda db, a=args: db.all(pg_context.HITS, *a, *handed_none))
        assert [tuple(r) for r in handed] == [tuple(r) for r in computed]
        assert any(r[0] == 0 for r in handed)  # lexical hits were compared
        rows = await store.load_context(q)
        assert rows.recalled


async def test_the_statistics_cost_one_statement_per_ttl_not_one_per_question(store: Any) -> None:
    vocab, rng = await seeded(store, analyze=True)
    reads = []
    for k in range(3):
        turn = await store.ingest(InboundMessage(surface="telegram", sender="ana", external_id=f"s-{k}",
                                                 text=sentence(rng, vocab), handle="ana"), 10)
        at = utcnow() + timedelta(seconds=1)
        q = ContextQuery(user_id=turn.user_id, surface="telegram", conversation_id=turn.conversation_id,
                         current_message_id=turn.message.id, at=at, cross_since=at - timedelta(hours=48),
                         recent_limit=4, cross_limit=4, search_text=turn.message.content, search_limit=40)
        before = store.counters["statements"]
        await store.load_context(q)
        reads.append(store.counters["statements"] - before)
    assert reads == [2, 1, 1]  # the statistics, then the read; then the read alone
    store._term_stats.clear()  # as when they expire
    before = store.counters["statements"]
    await store.load_context(q)
    assert store.counters["statements"] - before == 2


def migration_0032_queries() -> list[str]:
    """The lexical and episode queries hilo_recall_hits ran until migration 0034, as 0032 wrote them."""
    text = (Path(migrations.__file__).parent / "postgres" / "0032_one_statement_read.sql").read_text()
    return [q.split("'\n        USING")[0].replace("''", "'") for q in text.split("RETURN QUERY EXECUTE '")[1:]]


async def old_hits(db: Any, table: str, query: str, terms: list[str], turn: Ingested,
                   at: datetime) -> tuple[list[tuple[Any, ...]], float]:
    """0032's query of `table` with hilo_term_weights' weights and mean row length (read from the rows)."""
    idfs, rare, mean = (await db.all("SELECT idfs, rare, mean FROM hilo_term_weights($1, $2::text[], NULL)",
                                     table, terms))[0]
    common = "SELECT hilo_tsquery_text($1::text[], $2::boolean[], $3)"
    tsq = [(await db.all(common, terms, rare, which))[0][0] for which in (True, False)]
    if table == "messages":
        rows = await db.all(query, terms, idfs, mean, tsq[0], turn.user_id, at, [], turn.message.id,
                            turn.conversation_id, 100, tsq[1], 1000)
    else:
        rows = await db.all(query, terms, idfs, mean, tsq[0], turn.user_id, at, 20, tsq[1], 200)
    return [(r[1], r[2]) for r in rows], mean


async def new_hits(db: Any, terms: list[str], turn: Ingested, at: datetime, means: tuple[float, float],
                   weights: list[Any]) -> list[Any]:
    return await db.all(pg_context.HITS, terms, turn.user_id, at, [], turn.message.id,  # type: ignore[no-any-return]
                        turn.conversation_id, 100, 20, *means, *weights)


async def test_the_hits_are_migration_0032s_to_the_last_bit(store: Any) -> None:
    """0034 parses the terms once per query instead of once per candidate, and takes handed weights: the same
    ids in the same order with the same scores as 0032's queries given hilo_term_weights' weights."""
    vocab, rng = await seeded(store, analyze=True)
    lexical, episodes = migration_0032_queries()
    compared = 0
    for k in range(12):
        person = PEOPLE[k % len(PEOPLE)]
        turn = await store.ingest(InboundMessage(surface="telegram", sender=person, external_id=f"o-{k}",
                                                 text=sentence(rng, vocab), handle=person), 10)
        terms = query_terms(turn.message.content)
        at = utcnow() + timedelta(seconds=1)
        want_m, mean_m = await store._tx("reads", old_hits, "messages", lexical, terms, turn, at)
        want_e, mean_e = await store._tx("reads", old_hits, "episodes", episodes, terms, turn, at)
        weights = await store._tx("reads", pg_context.weights, terms)
        assert None not in weights  # handed: the function computes none of them
        got = await store._tx("reads", new_hits, terms, turn, at, (mean_m, mean_e), weights)
        assert [(r[1], r[2]) for r in got if r[0] == 0] == want_m
        assert [(r[1], r[2]) for r in got if r[0] == 1] == want_e
        compared += len(want_m) + len(want_e)
    assert compared > 100
