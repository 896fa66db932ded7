"""What vector recall costs and finds on Postgres: the HNSW index filtered by person with pgvector's iterative
scan (a person's few vectors among many others' are found, which a plain HNSW scan of ef_search candidates would
miss), the index of each embedder made on first write, and the read's round trips with a query vector (one
statement, as without one: the search is hilo_nearest inside memory/pg_context.py's read, its scan settings the
function's own SET clauses)."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.wire import counting_proxy
from memory.dialect_pg import PostgresStore, index_name
from memory.store import ContextQuery, ImportRow
from tests.fakes.pgbouncer import BOUNCER, pgbouncer_session  # noqa: F401  (autouse fixture)
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=10)
DIM = 16


def direction(angle: float) -> list[float]:
    """A unit vector in the plane of the first two axes."""
    return [math.cos(angle), math.sin(angle)] + [0.0] * (DIM - 2)


def near_first_axis(rng: random.Random, pull: float) -> list[float]:
    """A random unit vector, drawn toward the first axis by `pull` (0: anywhere)."""
    v = [pull + rng.gauss(0, 1)] + [rng.gauss(0, 1) for _ in range(DIM - 1)]
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


async def seeded(url: str) -> tuple[PostgresStore, int, list[int]]:
    """2,000 messages of bob, all near the first axis (the query's direction), and 5 of ana, anywhere; every one
    with its vector. Returns (store, ana's id, ana's message ids)."""
    store = PostgresStore(url)
    await store.open()
    rows = [ImportRow("bob", "telegram", "user", f"bob {i}", T0 + timedelta(seconds=i), 2, f"b{i}")
            for i in range(2000)]
    rows += [ImportRow("ana", "telegram", "user", f"ana {i}", T0 + timedelta(seconds=i), 2, f"a{i}") for i in range(5)]
    await store.import_rows(rows)
    pending = await store.unembedded("e1", limit=3000)
    rng = random.Random(7)
    vectors = [(p.id, near_first_axis(rng, 5.0 if p.content.startswith("bob") else 0.0)) for p in pending]
    await store.write_vectors("e1", vectors)
    ana = await store.user_id("ana")
    assert ana is not None
    return store, ana, [p.id for p in pending if p.content.startswith("ana")]


async def test_a_person_s_few_vectors_are_found_among_many_others_through_the_hnsw_index() -> None:
    url = SERVER.create_database()
    store, ana, mine = await seeded(url)
    await store.close()
    name = db_name(url)
    assert SERVER.query(name, "SELECT indexname FROM pg_indexes WHERE indexname = $1", index_name("e1", DIM))
    # only the HNSW index can serve the search now: no per-person b-tree, no sequential scan
    SERVER.query(name, "DROP INDEX message_vectors_user")
    SERVER.query("postgres", f'ALTER DATABASE "{name}" SET enable_seqscan = off')
    store = PostgresStore(url)
    await store.open()
    try:
        hits = await store.search_vectors(ana, direction(0.0), "e1", limit=5)
        plan = SERVER.query(name, "EXPLAIN SELECT message_id FROM message_vectors WHERE user_id = $1 AND embedder = "
                                  f"'e1' ORDER BY vector::halfvec({DIM}) <=> $2::text::halfvec({DIM}) LIMIT 5",
                            ana, "[" + ",".join(map(str, direction(0.0))) + "]")
    finally:
        await store.close()
    assert any(index_name("e1", DIM) in row[0] for row in plan), plan
    assert sorted(hits) == sorted(mine), "ana's, behind bob's 2,000 nearer ones: found only by the iterative scan"


#: Round trips of load_context with a query vector, warm: one statement (memory/pg_context.py), as without one; until
#: migration 0043 they were seven (BEGIN with the HNSW scan's SET LOCALs, the memories, the tail and cross-surface
#: turns, the lexical and episode hits, the vector search, the candidates' rows with their cosines, COMMIT).
VECTOR_READ_TODAY = 1


async def _trips() -> tuple[list[int], Any]:
    url = SERVER.create_database()
    store, ana, mine = await seeded(url)
    await store.close()
    async with counting_proxy(SERVER.uri(db_name(url))) as (proxy_url, wire):
        store = PostgresStore(proxy_url.rsplit("/", 1)[0] + "/" + db_name(url))
        await store.open()
        try:
            q = ContextQuery(user_id=ana, surface="web", conversation_id=None, current_message_id=None,
                             at=T0 + timedelta(days=1), cross_since=T0 + timedelta(days=1), search_text="ana")
            trips = []
            for query_vector in (None, tuple(direction(1.0)), None, tuple(direction(1.0))):
                before = wire.round_trips
                rows = await store.load_context(ContextQuery(**{**_fields(q), "query_vector": query_vector,
                                                               "embedder": "e1"}))
                trips.append(wire.round_trips - before)
        finally:
            await store.close()
    # "ana" matches ana's five lexically, so the candidates' rows are read either way, and each candidate carries
    # its cosine among its scores
    assert sorted(m.id for m in rows.recalled) == sorted(mine)
    assert all("vector" in rows.recall_scores[m.id] for m in rows.recalled)
    return trips, rows


async def test_vector_recall_costs_no_more_round_trips_than_today() -> None:
    trips, _ = await _trips()
    assert trips[2] == 1, f"round trips without / with a query vector (warm): {trips}"
    assert trips[3] <= VECTOR_READ_TODAY, f"round trips without / with a query vector (warm): {trips}"


async def test_vector_recall_costs_one_more_round_trip_and_no_more() -> None:
    """Issue 14's bound: at most one more round trip with a query vector than without. It costs none: the vector
    search and the cosines are sub-statements of the same read."""
    trips, _ = await _trips()
    assert trips[3] <= trips[2] + 1, f"round trips without / with a query vector (warm): {trips}"
    assert trips[3] == trips[2], f"round trips without / with a query vector (warm): {trips}"


def _fields(q: ContextQuery) -> dict[str, object]:
    return {f: getattr(q, f) for f in q.__dataclass_fields__}


async def test_behind_a_transaction_pooler_the_search_keeps_its_scan_settings() -> None:
    """pgbouncer in transaction mode keeps no session state: the HNSW scan's settings ride on hilo_nearest's own
    SET clauses (migrations/postgres/0043), so ana's few vectors behind bob's 2,000 nearer ones are found there too,
    by the search and by the one-statement context read (only the HNSW index can serve them, as above)."""
    url = SERVER.create_database()
    store, ana, mine = await seeded(url)
    await store.close()
    name = db_name(url)
    SERVER.query(name, "DROP INDEX message_vectors_user")
    SERVER.query("postgres", f'ALTER DATABASE "{name}" SET enable_seqscan = off')
    store = PostgresStore(BOUNCER.url(url))
    await store.open()
    try:
        hits = await store.search_vectors(ana, direction(0.0), "e1", limit=5)
        # no word to search: the vector hits alone
        rows = await store.load_context(ContextQuery(
            user_id=ana, surface="web", conversation_id=None, current_message_id=None, at=T0 + timedelta(days=1),
            cross_since=T0 + timedelta(days=1), search_text="?", query_vector=tuple(direction(0.0)), embedder="e1"))
    finally:
        await store.close()
    assert sorted(hits) == sorted(mine)
    assert sorted(m.id for m in rows.recalled) == sorted(mine)
