"""The one-statement context read on Postgres (memory/pg_context.py, migrations/postgres/0032) returns what the
statements it replaced return (sql_turns.load_context without a query vector): the memories, the conversation's
tail, the other surfaces' turns, recall's messages and their scores; before the planner's statistics exist and
after ANALYZE; nothing of a forgotten person, and nothing of one person in another's context."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from kernel.types import InboundMessage, Ingested, utcnow
from memory import pg_context, sql_turns
from memory.store import ContextQuery, ContextRows
from tests.fakes.postgres import SERVER, fresh_store, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.waiting import wait_until

WORDS = ("parrot", "garden", "violin", "lisbon", "kiwi", "tomato", "bicycle", "sister", "rain", "museum")


@pytest.fixture
async def store() -> AsyncIterator[Any]:
    async with fresh_store() as s:
        yield s


async def say(store: Any, person: str, surface: str, k: int, text: str) -> Ingested:
    turn = await store.ingest(InboundMessage(surface=surface, sender=person, external_id=f"{person}-{surface}-{k}",
                                             text=text, handle=person), 6)
    assert turn is not None
    await store.finish_turn(turn, f"noted: {text}", 4, [])
    return turn  # type: ignore[no-any-return]


async def seed(store: Any) -> dict[str, Ingested]:
    """Two people with histories on two surfaces and a memory each; each one's last telegram turn, unanswered."""
    last = {}
    for person in ("ana", "bo"):
        for k in range(30):
            a, b = WORDS[k % len(WORDS)], WORDS[(3 * k + 1) % len(WORDS)]
            await say(store, person, "telegram" if k % 3 else "web", k, f"{person} talks of the {a} and the {b} {k}")
        user = await store.user_id(person)
        await store.remember(user, f"{person} keeps a parrot called Kiwi", 7)
        last[person] = await store.ingest(InboundMessage(
            surface="telegram", sender=person, external_id=f"{person}-q", text="what about my parrot in lisbon?",
            handle=person), 7)
    return last


def query(turn: Ingested, **kw: Any) -> ContextQuery:
    """The turn's query; a short tail and cross-surface window by default, so that recall has something left."""
    kw = {"recent_limit": 6, "cross_limit": 4, "search_text": turn.message.content, **kw}
    at = utcnow() + timedelta(seconds=1)
    return ContextQuery(user_id=turn.user_id, surface=turn.message.surface, conversation_id=turn.conversation_id,
                        current_message_id=turn.message.id, at=at, cross_since=at - timedelta(hours=48),
                        **kw)


async def both(store: Any, q: ContextQuery) -> tuple[ContextRows, ContextRows]:
    new = await store._tx("reads", pg_context.load_context, q)
    old = await store._tx("reads", sql_turns.load_context, q)
    return new, old


def shape(rows: ContextRows) -> dict[str, Any]:
    return {
        "facts": [f.id for f in rows.facts],
        "conversation": [m.id for m in rows.conversation],
        "cross": [m.id for m in rows.cross_surface],
        "recalled": [m.id for m in rows.recalled],
        "scores": {i: {k: round(v, 9) for k, v in s.items()} for i, s in rows.recall_scores.items()},
        "users": {m.user_id for m in [*rows.conversation, *rows.cross_surface, *rows.recalled]}
        | {f.user_id for f in rows.facts},
    }


@pytest.mark.parametrize("analyzed", [False, True])
async def test_the_one_statement_read_returns_what_the_statements_it_replaced_return(store: Any,
                                                                                     analyzed: bool) -> None:
    last = await seed(store)
    if analyzed:
        await store._tx("lease", lambda db: db.run("ANALYZE messages, episodes"))
    for person, turn in last.items():
        for kw in ({}, {"recent_limit": 200, "cross_limit": 20},
                   {"recent_limit": 5, "cross_limit": 3, "search_limit": 4, "facts_limit": 1}, {"search_limit": 0}):
            new, old = await both(store, query(turn, **kw))
            assert shape(new) == shape(old), (person, kw)
            got = shape(new)
            assert got["users"] == {turn.user_id}
            if kw.get("search_limit", 1) and kw.get("recent_limit") != 200:
                assert got["recalled"] and got["cross"] and got["conversation"] and got["facts"]
            else:
                assert not got["recalled"]


