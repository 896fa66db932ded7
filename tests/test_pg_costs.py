"""What a Postgres turn costs beyond its own statements: the term frequencies of recall, and the pool's reset.

Real signals, not timings: the server's own per-transaction scan counters of `messages` around the frequency
read, and the round trips a loopback proxy (bench/wire.py) sees for one store call.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg

from bench.wire import counting_proxy
from kernel.types import InboundMessage
from memory.dialect_pg import PostgresStore
from memory.open import open_store
from memory.store import ContextQuery, ImportRow, Ingested
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
SCANS = "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relname = 'messages'"
WEIGHTS = "SELECT idfs FROM hilo_term_weights('messages', $1::text[], 6.0)"


async def put(store: PostgresStore, ext: str, text: str) -> Ingested:
    m = InboundMessage(surface="cli", sender="ana", external_id=ext, text=text, received_at=T0, handle="ana")
    turn = await store.ingest(m, token_count=len(text.split()))
    assert turn is not None
    return turn


async def seeded() -> tuple[str, Ingested]:
    """A database where "banana" is in every message of 121 and "parrot" in one, analyzed."""
    url = SERVER.create_database()
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    await store.open()
    try:
        for i in range(120):
            await put(store, f"h{i}", f"banana number {i}")
        rare = await put(store, "r1", "banana, my parrot is called Kiwi")
    finally:
        await store.close()
    SERVER.query(db_name(url), "ANALYZE messages")
    return url, rare


async def test_term_frequencies_come_from_the_statistics_without_scanning_messages() -> None:
    url, _ = await seeded()
    conn = await asyncpg.connect(SERVER.uri(db_name(url)))  # a new backend: no scan counted on it yet
    try:
        async with conn.transaction():
            # recall's term weights (migration 0032), the mean row length given (the turn caches it)
            idf = list((await conn.fetchrow(WEIGHTS, ["banana", "parrot", "quokka"]))["idfs"])
            scans = await conn.fetchrow(SCANS)
    finally:
        await conn.close()
    assert (scans["seq_scan"], scans["idx_scan"]) == (0, 0), f"the frequency read scanned messages: {dict(scans)}"
    # banana: in every message, almost no weight; parrot: once; quokka: not in the statistics, rarer than any
    assert idf[0] < 0.01 < idf[1] <= idf[2]


async def test_frequent_words_are_searched_and_rank_below_rare_ones() -> None:
    url, rare = await seeded()
    store = open_store(url)
    await store.open()
    try:
        q = ContextQuery(user_id=rare.user_id, surface="cli", conversation_id=None, current_message_id=None,
                         at=T0 + timedelta(hours=1), cross_since=T0 - timedelta(days=30), search_text="banana parrot")
        rows = await store.load_context(q)
        assert rows.recalled[0].external_id == "r1"
        rows = await store.load_context(replace(q, search_text="banana"))
        assert len(rows.recalled) == q.search_limit, "a word in every message is searched too (no frequency cut)"
    finally:
        await store.close()


async def test_a_pooled_store_call_costs_no_reset_round_trip() -> None:
    url = SERVER.create_database()
    async with counting_proxy(SERVER.uri(db_name(url))) as (proxy_url, wire):
        store = PostgresStore(proxy_url.rsplit("/", 1)[0] + "/" + db_name(url))
        await store.open()
        try:
            user_id = await store.user_id("ana", create=True)
            assert user_id is not None
            await store.find_conversation(user_id, "cli")  # its statement prepared and cached
            before = wire.round_trips
            await store.find_conversation(user_id, "cli")
            trips = wire.round_trips - before
        finally:
            await store.close()
    assert trips == 3, f"BEGIN, the query and COMMIT, and nothing on release: {trips} round trips"


async def test_an_import_into_a_fresh_database_leaves_fresh_term_statistics() -> None:
    url = SERVER.create_database()
    store = open_store(url)
    await store.open()
    try:
        rows = [ImportRow("ana", "telegram", "user", f"banana number {i}", T0 + timedelta(seconds=i), 3, f"i{i}")
                for i in range(200)]
        assert (await store.import_rows(rows)).inserted == 200
    finally:
        await store.close()
    stats = SERVER.query(db_name(url), "SELECT most_common_elems::text::text[] FROM pg_stats "
                                       "WHERE tablename = 'messages' AND attname = 'search'")
    assert stats, "no statistics of messages.search after the import: recall would count matches instead"
    assert "banana" in stats[0][0], f"the statistics do not list the imported words: {stats[0][0]}"
