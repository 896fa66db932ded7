"""Message vectors in the store (memory/vectors.py, sql_vectors.py, the dialects), on every backend: written and
searched per person and per embedder name, batches of messages still to embed (resumable by id), recall through
load_context under lexical recall's rules, forget and linking, and a Postgres that keeps no vectors."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kernel.types import InboundMessage
from memory.dialect_sqlite import SqliteStore
from memory.store import ContextQuery, Ingested, MemoryDraft, Store
from tests.backends import Backend
from tests.waiting import wait_until

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
DIM = 8


def axis(i: int, dim: int = DIM, tilt: float = 0.0) -> list[float]:
    """A unit vector along axis i, tilted toward axis i+1 by `tilt` radians."""
    v = [0.0] * dim
    v[i % dim], v[(i + 1) % dim] = math.cos(tilt), math.sin(tilt)
    return v


async def say(store: Store, who: str, ext: str, text: str, at: datetime = T0, surface: str = "telegram") -> Ingested:
    turn = await store.ingest(InboundMessage(surface=surface, sender=who, external_id=ext, text=text,
                                             received_at=at, handle=who), token_count=len(text.split()))
    assert turn is not None
    return turn


def query(turn: Ingested, vector: list[float] | None, embedder: str = "e1", **kw: Any) -> ContextQuery:
    base = ContextQuery(user_id=turn.user_id, surface="web", conversation_id=None, current_message_id=None,
                        at=T0 + timedelta(days=1), cross_since=T0 + timedelta(hours=23),
                        query_vector=tuple(vector) if vector is not None else None, embedder=embedder)
    return replace(base, **kw)


async def test_vectors_are_searched_per_person_and_per_embedder(store: Store) -> None:
    ana = [await say(store, "ana", f"a{i}", f"ana message {i}", T0 + timedelta(minutes=i)) for i in range(4)]
    bob = await say(store, "bob", "b0", "bob message")
    assert await store.write_vectors("e1", [(t.message.id, axis(i)) for i, t in enumerate(ana)]) == 4
    assert await store.write_vectors("e1", [(bob.message.id, axis(1))]) == 1
    hits = await store.search_vectors(ana[0].user_id, axis(1, tilt=0.3), "e1", limit=2)
    assert list(hits) == [ana[1].message.id, ana[2].message.id]
    assert abs(hits[ana[1].message.id] - math.cos(0.3)) < 2e-3  # float16 keeps three decimals
    assert bob.message.id not in await store.search_vectors(ana[0].user_id, axis(1), "e1", limit=10)
    assert await store.search_vectors(ana[0].user_id, axis(1), "e2", limit=10) == {}, "another embedder's"
    # the tilted question: ana 2 is the next best once ana 1 is excluded (with axis(1) alone, 0, 2 and 3 tie)
    assert list(await store.search_vectors(ana[0].user_id, axis(1, tilt=0.3), "e1", limit=1,
                                           excluded=[ana[1].message.id])) == [ana[2].message.id]
    assert await store.embedding_progress("e1") == (5, 5)
    assert await store.embedding_progress("e1", ana[0].user_id) == (4, 4)
    assert await store.embedding_progress("e2") == (0, 5)


async def test_a_new_embedder_re_embeds_and_replaces_the_old_vectors(store: Store) -> None:
    turns = [await say(store, "ana", f"a{i}", f"message {i}") for i in range(5)]
    ids = [t.message.id for t in turns]
    assert [p.id for p in await store.unembedded("e1", limit=10)] == ids
    await store.write_vectors("e1", [(i, axis(0)) for i in ids[:3]])
    assert [p.id for p in await store.unembedded("e1", limit=10)] == ids[3:]
    first = await store.unembedded("e2", limit=2)
    assert [(p.id, p.content) for p in first] == [(ids[0], "message 0"), (ids[1], "message 1")]
    rest = await store.unembedded("e2", after_id=first[-1].id, limit=10)
    assert [p.id for p in rest] == ids[2:]
    await store.write_vectors("e2", [(i, axis(3, dim=4)) for i in ids[:2]])
    uid = turns[0].user_id
    assert list(await store.search_vectors(uid, axis(3, dim=4), "e2", limit=10)) == ids[:2][::-1]
    assert set(await store.search_vectors(uid, axis(0), "e1", limit=10)) == {ids[2]}, "replaced, not compared"
    assert await store.embedding_progress("e1") == (1, 5)


async def test_unembedded_batches_of_one_person(store: Store) -> None:
    await say(store, "ana", "a0", "one")
    bob = await say(store, "bob", "b0", "two")
    assert [p.id for p in await store.unembedded("e1", user_id=bob.user_id)] == [bob.message.id]


async def test_load_context_recalls_by_vector_under_recall_rules(store: Store) -> None:
    old = await say(store, "ana", "a0", "I am allergic to peanuts")
    other = await say(store, "ana", "a1", "the weather was nice", T0 + timedelta(minutes=1))
    late = await say(store, "ana", "a2", "said after the question", T0 + timedelta(days=2))
    current = await say(store, "ana", "a3", "what should I avoid eating?", T0 + timedelta(days=1), surface="web")
    await store.write_vectors("e1", [(old.message.id, axis(0)), (other.message.id, axis(4)),
                                     (late.message.id, axis(0)), (current.message.id, axis(0))])
    rows = await store.load_context(query(current, axis(0, tilt=0.2), conversation_id=current.conversation_id,
                                          current_message_id=current.message.id, cross_limit=0))
    assert [m.id for m in rows.recalled] == [old.message.id, other.message.id]
    assert rows.recall_scores[old.message.id]["vector"] > 0.97 > rows.recall_scores[other.message.id]["vector"]
    none = await store.load_context(query(current, None))
    assert (none.recalled, none.recall_scores) == ([], {})
    other_name = await store.load_context(query(current, axis(0), embedder="e2"))
    assert (other_name.recalled, other_name.recall_scores) == ([], {})


async def test_forget_removes_the_vectors(store: Store, backend: Backend) -> None:
    ana = await say(store, "ana", "a0", "one")
    bob = await say(store, "bob", "b0", "two")
    await store.write_vectors("e1", [(ana.message.id, axis(0)), (bob.message.id, axis(0))])
    assert await store.search_vectors(ana.user_id, axis(0), "e1") == {ana.message.id: 1.0}
    assert await store.forget("ana")
    assert backend.count("message_vectors") == 1
    assert await store.search_vectors(ana.user_id, axis(0), "e1") == {}
    assert await store.search_vectors(bob.user_id, axis(0), "e1") == {bob.message.id: 1.0}


async def test_linked_people_search_each_other_s_vectors(store: Store) -> None:
    ana = await say(store, "ana", "a0", "one")
    other = await store.ingest(InboundMessage(surface="whatsapp", sender="+100", external_id="w0", text="two",
                                              received_at=T0), token_count=1)
    assert other is not None
    await store.write_vectors("e1", [(ana.message.id, axis(0)), (other.message.id, axis(1))])
    assert set(await store.search_vectors(ana.user_id, axis(0), "e1")) == {ana.message.id}
    assert await store.link_identity("ana", "whatsapp", "+100", "test") == ana.user_id
    assert set(await store.search_vectors(ana.user_id, axis(0), "e1")) == {ana.message.id, other.message.id}


async def test_vectors_written_or_forgotten_by_another_process_are_seen(store: Store, backend: Backend) -> None:
    ana = [await say(store, "ana", f"a{i}", f"message {i}", T0 + timedelta(minutes=i)) for i in range(3)]
    await store.write_vectors("e1", [(ana[0].message.id, axis(0))])
    uid = ana[0].user_id
    assert set(await store.search_vectors(uid, axis(0), "e1")) == {ana[0].message.id}  # cached now (SQLite)
    assert set(await store.search_vectors(uid, axis(0), "e1")) == {ana[0].message.id}
    other = backend.make()  # another process on the same database (`hilo embed` beside `hilo serve`)
    await other.open()
    try:
        await other.write_vectors("e1", [(ana[1].message.id, axis(0)), (ana[2].message.id, axis(1))])
        assert set(await store.search_vectors(uid, axis(0), "e1")) == {m.message.id for m in ana}
        assert await other.forget("ana")
    finally:
        await other.close()
    assert await store.search_vectors(uid, axis(0), "e1") == {}


async def test_every_recall_candidate_carries_its_own_cosine(store: Store) -> None:
    # three messages nearer the question than the lexical hit take the vector search's places (limit 3): the hit
    # is a candidate by its words (its neighbours, far in meaning, by being next to it), and it is scored with its
    # own cosine, not the floor of the vector term
    near = [await say(store, "ana", f"a{i}", text, T0 + timedelta(minutes=i))
            for i, text in enumerate(("good morning", "nice day", "lovely sun"))]
    before = await say(store, "ana", "a7", "the weather", T0 + timedelta(minutes=7))
    hit = await say(store, "ana", "a8", "I like pizza", T0 + timedelta(minutes=8))
    after = await say(store, "ana", "a9", "the news", T0 + timedelta(minutes=9))
    tilts = (0.0, 0.3, 0.5)
    await store.write_vectors("e1", [(t.message.id, axis(0, tilt=tilt)) for t, tilt in zip(near, tilts, strict=True)]
                              + [(hit.message.id, axis(0, tilt=1.2)), (before.message.id, axis(4)),
                                 (after.message.id, axis(5))])
    rows = await store.load_context(query(hit, axis(0), search_text="pizza", search_limit=3, cross_limit=0))
    assert hit.message.id in [m.id for m in rows.recalled]
    assert abs(rows.recall_scores[hit.message.id]["vector"] - math.cos(1.2)) < 0.01, rows.recall_scores


async def test_a_vector_hit_comes_without_its_neighbours_a_lexical_hit_with_them(store: Store) -> None:
    # two hours apart: an episode each, so no episode brings another's messages. Only "allergic" has a vector of
    # the question's embedder: the one vector hit. Its neighbours are far in meaning and share no word: read as
    # candidates they cost a vector search's 128 hits two index seeks and a row each (sql_recall.gather),
    # and they came back as recalled messages. The lexical hit's neighbours still come.
    texts = ("the weather", "I am allergic to peanuts", "the news", "walked the dog", "I like pizza", "read a book")
    said = [await say(store, "ana", f"a{i}", text, T0 + timedelta(hours=2 * i)) for i, text in enumerate(texts)]
    await store.write_vectors("e1", [(said[1].message.id, axis(0, tilt=0.1))])
    rows = await store.load_context(query(said[0], axis(0), search_text="pizza", search_limit=10, cross_limit=0))
    assert sorted(m.content for m in rows.recalled) == sorted(texts[1:2] + texts[3:6]), rows.recalled
    assert rows.recall_scores[said[1].message.id]["vector"] > 0.99


async def test_the_dialects_give_the_candidates_cosines_alike(store: Store) -> None:
    # the two ways a dialect gives candidates their cosine: in recall's row read (cosine_sql) or apart (cosines);
    # each dialect's `cosines` answers for the ids asked, of the person and the embedder, whichever it uses
    from memory.sql_vectors import VectorQuery

    ana = [await say(store, "ana", f"a{i}", f"note {i}", T0 + timedelta(minutes=i)) for i in range(3)]
    bob = await say(store, "bob", "b0", "bob's note")
    await store.write_vectors("e1", [(t.message.id, axis(0, tilt=0.4 * i)) for i, t in enumerate(ana)]
                              + [(bob.message.id, axis(0))])
    vq = VectorQuery(ana[0].user_id, tuple(axis(0)), "e1", 10)
    ids = [ana[1].message.id, ana[2].message.id, bob.message.id]
    got = await store._tx("read", lambda db: db.cosines(vq, ids))  # type: ignore[attr-defined]
    assert sorted(got) == ids[:2], "bob's vector is not ana's"
    assert all(abs(got[t.message.id] - math.cos(0.4 * i)) < 0.01 for i, t in enumerate(ana) if i), got


async def _history(store: Store) -> Ingested:
    """ana's history for the two ways of reading a context with a vector: lexical hits ("pizza") with neighbours,
    vector hits, messages of both, a memory with a vector; the question's turn."""
    texts = ("the weather", "I like pizza", "the news", "lovely sun", "pizza with friends", "fed the dog",
             "a good book", "nice day")
    said = [await say(store, "ana", f"h{i}", text, T0 + timedelta(hours=2 * i)) for i, text in enumerate(texts)]
    await store.write_vectors("e1", [(t.message.id, axis(i % 3, tilt=0.2 * i)) for i, t in enumerate(said)])
    await store.add_memory(said[0].user_id, MemoryDraft("likes the sea"), vector=axis(0, tilt=0.1), embedder="e1")
    return await say(store, "ana", "hq", "pizza or a walk?", T0 + timedelta(days=1), surface="web")