async def test_a_question_without_a_searchable_word_recalls_nothing_and_reads_the_rest(store: Any) -> None:
    turn = (await seed(store))["ana"]
    new, old = await both(store, query(turn, search_text="?! ..."))
    assert shape(new) == shape(old)
    assert not new.recalled and new.conversation and new.cross_surface


async def test_a_forgotten_person_is_read_as_nothing(store: Any) -> None:
    last = await seed(store)
    assert await store.forget("ana")
    new, old = await both(store, query(last["ana"]))
    assert shape(new) == shape(old) == shape(ContextRows(facts=[], conversation=[], cross_surface=[], recalled=[],
                                                         recall_scores={}, memory_cosines={}))
    bo = shape(await store._tx("reads", pg_context.load_context, query(last["bo"])))
    assert bo["recalled"] and bo["users"] == {last["bo"].user_id}


async def test_the_store_reads_a_turn_in_one_statement(store: Any) -> None:
    turn = (await seed(store))["bo"]
    before = store.counters["statements"]
    await store.load_context(query(turn))  # also reads the term statistics, once per DF_TTL_S (pg_terms.cached)
    assert store.counters["statements"] - before == 2
    before = store.counters["statements"]
    rows = await store.load_context(query(turn))
    assert store.counters["statements"] - before == 1
    assert rows.recalled and {m.user_id for m in rows.recalled} == {turn.user_id}


def unit(rng: random.Random, dim: int = 8) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dim)]
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


async def embedded(store: Any, embedder: str = "e1") -> dict[str, Ingested]:
    """seed's people, every message and memory with a vector of `embedder` (some memories with another's)."""
    last = await seed(store)
    rng = random.Random(3)
    pending = await store.unembedded(embedder, limit=1000)
    await store.write_vectors(embedder, [(p.id, unit(rng)) for p in pending])
    for k, user in enumerate([last["ana"].user_id, last["bo"].user_id]):
        await store.remember(user, f"the {WORDS[k]} matters", 6)
        await store.remember(user, f"the {WORDS[k + 2]} was {WORDS[k + 4]}", 6)
    memories = await store.unembedded_memories(embedder, limit=100)
    await store.write_memory_vectors(embedder, [(p, unit(rng)) for p in memories[1:]])
    await store.write_memory_vectors("other", [(p, unit(rng)) for p in memories[:1]])
    return last


#: The queries with a vector each comparison reads: the default windows, a window holding everything, small limits,
#: no recall, no word to search, another embedder's vectors, no embedder named.
VECTOR_CASES = ({}, {"recent_limit": 200, "cross_limit": 20},
                {"recent_limit": 5, "cross_limit": 3, "search_limit": 4, "facts_limit": 1}, {"search_limit": 0},
                {"search_text": "?! ..."}, {"embedder": "other"}, {"embedder": None})


async def vector_queries(store: Any, seed: int) -> AsyncIterator[tuple[str, Ingested, dict[str, Any], ContextQuery]]:
    """embedded's people, ANALYZEd; for each and each of VECTOR_CASES, its last turn's query with a random vector."""
    last = await embedded(store)
    await store._tx("lease", lambda db: db.run("ANALYZE messages, episodes"))
    rng = random.Random(seed)
    for person, turn in last.items():
        for kw in VECTOR_CASES:
            yield person, turn, kw, query(turn, **{"query_vector": tuple(unit(rng)), "embedder": "e1", **kw})


