"""The admin page's store side on every backend (memory/sql_admin.py through bot/admin.py): people paged with their
identities and last seen, a conversation's messages paged, costs per person and in all, and a memory edited (the
memories' supersede and merge rules kept) and deleted. One person's rows never answer for another's."""

from __future__ import annotations

from typing import Any

import pytest

from bot.admin import MAX_PAGE, Admin, MemoryEnded
from kernel.errors import NotFound
from kernel.types import InboundMessage, Ingested, MemoryDraft, ModelCallRecord
from memory.sql_spend import Window
from tests.backends import TestClock


async def turn(store: Any, sender: str, n: int, text: str, usd: float, conversation: int | None = None) -> Ingested:
    ingested = await store.ingest(InboundMessage(
        surface="web", sender=sender, external_id=f"{sender}-{n}", text=text,
        conversation_ref=str(conversation) if conversation else None), 3)
    assert ingested is not None
    call = ModelCallRecord("m1", "openai", 10, 20, 5, "ok", cost_usd=usd)
    await store.finish_turn(ingested, f"reply {n}", 2, [call])
    return ingested


async def test_people_are_paged_with_identities_last_seen_and_cost(store: Any, clock: TestClock) -> None:
    ana = await turn(store, "ana", 1, "hola", 0.25)
    clock.advance(60)
    bob = await turn(store, "bob", 1, "hi", 0.5)
    await turn(store, "bob", 2, "again", 0.5, bob.conversation_id)
    admin = Admin(store)
    first = await admin.people(0, 1)
    assert first["total"] == 2 and first["limit"] == 1
    [seen_last] = first["people"]  # bob wrote last: first
    assert seen_last["id"] == bob.user_id and seen_last["messages"] == 4 and seen_last["cost_usd"] == 1.0
    assert [i["external_user_id"] for i in seen_last["identities"]] == ["bob"]
    assert seen_last["last_seen"] > (await admin.people(1, 1))["people"][0]["last_seen"]
    second = (await admin.people(1, 1))["people"]
    assert [p["id"] for p in second] == [ana.user_id] and second[0]["identities"][0]["surface"] == "web"
    assert (await admin.people(0, 10_000))["limit"] == MAX_PAGE
    person = await admin.person(ana.user_id)
    assert person is not None and person["person"]["handle"] == ana.handle
    assert [c["id"] for c in person["conversations"]] == [ana.conversation_id]
    assert await admin.person(10**9) is None


async def test_messages_are_paged_and_only_the_persons_own(store: Any) -> None:
    ana = await turn(store, "ana", 1, "one", 0.0)
    for n in range(2, 5):
        await turn(store, "ana", n, f"text {n}", 0.0, ana.conversation_id)
    bob = await turn(store, "bob", 1, "bob's", 0.0)
    admin = Admin(store)
    newest = await admin.messages(ana.user_id, ana.conversation_id, None, 3)
    assert [m["content"] for m in newest["messages"]] == ["reply 3", "text 4", "reply 4"]
    older = await admin.messages(ana.user_id, ana.conversation_id, newest["before"], 10)
    assert [m["content"] for m in older["messages"]] == ["one", "reply 1", "text 2", "reply 2", "text 3"]
    assert older["before"] is None  # the last page
    with pytest.raises(NotFound):  # bob's conversation is not ana's, even asked by its id
        await admin.messages(ana.user_id, bob.conversation_id, None, 10)


async def test_costs_per_person_and_for_everyone(store: Any, clock: TestClock) -> None:
    ana = await turn(store, "ana", 1, "hola", 0.25)
    bob = await turn(store, "bob", 1, "hi", 0.5)
    day = clock().strftime("%Y-%m-%d")
    await store.reserve_spend([Window("day", ana.user_id, day, 10.0), Window("day", None, day, 10.0)], 0.25)
    admin = Admin(store)
    mine = await admin.costs(ana.user_id)
    assert mine["today"] == {"calls": 1, "cost_usd": 0.25, "tokens_in": 10, "tokens_out": 20}
    assert mine["month"]["cost_usd"] == mine["all"]["cost_usd"] == 0.25
    assert mine["windows"] == [{"scope": "day", "start": day, "spent_usd": 0.25}]
    everyone = await admin.costs(None)
    assert everyone["all"]["cost_usd"] == 0.75 and everyone["all"]["calls"] == 2
    assert everyone["windows"] == [{"scope": "day", "start": day, "spent_usd": 0.25}]  # the global window only
    top = await admin.top_spenders(0, 10)
    assert [(p["id"], p["cost_usd"]) for p in top] == [(bob.user_id, 0.5), (ana.user_id, 0.25)]


async def test_an_edit_supersedes_and_keeps_the_merge_rules(store: Any) -> None:
    ana = await turn(store, "ana", 1, "hola", 0.0)
    bob = await turn(store, "bob", 1, "hi", 0.0)
    tea = (await store.add_memory(ana.user_id, MemoryDraft("I like green tea", importance=0.8))).memory
    city = (await store.add_memory(ana.user_id, MemoryDraft("I live in Madrid, Spain", key="city"))).memory
    rex = (await store.add_memory(bob.user_id, MemoryDraft("my dog is called Rex"))).memory
    admin = Admin(store)
    edited = await admin.edit_memory(ana.user_id, tea.id, "I like black tea")
    assert edited is not None and edited.outcome == "superseded" and edited.previous == tea.id
    old = await store.memory(ana.user_id, tea.id)
    new_id = int(edited.memory["id"][1:])
    assert old is not None and old.ended_at is not None and old.superseded_by == new_id  # the audit trail stays
    new = await store.memory(ana.user_id, new_id)
    assert new is not None and new.importance == 0.8 and new.content == "I like black tea"
    with pytest.raises(MemoryEnded):
        await admin.edit_memory(ana.user_id, tea.id, "again")
    # a wording that repeats another current memory merges into it, as any new memory would
    merged = await admin.edit_memory(ana.user_id, new_id, "I live in Madrid, Spain")
    assert merged is not None and merged.outcome == "merged" and merged.memory["id"] == f"m{city.id}"
    current = [m.id for m in await store.memories(ana.user_id)]
    assert current == [city.id]
    # another's memory: not found through this person, and untouched
    assert await admin.edit_memory(ana.user_id, rex.id, "my dog is called Max") is None
    assert not await admin.forget_memory(ana.user_id, rex.id)
    kept = await store.memory(bob.user_id, rex.id)
    assert kept is not None and kept.content == "my dog is called Rex" and kept.ended_at is None
    assert await admin.forget_memory(ana.user_id, city.id)
    assert await store.memories(ana.user_id) == []
    listed = await admin.memories(ana.user_id)  # the ended ones stay listed, as `hilo memory --all` shows them
    assert {m["id"] for m in listed} == {f"m{tea.id}", f"m{new_id}"} and all(m["ended_at"] for m in listed)