async def test_a_vector_given_while_the_store_reads_gives_the_same_context(store: Store) -> None:
    """Store.load_context with the question's embedding still being computed (`vector`): SQLite reads what needs
    no vector meanwhile and the rest after it (Postgres: a statement each); either way the context is the one read
    with the vector given, and the one read lexically when the embedding gives nothing."""
    turn = await _history(store)
    asked = query(turn, None, conversation_id=turn.conversation_id, current_message_id=turn.message.id,
                  search_text="pizza or a walk?", search_limit=8, at=datetime.now(UTC))  # the memory is new
    given = await store.load_context(replace(asked, query_vector=tuple(axis(0))))
    # the lexical hits, and a message only the vector search finds (no word of the question, no hit next to it)
    assert {"I like pizza", "pizza with friends", "a good book"} <= {m.content for m in given.recalled}
    assert given.memory_cosines and max(s["vector"] for s in given.recall_scores.values()) > 0.99

    async def embedded(vector: list[float] | None) -> tuple[float, ...] | None:
        return tuple(vector) if vector is not None else None

    assert await store.load_context(asked, vector=embedded(axis(0))) == given
    lexical = await store.load_context(replace(asked, embedder=""))
    assert await store.load_context(asked, vector=embedded(None)) == lexical
    assert "a good book" not in {m.content for m in lexical.recalled} and not lexical.memory_cosines