async def test_with_a_query_vector_the_one_statement_read_returns_what_the_statements_return(store: Any) -> None:
    """With a query vector the read also carries the person's nearest messages (hilo_nearest, migration 0043), each
    recalled row's cosine and each memory's vector: the same rows, scores and memory cosines as sql_turns.load_context
    (its transaction, recall's statements and the vector search apart)."""
    async for person, turn, kw, q in vector_queries(store, 11):
        new = await store._tx("reads", pg_context.load_context, q)
        old = await store._tx("read", sql_turns.load_context, q)
        assert shape(new) == shape(old), (person, kw)
        assert new.memory_cosines == old.memory_cosines, (person, kw)
        got = shape(new)
        assert got["users"] == {turn.user_id}
        if kw.get("search_limit", 1) and kw.get("recent_limit") != 200 and kw.get("embedder", "e1") == "e1":
            assert got["recalled"] and all("vector" in s for s in got["scores"].values()), (person, kw)
            assert new.memory_cosines, (person, kw)
        if kw.get("search_text"):  # no word to search: the vector hits alone
            assert got["recalled"] and not any(s["bm25"] for s in got["scores"].values())


async def test_with_a_query_vector_the_store_reads_a_turn_in_one_statement(store: Any) -> None:
    turn = (await embedded(store))["bo"]
    q = query(turn, query_vector=tuple(unit(random.Random(5))), embedder="e1")
    await store.load_context(q)
    before = store.counters["statements"]
    rows = await store.load_context(q)
    assert store.counters["statements"] - before == 1
    assert rows.recalled and {m.user_id for m in rows.recalled} == {turn.user_id}
    assert all("vector" in s for s in rows.recall_scores.values()) and rows.memory_cosines


async def test_read_ahead_then_finished_with_the_vector_returns_the_one_statement_read(store: Any) -> None:
    """Read without the question's vector (the question being embedded: pg_context.read_ahead, the memories'
    vectors of its embedder along), then finished with it (pg_context.finish: the nearest messages, their rows and
    the earlier rows' cosines, one statement): the same rows, scores and memory cosines as the one-statement read
    with the vector; and, when the embedding gave nothing, the lexical read's."""
    async for person, turn, kw, q in vector_queries(store, 17):
        ahead = await store._tx("reads", pg_context.read_ahead, replace(q, query_vector=None))
        split = await store._tx("reads", pg_context.finish, q, ahead)
        whole = await store._tx("reads", pg_context.load_context, q)
        assert shape(split) == shape(whole), (person, kw)
        assert split.memory_cosines == whole.memory_cosines, (person, kw)
        assert shape(split)["users"] == {turn.user_id}, (person, kw)
        if kw.get("search_limit", 1) and kw.get("recent_limit") != 200 and kw.get("embedder", "e1") == "e1":
            assert all("vector" in s for s in shape(split)["scores"].values()), (person, kw)
        lexical = replace(q, query_vector=None, embedder="")
        ahead = await store._tx("reads", pg_context.read_ahead, replace(q, query_vector=None))
        assert shape(await store._tx("reads", pg_context.finish, lexical, ahead)) == shape(
            await store._tx("reads", pg_context.load_context, lexical)), (person, kw)


async def test_postgres_reads_a_context_while_the_question_is_embedded(store: Any) -> None:
    """Store.load_context with the question's embedding still being computed: the statement of what needs no
    vector runs before the embedding is given (the gate holds it until that statement is seen done), the vector's
    statement after; the context is the one-statement read's with the vector."""
    turn = (await embedded(store))["bo"]
    vector = tuple(unit(random.Random(5)))
    asked = query(turn, embedder="e1")
    given = await store.load_context(replace(asked, query_vector=vector))  # the term statistics cached too
    gate = asyncio.Event()

    async def embedding() -> tuple[float, ...]:
        await gate.wait()
        return vector

    before = store.counters["statements"]
    reading = asyncio.create_task(store.load_context(asked, vector=embedding()))
    await wait_until(lambda: store.counters["statements"] == before + 1, "the read ahead")
    assert not reading.done()
    gate.set()
    got = await reading
    assert shape(got) == shape(given) and got.memory_cosines == given.memory_cosines
    assert all("vector" in s for s in got.recall_scores.values()) and got.memory_cosines
    assert store.counters["statements"] == before + 2
