"""Memories in the store (memory/sql_memories.py), on both backends: add, merge, supersede, touch, expire, forget.

The store's clock fixture (tests/backends.py TestClock) moves time instead of editing rows: expiry is by the clock.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from kernel.errors import InputError
from kernel.types import InboundMessage
from memory.store import ContextQuery, Ingested, MemoryDraft, Store
from tests.backends import Backend, TestClock

DAY = 86400.0


async def turn(store: Store, text: str, ext: str, handle: str = "ana") -> Ingested:
    t = await store.ingest(InboundMessage(surface="cli", sender=handle, external_id=ext, text=text,
                                          received_at=store.clock(), handle=handle), 3)
    assert t is not None
    return t


def query(t: Ingested, store: Store, text: str = "") -> ContextQuery:
    at = store.clock()
    return ContextQuery(user_id=t.user_id, surface="cli", conversation_id=t.conversation_id,
                        current_message_id=t.message.id, at=at, cross_since=at - timedelta(days=1),
                        search_text=text)


async def test_stated_memory_defaults_and_short_id(store: Store) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    added = await store.add_memory(uid, MemoryDraft("works at Acme", key="employer"))
    m = added.memory
    assert added.outcome == "added" and added.previous is None
    assert (m.kind, m.key, m.source, m.confidence, m.importance, m.access_count) == (
        "fact", "employer", "stated", 1.0, 0.5, 0)
    assert m.short_id == f"m{m.id}" and m.terms == ("work", "works", "acm", "acme") and m.token_count > 0
    inferred = (await store.add_memory(uid, MemoryDraft("likes jazz", kind="preference", source="inferred"))).memory
    assert inferred.confidence == 0.7
    observed = (await store.add_memory(uid, MemoryDraft("writes late at night", source="observed"))).memory
    assert observed.confidence == 0.5
    assert [x.id for x in await store.memories(uid)] == [observed.id, inferred.id, m.id]  # newest first
    assert await store.memory(uid, m.id) == m


async def test_a_bad_draft_is_refused_clearly(store: Store) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    for draft in (MemoryDraft("  "), MemoryDraft("x", kind="secret"), MemoryDraft("x", source="rumour"),
                  MemoryDraft("x", importance=1.5), MemoryDraft("x", confidence=-0.1)):
        with pytest.raises(InputError) as info:
            await store.add_memory(uid, draft)
        assert info.value.key == "memory_invalid"
    assert await store.memories(uid) == []


async def test_near_duplicates_merge_keeping_highest_confidence_and_newest_source(store: Store) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    t1 = await turn(store, "I live in Lisbon", "e1")
    t2 = await turn(store, "yes, I live in Lisbon now", "e2")
    first = (await store.add_memory(uid, MemoryDraft("lives in Lisbon", importance=0.4,
                                                       source_message_ids=(t1.message.id,)))).memory
    again = await store.add_memory(uid, MemoryDraft("lives in Lisbon now", source="inferred", importance=0.8,
                                                      source_message_ids=(t2.message.id,)))
    assert again.outcome == "merged" and again.memory.id == first.id
    m = again.memory
    # the stated 1.0 stays (and its wording, the more confident one); the newest source; the larger importance
    assert (m.content, m.confidence, m.source, m.importance) == ("lives in Lisbon", 1.0, "inferred", 0.8)
    assert m.source_message_ids == (t1.message.id, t2.message.id)
    assert m.source_external_ids == ("e1", "e2")
    assert [x.id for x in await store.memories(uid, include_ended=True)] == [first.id]
    # "room 12" is not "room 14": every word counts, numbers too
    assert (await store.add_memory(uid, MemoryDraft("lives in Lisbon, room 12"))).outcome == "added"
    assert (await store.add_memory(uid, MemoryDraft("lives in Lisbon, room 14"))).outcome == "added"


async def test_a_vector_merges_what_words_do_not(store: Store) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    a = (await store.add_memory(uid, MemoryDraft("has a dog"), vector=[1.0, 0.0, 0.1], embedder="e5")).memory
    other = await store.add_memory(uid, MemoryDraft("owns a puppy"), vector=[0.99, 0.0, 0.12], embedder="e5")
    assert other.outcome == "merged" and other.memory.id == a.id
    # another embedder's vector is never compared
    far = await store.add_memory(uid, MemoryDraft("keeps a hound"), vector=[0.99, 0.0, 0.12], embedder="other")
    assert far.outcome == "added"


async def test_a_newer_fact_of_the_same_key_supersedes_and_only_it_reaches_the_context(store: Store) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    old = (await store.add_memory(uid, MemoryDraft("works at Acme", key="employer"))).memory
    new = await store.add_memory(uid, MemoryDraft("works at Globex", key="Employer", source="inferred"))
    assert new.outcome == "superseded" and new.previous is not None and new.previous.id == old.id
    ended = await store.memory(uid, old.id)
    assert ended is not None and ended.ended_at is not None and ended.superseded_by == new.memory.id
    assert [m.content for m in await store.memories(uid)] == ["works at Globex"]
    assert [m.content for m in await store.memories(uid, include_ended=True)] == ["works at Globex", "works at Acme"]
    t = await turn(store, "where do I work?", "q1")
    rows = await store.load_context(query(t, store, "where do I work at Acme"))
    assert [m.content for m in rows.facts] == ["works at Globex"]
    # an explicit `supersedes` from the extractor, whatever the key
    third = await store.add_memory(uid, MemoryDraft("is between jobs", supersedes=new.memory.id))
    assert third.outcome == "superseded" and [m.content for m in await store.memories(uid)] == ["is between jobs"]


async def test_supersedes_never_reaches_another_persons_memory(store: Store) -> None:
    ana = await store.user_id("ana", create=True)
    bob = await store.user_id("bob", create=True)
    assert ana is not None and bob is not None
    bobs = (await store.add_memory(bob, MemoryDraft("works at Initech", key="employer"))).memory
    t = await turn(store, "bob's message", "b1", handle="bob")
    added = await store.add_memory(ana, MemoryDraft("works at Acme", key="employer", supersedes=bobs.id,
                                                      source_message_ids=(t.message.id,)))
    assert added.outcome == "added" and added.memory.source_message_ids == ()  # not her message: dropped
    assert [m.ended_at for m in await store.memories(bob, include_ended=True)] == [None]
    assert await store.memory(ana, bobs.id) is None and await store.forget_memory(ana, bobs.id) is False


async def test_a_turn_counts_the_memories_its_context_used(store: Store, clock: TestClock) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    used = (await store.add_memory(uid, MemoryDraft("has a parrot called Kiwi"))).memory
    unused = (await store.add_memory(uid, MemoryDraft("likes tea"))).memory
    t = await turn(store, "how is Kiwi?", "k1")
    clock.advance(60)
    before = store.counters["transactions"]  # type: ignore[attr-defined]
    await store.finish_turn(t, "Kiwi is well", 3, [], memory_ids=[used.id])
    assert store.counters["transactions"] - before == 1  # type: ignore[attr-defined]  # in the turn's own
    now = await store.memory(uid, used.id)
    assert now is not None and now.access_count == 1 and now.last_accessed_at is not None
    assert now.last_accessed_at >= t.message.created_at
    untouched = await store.memory(uid, unused.id)
    assert untouched is not None and (untouched.access_count, untouched.last_accessed_at) == (0, None)
    await store.touch_memories(uid, [used.id, unused.id])
    assert [m.access_count for m in await store.memories(uid)] == [1, 2]


async def test_low_importance_memories_unused_for_the_expiry_time_end(store: Store, clock: TestClock) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    trivial = (await store.add_memory(uid, MemoryDraft("wore a blue shirt once", importance=0.1))).memory
    used = (await store.add_memory(uid, MemoryDraft("had a sandwich", importance=0.1))).memory
    kept = (await store.add_memory(uid, MemoryDraft("is allergic to peanuts", importance=0.9))).memory
    soon = (await store.add_memory(uid, MemoryDraft("dentist on Friday", kind="event", importance=0.9,
                                                      expires_at=store.clock() + timedelta(days=3)))).memory
    idle = timedelta(days=120)
    clock.advance(119 * DAY)
    await store.touch_memories(uid, [used.id])
    assert await store.expire_memories(0.3, idle) == 1  # the event's date passed
    clock.advance(2 * DAY)
    assert await store.expire_memories(0.3, idle) == 1  # 121 days unused and unimportant
    current = {m.id for m in await store.memories(uid)}
    assert current == {used.id, kept.id}
    gone = await store.memory(uid, trivial.id)
    assert gone is not None and gone.ended_at is not None and gone.superseded_by is None  # ended, kept
    assert soon.id not in current
    assert await store.expire_memories(0.3, idle) == 0


async def test_forget_one_memory_by_id_and_find_by_words(store: Store, backend: Backend) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    acme = (await store.add_memory(uid, MemoryDraft("works at Acme"), vector=[0.1, 0.2], embedder="e5")).memory
    await store.add_memory(uid, MemoryDraft("has a dog called Rex"))
    await store.add_memory(uid, MemoryDraft("has a cat called Tom"))
    assert [m.content for m in await store.find_memories(uid, "Acme")] == ["works at Acme"]
    assert sorted(m.content for m in await store.find_memories(uid, "called")) == [
        "has a cat called Tom", "has a dog called Rex"]  # too close to choose
    assert [m.content for m in await store.find_memories(uid, "the dog Rex")] == ["has a dog called Rex"]
    assert await store.find_memories(uid, "zanzibar") == []
    assert await store.forget_memory(uid, acme.id) is True
    assert await store.forget_memory(uid, acme.id) is False
    assert await store.memory(uid, acme.id) is None
    assert backend.count("memories") == 2


async def test_forgetting_the_newer_memory_leaves_the_older_ended(store: Store) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    old = (await store.add_memory(uid, MemoryDraft("lives in Porto", key="city"))).memory
    new = (await store.add_memory(uid, MemoryDraft("lives in Lisbon", key="city"))).memory
    assert await store.forget_memory(uid, new.id)
    left = await store.memory(uid, old.id)
    assert left is not None and left.ended_at is not None and left.superseded_by is None
    assert await store.memories(uid) == []