async def test_sqlite_reads_a_context_while_the_question_is_embedded(tmp_path: Any) -> None:
    """The read transaction of what needs no vector commits, and the person's vectors are in the cache, before
    the embedding is given: both wait for neither (the gate holds the embedding until the read is seen done)."""
    store = SqliteStore(str(tmp_path / "hilo.db"))
    await store.open()
    try:
        turn = await _history(store)
        asked = query(turn, None, conversation_id=turn.conversation_id, current_message_id=turn.message.id,
                      search_text="pizza or a walk?", search_limit=5)
        given = await store.load_context(replace(asked, query_vector=tuple(axis(0))))
        store.matrices.clear()  # a first turn since start: the matrix is read ahead too
        transactions, loads = store.counters["transactions"], store.matrices.counters["loads"]
        gate = asyncio.Event()

        async def embedded() -> tuple[float, ...]:
            await gate.wait()
            return tuple(axis(0))

        reading = asyncio.create_task(store.load_context(asked, vector=embedded()))
        await wait_until(lambda: store.counters["transactions"] == transactions + 1, "the read ahead")
        assert store.matrices.counters["loads"] == loads + 1 and not reading.done()
        gate.set()
        assert await reading == given
        assert store.counters["transactions"] == transactions + 2
        assert store.matrices.counters["loads"] == loads + 1, "the search used the matrix read ahead"
    finally:
        await store.close()


async def test_an_embedding_that_raises_drops_the_read_ahead(tmp_path: Any) -> None:
    """An embedder's error reaches the caller (embed_query turns the expected ones into None first); what was read
    meanwhile is dropped, and the store's worker goes on answering."""
    store = SqliteStore(str(tmp_path / "hilo.db"))
    await store.open()
    try:
        turn = await _history(store)
        asked = query(turn, None, conversation_id=turn.conversation_id, current_message_id=turn.message.id)

        async def broken() -> tuple[float, ...]:
            raise RuntimeError("the embedder broke")

        with pytest.raises(RuntimeError, match="the embedder broke"):
            await store.load_context(asked, vector=broken())
        lexical = replace(asked, embedder="")
        assert await store.load_context(asked, vector=_none()) == await store.load_context(lexical)
    finally:
        await store.close()


async def test_an_embedding_that_fails_while_the_store_reads_ahead_leaves_the_store_answering(store: Store) -> None:
    """On every backend: the embedder's error reaches the caller once the read ahead has begun (its task is
    cancelled: on Postgres maybe mid-statement); the store then reads the next contexts as ever."""
    turn = await _history(store)
    asked = query(turn, None, conversation_id=turn.conversation_id, current_message_id=turn.message.id,
                  search_text="pizza or a walk?", search_limit=8, at=datetime.now(UTC))
    counters: dict[str, int] = store.counters  # type: ignore[attr-defined]

    async def broken() -> tuple[float, ...]:
        began = counters["round_trips"]
        await wait_until(lambda: counters["round_trips"] > began, "the read ahead's start")
        raise RuntimeError("the embedder broke")

    for _ in range(3):
        with pytest.raises(RuntimeError, match="the embedder broke"):
            await store.load_context(asked, vector=broken())
        assert asyncio.all_tasks() == {asyncio.current_task()}, "the read ahead is not left running"
    given = await store.load_context(replace(asked, query_vector=tuple(axis(0))))

    async def embedded() -> tuple[float, ...]:
        return tuple(axis(0))

    assert await store.load_context(asked, vector=embedded()) == given
    assert given.recalled and {m.user_id for m in given.recalled} == {turn.user_id}


async def _none() -> None:
    return None


def test_the_writes_that_keep_the_sqlite_vector_cache_name_real_functions() -> None:
    """memory/dialect_sqlite.py's KEEPS_VECTORS holds names (their modules load only when used): each is a function
    of its module, named as the store names the logic it runs; anything else counts as a write that may change
    vectors."""
    import importlib

    from memory.dialect_sqlite import KEEPS_VECTORS, logic_name

    for name in KEEPS_VECTORS:
        module, _, function = name.rpartition(".")
        assert logic_name(getattr(importlib.import_module(module), function)) == name
    assert logic_name(lambda db: None) not in KEEPS_VECTORS


async def test_the_sqlite_matrices_stay_within_their_bound_and_still_answer(tmp_path: Any) -> None:
    store = SqliteStore(tmp_path / "hilo.db", cache_floats=3 * 2 * DIM)  # three people of two vectors each
    await store.open()
    try:
        people = []
        for p in range(5):
            turns = [await say(store, f"p{p}", f"p{p}-{i}", f"line {i}") for i in range(2)]
            await store.write_vectors("e1", [(t.message.id, axis(p + i)) for i, t in enumerate(turns)])
            people.append(turns)
        for p, turns in enumerate(people):
            hits = await store.search_vectors(turns[0].user_id, axis(p + 1), "e1", limit=1)
            assert list(hits) == [turns[1].message.id]
            assert store.matrices.held == sum(m.floats for m in store.matrices.entries.values()) <= 3 * 2 * DIM
        assert list(store.matrices.entries) == [(people[p][0].user_id, "e1") for p in (2, 3, 4)]  # least recent out
        assert store.matrices.counters["loads"] == 5
    finally:
        await store.close()
