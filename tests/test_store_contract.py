"""The Store contract, one suite for every backend (the `backend` and `store` fixtures of conftest.py).

Tests talk to the `Store` Protocol only. What a test must check underneath (rows left after `forget`,
the full-text index, recorded migrations) goes through the backend's small inspection adapter in
tests/backends.py, so adding a backend is adding one adapter class to BACKENDS: no test changes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kernel.errors import NotFound, RateLimited
from kernel.types import InboundMessage, ModelCallRecord, StoredMessage
from memory.dialect_sqlite import SqliteStore
from memory.rows import MSG_COLS, to_message
from memory.store import ContextQuery, ImportRow, Ingested, Store, StoreError
from tests.backends import TABLES, Backend

NOW = datetime.now(UTC).replace(microsecond=0)
T0 = NOW - timedelta(days=2)  # test messages happen after T0; replies are stamped with the real clock
LATER = NOW + timedelta(hours=1)


def msg(surface: str, sender: str, ext: str, text: str, at: datetime = T0, *, ref: str | None = None,
        handle: str | None = None, **metadata: Any) -> InboundMessage:
    return InboundMessage(surface=surface, sender=sender, external_id=ext, text=text, received_at=at,
                          conversation_ref=ref, handle=handle, metadata=metadata)


async def put(store: Store, m: InboundMessage) -> Ingested:
    turn = await store.ingest(m, token_count=len(m.text.split()))
    assert turn is not None
    return turn


def query(turn: Ingested, **kw: Any) -> ContextQuery:
    base = ContextQuery(user_id=turn.user_id, surface=turn.message.surface, conversation_id=turn.conversation_id,
                        current_message_id=turn.message.id, at=LATER, cross_since=T0 - timedelta(days=30))
    return replace(base, **kw)


def call(outcome: str = "ok", model: str = "m1") -> ModelCallRecord:
    return ModelCallRecord(model=model, provider="fake", tokens_in=10, tokens_out=5, latency_ms=12, outcome=outcome)


# -- ingest: idempotency, identity, conversations -------------------------------------------------------

async def test_redelivery_is_dropped_even_after_reopen(store: Store, backend: Backend) -> None:
    first = await put(store, msg("telegram", "42", "u1", "hello"))
    assert await store.ingest(msg("telegram", "42", "u1", "hello again"), 2) is None
    await store.close()
    reopened = backend.make()
    await reopened.open()
    try:
        assert await reopened.ingest(msg("telegram", "42", "u1", "hello"), 1) is None
        assert backend.counts(first.user_id)["messages"] == 1
        # the same external id on another surface is another message
        assert await reopened.ingest(msg("whatsapp", "+1", "u1", "hola"), 1) is not None
    finally:
        await reopened.close()


async def test_concurrent_redeliveries_store_one_message(store: Store, backend: Backend) -> None:
    results = await asyncio.gather(*(store.ingest(msg("telegram", "7", "same", "hi"), 1) for _ in range(10)))
    stored = [r for r in results if r is not None]
    assert len(stored) == 1
    assert backend.counts(stored[0].user_id)["messages"] == 1


async def test_first_contact_creates_user_and_identity_then_reuses_them(store: Store, backend: Backend) -> None:
    a = await put(store, msg("telegram", "12345", "m1", "hi"))
    b = await put(store, msg("telegram", "12345", "m2", "again"))
    assert a.created_user and not b.created_user
    assert a.handle == b.handle == "telegram:12345"
    assert a.user_id == b.user_id and a.conversation_id == b.conversation_id
    assert await store.user_id("telegram:12345") == a.user_id
    assert backend.counts(a.user_id)["identities"] == 1
    other = await put(store, msg("telegram", "999", "m3", "hey"))
    assert other.user_id != a.user_id and other.conversation_id != a.conversation_id


async def test_handle_names_the_user_whatever_the_surface(store: Store) -> None:
    a = await put(store, msg("cli", "ana", "c1", "hi", handle="ana"))
    b = await put(store, msg("telegram", "555", "t1", "hi", handle="ana"))
    assert a.handle == b.handle == "ana" and a.user_id == b.user_id
    assert a.conversation_id != b.conversation_id


async def test_one_singleton_conversation_per_user_and_surface(store: Store) -> None:
    t1 = await put(store, msg("telegram", "1", "a", "x", handle="ana"))
    t2 = await put(store, msg("telegram", "1", "b", "y", handle="ana"))
    w1 = await put(store, msg("whatsapp", "+34", "c", "z", handle="ana"))
    assert t1.conversation_id == t2.conversation_id != w1.conversation_id
    assert await store.find_conversation(t1.user_id, "telegram") == t1.conversation_id
    assert {c.surface for c in await store.conversations(t1.user_id)} == {"telegram", "whatsapp"}


async def test_web_conversations_are_owned(store: Store, backend: Backend) -> None:
    a1 = await put(store, msg("web", "visitor-a", "w1", "first chat", handle="ana"))
    a2 = await put(store, msg("web", "visitor-a", "w2", "same chat", ref=str(a1.conversation_id), handle="ana"))
    a3 = await put(store, msg("web", "visitor-a", "w3", "a new chat", handle="ana"))
    assert a1.conversation_id == a2.conversation_id != a3.conversation_id
    with pytest.raises(NotFound):
        await store.ingest(msg("web", "visitor-b", "w4", "sneaky", ref=str(a1.conversation_id), handle="bob"), 1)
    with pytest.raises(NotFound):
        await store.ingest(msg("web", "visitor-a", "w5", "bad ref", ref="not-a-number", handle="ana"), 1)
    bob = await store.user_id("bob")
    assert bob is None or backend.counts(bob)["messages"] == 0, "a refused message leaves nothing behind"
    assert await put(store, msg("web", "visitor-b", "w4", "retry without ref", handle="bob"))
    assert [m.id for m in await store.messages(a1.user_id, a1.conversation_id)] == [a1.message.id, a2.message.id]
    created = await store.create_conversation(a1.user_id, "web", title="notes")
    infos = await store.conversations(a1.user_id)
    assert infos[0].id == created and infos[0].title == "notes" and infos[0].message_count == 0
    assert {i.id: i.message_count for i in infos}[a1.conversation_id] == 2


async def test_metadata_and_timestamps_round_trip(store: Store) -> None:
    at = datetime(2024, 3, 1, 8, 30, 15, 123456, tzinfo=UTC)
    turn = await put(store, msg("web", "v", "meta", "hi", at, handle="ana", locale="es", nested={"k": [1]}))
    [stored] = await store.messages(turn.user_id, turn.conversation_id)
    assert stored.created_at == at and stored.created_at.tzinfo is not None
    assert stored.metadata == {"locale": "es", "nested": {"k": [1]}} == turn.message.metadata


# -- load_context --------------------------------------------------------------------------------------

async def test_context_excludes_current_and_queued_turns_but_keeps_replies(store: Store) -> None:
    t = [await put(store, msg("telegram", "1", f"m{i}", f"message {i}", T0 + timedelta(minutes=i))) for i in range(4)]
    r0 = await store.finish_turn(t[0], "reply to 0", 3, [call()])
    r1 = await store.finish_turn(t[1], "reply to 1", 3, [call()])  # stored after the queued t[3]
    assert r0 and r1 and r1.id > t[3].message.id
    rows = await store.load_context(query(t[2]))  # answering message 2 while message 3 waits
    assert [m.content for m in rows.conversation] == ["message 0", "reply to 0", "message 1", "reply to 1"]
    assert rows.conversation[1].reply_to == t[0].message.id


async def test_context_recent_limit_keeps_the_newest(store: Store) -> None:
    t = [await put(store, msg("cli", "ana", f"c{i}", f"line {i}", T0 + timedelta(minutes=i), handle="ana"))
         for i in range(10)]
    rows = await store.load_context(query(t[-1], recent_limit=3))
    assert [m.content for m in rows.conversation] == ["line 6", "line 7", "line 8"]
    rows = await store.load_context(query(t[-1], at=T0 + timedelta(minutes=4, seconds=30)))
    assert [m.content for m in rows.conversation] == [f"line {i}" for i in range(5)], "nothing after `at`"


async def test_cross_surface_window_edges_and_limit(store: Store) -> None:
    at, since = T0 + timedelta(hours=10), T0 + timedelta(hours=2)
    us = timedelta(microseconds=1)
    for ext, when in [("before", since - us), ("edge", since), ("mid", since + timedelta(hours=1)),
                      ("last", at), ("after", at + us)]:
        await put(store, msg("telegram", "1", ext, f"telegram {ext}", when, handle="ana"))
    other_web = await put(store, msg("web", "v", "w-other", "other web chat", since + timedelta(hours=2), handle="ana"))
    current = await put(store, msg("web", "v", "w-now", "what did I say?", at, handle="ana"))
    assert other_web.conversation_id != current.conversation_id
    rows = await store.load_context(query(current, at=at, cross_since=since))
    assert [m.content for m in rows.cross_surface] == ["telegram edge", "telegram mid", "telegram last"]
    assert all(m.surface == "telegram" for m in rows.cross_surface)
    rows = await store.load_context(query(current, at=at, cross_since=since, cross_limit=2))
    assert [m.content for m in rows.cross_surface] == ["telegram mid", "telegram last"]


async def test_recall_ranks_by_relevance_and_skips_what_is_already_there(store: Store) -> None:
    old = [
        ("w1", "my grandmother's banana bread recipe uses walnuts"),
        ("w2", "I bought bread at the bakery"),
        ("w3", "the weather is nice today"),
        ("w4", "banana smoothies are great"),
    ]
    for i, (ext, text) in enumerate(old):
        await put(store, msg("web", "v", ext, text, T0 + timedelta(minutes=i), handle="ana"))
    recent = await put(store, msg("telegram", "1", "t1", "banana bread recipe again", T0 + timedelta(hours=5),
                                  handle="ana"))
    current = await put(store, msg("whatsapp", "+1", "wa1", "banana bread recipe?", T0 + timedelta(hours=6),
                                   handle="ana"))
    rows = await store.load_context(query(current, cross_since=T0 + timedelta(hours=4),
                                          search_text="Can you send the banana bread recipe?"))
    assert [m.external_id for m in rows.cross_surface] == ["t1"]
    recalled = [m.external_id for m in rows.recalled]
    assert recalled[0] == "w1"
    assert set(recalled) == {"w1", "w2", "w4"}, "not the cross-surface one, not the current one, not unrelated"
    assert recent.message.id not in {m.id for m in rows.recalled}


async def test_a_person_whose_whole_history_is_in_the_window_is_not_searched(store: Store) -> None:
    # every earlier message is in the conversation's window already: recall has nothing left to find, and on
    # SQLite (where a statement costs no round trip) one probe says so instead of the search's five statements
    for i, text in enumerate(["banana bread recipe", "walnuts in the banana bread", "bake it at 180"]):
        await put(store, msg("cli", "ana", f"w{i}", text, T0 + timedelta(minutes=i), handle="ana"))
    current = await put(store, msg("cli", "ana", "w9", "banana bread again?", T0 + timedelta(minutes=9), handle="ana"))
    before = dict(store.counters) if isinstance(store, SqliteStore) else {}
    rows = await store.load_context(query(current, search_text="banana bread again?"))
    assert [m.external_id for m in rows.conversation] == ["w0", "w1", "w2"]
    assert rows.recalled == []
    if isinstance(store, SqliteStore):  # facts, recent and cross-surface (one statement), the probe
        assert store.counters["statements"] - before["statements"] == 3
    # the same question with a window of one message: the older ones are found by recall
    rows = await store.load_context(query(current, search_text="banana bread again?", recent_limit=1))
    assert [m.external_id for m in rows.conversation] == ["w2"]
    assert {m.external_id for m in rows.recalled} == {"w0", "w1"}


async def test_recall_is_safe_for_any_text(store: Store) -> None:
    turn = await put(store, msg("cli", "ana", "c1", "plain words here", handle="ana"))
    for text in ['" OR owner : *', "NEAR(a b) AND ^x", "col:val - (", "", "?!", "a b c", "ünïcödé wörds", "x" * 5000]:
        rows = await store.load_context(query(turn, search_text=text, current_message_id=None, conversation_id=None))
        assert all(m.user_id == turn.user_id for m in rows.recalled)
    rows = await store.load_context(query(turn, search_text="WORDS", current_message_id=None, conversation_id=None))
    assert [m.external_id for m in rows.recalled] == ["c1"], "case-insensitive, and a dry run sees everything"


async def test_a_word_never_seen_before_is_found_as_soon_as_it_is_said(store: Store) -> None:
    first = await put(store, msg("cli", "ana", "c1", "plain words here", handle="ana"))
    probe = {"search_text": "quokka", "current_message_id": None, "conversation_id": None}
    assert (await store.load_context(query(first, **probe))).recalled == []  # nobody said it yet
    await put(store, msg("cli", "ana", "c2", "I saw a quokka on Rottnest", handle="ana"))
    recalled = (await store.load_context(query(first, **probe))).recalled
    assert [m.external_id for m in recalled] == ["c2", "c1"], "the hit first, then its neighbour"


async def test_recall_searches_every_word_and_ranks_rare_ones_first(store: Store) -> None:
    for i in range(120):  # "banana" is in every message: searched too (no frequency cut), with little weight
        await put(store, msg("cli", "ana", f"h{i}", f"banana number {i}", handle="ana"))
    rare = await put(store, msg("cli", "ana", "r1", "banana, my parrot is called Kiwi", handle="ana"))
    rows = await store.load_context(query(rare, search_text="banana parrot", current_message_id=None,
                                          conversation_id=None))
    assert rows.recalled[0].external_id == "r1"
    rows = await store.load_context(query(rare, search_text="banana", current_message_id=None, conversation_id=None))
    assert len(rows.recalled) == 20, "every message holds it: the search limit is reached"


async def test_facts_newest_limit_oldest_first(store: Store) -> None:
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    for i in range(5):
        fact = await store.remember(uid, f"fact {i}", 2)
    assert fact.content == "fact 4" and fact.user_id == uid
    turn = await put(store, msg("cli", "ana", "c1", "hi", handle="ana"))
    rows = await store.load_context(query(turn, facts_limit=3))
    assert [f.content for f in rows.facts] == ["fact 2", "fact 3", "fact 4"]


async def test_people_never_see_each_other(store: Store) -> None:
    a = await put(store, msg("telegram", "A", "a1", "secret banana plans of Ana", T0))
    b = await put(store, msg("telegram", "B", "b1", "secret banana plans of Bob", T0))
    await put(store, msg("web", "vb", "b2", "Bob's banana web chat", T0 + timedelta(minutes=1), handle=b.handle))
    await store.remember(b.user_id, "Bob likes bananas", 3)
    await store.finish_turn(b, "banana reply for Bob", 4, [call()])
    a2 = await put(store, msg("telegram", "A", "a2", "banana?", T0 + timedelta(minutes=2)))
    rows = await store.load_context(query(a2, search_text="secret banana plans"))
    assert [m.external_id for m in rows.conversation + rows.recalled] == ["a1"], "Ana sees her own rows"
    for q in [query(a2, search_text="secret banana plans Bob web chat"),
              query(a2, conversation_id=b.conversation_id, search_text="banana")]:  # even a wrong conversation id
        rows = await store.load_context(q)
        everything = rows.conversation + rows.cross_surface + rows.recalled
        assert all(m.user_id == a.user_id for m in everything)
        assert not any("Bob" in m.content for m in everything) and rows.facts == []
    with pytest.raises(NotFound):
        await store.messages(a.user_id, b.conversation_id)
    inspected = await store.inspect(a.handle)
    assert inspected is not None and "Bob" not in repr(inspected)
    assert await store.model_calls(a.user_id) == []


# -- finish_turn ---------------------------------------------------------------------------------------

async def test_finish_turn_stores_reply_and_calls_together(store: Store) -> None:
    turn = await put(store, msg("telegram", "1", "m1", "hi"))
    calls = [call("rate_limited", "big"), replace(call("ok", "small"), fallback_from="big")]
    reply = await store.finish_turn(turn, "hello!", 2, calls, metadata={"model": "small"})
    assert reply is not None and reply.role == "assistant" and reply.reply_to == turn.message.id
    assert reply.external_id is None and reply.conversation_id == turn.conversation_id
    assert reply.metadata == {"model": "small"} and reply.created_at >= turn.message.created_at
    stored = await store.messages(turn.user_id, turn.conversation_id)
    assert [m.content for m in stored] == ["hi", "hello!"]
    rows = await store.model_calls(turn.user_id)
    assert [(r["model"], r["outcome"], r["fallback_from"], r["message_id"]) for r in rows] == [
        ("big", "rate_limited", None, turn.message.id), ("small", "ok", "big", turn.message.id)]
    [info] = await store.conversations(turn.user_id)
    assert info.updated_at >= reply.created_at


async def test_finish_turn_without_reply_keeps_the_failed_calls(store: Store) -> None:
    turn = await put(store, msg("telegram", "1", "m1", "hi"))
    assert await store.finish_turn(turn, None, 0, [call("server_error")]) is None
    assert [m.role for m in await store.messages(turn.user_id, turn.conversation_id)] == ["user"]
    assert [r["outcome"] for r in await store.model_calls(turn.user_id)] == ["server_error"]


async def test_finish_turn_is_atomic(store: Store) -> None:
    turn = await put(store, msg("telegram", "1", "m1", "hi"))
    broken = replace(call(), model=None)  # type: ignore[arg-type]  # violates NOT NULL
    with pytest.raises(StoreError):
        await store.finish_turn(turn, "never stored", 2, [call(), broken])
    assert [m.role for m in await store.messages(turn.user_id, turn.conversation_id)] == ["user"]
    assert await store.model_calls(turn.user_id) == []


# -- import, inspect, forget ---------------------------------------------------------------------------

async def test_import_is_idempotent_and_files_rows_into_conversations(store: Store) -> None:
    live = await put(store, msg("telegram", "1", "live", "live message", handle="ana"))
    rows = [ImportRow("ana", "telegram", "user", f"tg {i}", T0 + timedelta(minutes=i), 2, f"tg-{i}") for i in range(3)]
    rows += [ImportRow("ana", "web", "user", "web a", T0, 2, "wa", "chat-a"),
             ImportRow("ana", "web", "assistant", "web a reply", T0, 3, "wa-r", "chat-a"),
             ImportRow("ana", "web", "user", "web b", T0, 2, "wb", "chat-b"),
             ImportRow("ana", "web", "user", "web loose", T0, 2, "wl"),
             ImportRow("bob", "cli", "user", "no external id", T0, 3)]
    first = await store.import_rows(rows)
    assert (first.inserted, first.skipped) == (len(rows), 0)
    second = await store.import_rows(rows)
    assert (second.inserted, second.skipped) == (1, len(rows) - 1), "rows without external_id always go in"
    assert await store.ingest(msg("telegram", "1", "tg-0", "redelivered?", handle="ana"), 1) is None
    infos = {(i.surface, i.id): i.message_count for i in await store.conversations(live.user_id)}
    assert infos[("telegram", live.conversation_id)] == 4, "imported telegram rows join the singleton"
    assert sorted(n for (s, _), n in infos.items() if s == "web") == [1, 1, 2]
    assert await store.import_rows([]) == type(first)(inserted=0, skipped=0)


async def test_inspect_shows_everything_json_ready(store: Store) -> None:
    import json

    turn = await put(store, msg("telegram", "42", "m1", "hi there", T0, lang="en"))
    await store.finish_turn(turn, "hello", 1, [call()])
    await store.remember(turn.user_id, "likes tea", 2)
    data = await store.inspect(turn.handle)
    assert data is not None
    json.dumps(data)
    assert data["user"]["handle"] == "telegram:42" and data["user"]["id"] == turn.user_id
    assert [(i["surface"], i["external_user_id"]) for i in data["identities"]] == [("telegram", "42")]
    [conv] = data["conversations"]
    assert conv["surface"] == "telegram" and conv["id"] == turn.conversation_id
    assert [(m["role"], m["content"], m["external_id"], m["reply_to"]) for m in conv["messages"]] == [
        ("user", "hi there", "m1", None), ("assistant", "hello", None, turn.message.id)]
    assert conv["messages"][0]["metadata"] == {"lang": "en"}
    assert conv["messages"][0]["created_at"].startswith(T0.strftime("%Y-%m-%dT%H:%M:%S"))
    assert [(m["short_id"], m["content"], m["source"], m["confidence"]) for m in data["memories"]] == [
        (f"m{data['memories'][0]['id']}", "likes tea", "stated", 1.0)]
    assert [c["model"] for c in data["model_calls"]] == ["m1"]
    assert await store.inspect("nobody") is None


async def test_forget_leaves_nothing(store: Store, backend: Backend) -> None:
    ana = await put(store, msg("telegram", "1", "a1", "zanzibar holiday plans"))
    await put(store, msg("web", "v", "a2", "more zanzibar", handle=ana.handle))
    await store.finish_turn(ana, "zanzibar reply", 2, [call()])
    await store.remember(ana.user_id, "going to zanzibar", 3)
    await store.import_rows([ImportRow(ana.handle, "whatsapp", "user", "zanzibar import", T0, 2, "imp")])
    bob = await put(store, msg("telegram", "2", "b1", "zanzibar for Bob too"))
    assert backend.counts(ana.user_id)["fts"] == 4
    assert await store.forget(ana.handle) is True
    assert await store.inspect(ana.handle) is None
    assert backend.counts(ana.user_id) == dict.fromkeys([*TABLES, "fts"], 0)
    assert backend.fts_hits("zanzibar") == [bob.message.id]
    assert await store.forget(ana.handle) is False
    again = await put(store, msg("telegram", "1", "a3", "hello again"))
    assert again.created_user and again.user_id != ana.user_id, "a returning person starts afresh"


async def test_user_id_lookup_and_creation(store: Store) -> None:
    assert await store.user_id("zoe") is None
    uid = await store.user_id("zoe", create=True)
    assert uid is not None and await store.user_id("zoe") == uid == await store.user_id("zoe", create=True)
    assert await store.find_conversation(uid, "telegram") is None
    web = await store.create_conversation(uid, "web")
    assert await store.find_conversation(uid, "web") == web


async def test_migrations_are_recorded(store: Store, backend: Backend) -> None:
    recorded = backend.migrations()
    assert recorded and recorded == sorted(recorded)
    assert await store.migrate() == []


async def test_a_turn_is_three_transactions(store: Store) -> None:
    counters = getattr(store, "counters", None)
    if counters is None:
        pytest.skip("this backend does not count its work")
    await put(store, msg("telegram", "1", "warm", "warm up"))
    before = dict(counters)
    turn = await put(store, msg("telegram", "1", "m1", "hi"))
    await store.load_context(query(turn, search_text="hi there"))
    await store.finish_turn(turn, "hello", 1, [call()])
    assert counters["transactions"] - before["transactions"] == 3
    assert counters["round_trips"] - before["round_trips"] == 3
    # ingest and finish_turn each place their message in its episode (one statement: memory/episodes.py JOIN);
    # on SQLite recall's probe comes first (memory/sql_recall.py OUTSIDE: "warm up" is in another conversation)
    assert counters["statements"] - before["statements"] <= 13


async def test_ingest_reads_the_context_it_is_given_once(store: Store, backend: Backend) -> None:
    earlier = await put(store, msg("telegram", "7", "c0", "tea with lemon"))
    async with store.turn_lock(earlier.conversation_id, earlier.message.id):  # its reply releases the lease
        await store.finish_turn(earlier, "noted: lemon", 3, [call()])
    await put(store, msg("web", "7", "c1", "about tea", handle=earlier.handle))  # another surface's message
    counters = store.counters  # type: ignore[attr-defined]
    before = dict(counters)
    planned: list[ContextQuery] = []

    def plan(turn: Ingested) -> ContextQuery:
        planned.append(query(turn, search_text="tea", cross_limit=5))
        return planned[-1]

    turn = await store.ingest(msg("telegram", "7", "c2", "more tea please"), 3, context=plan)
    assert turn is not None
    read = store.ingested_context(turn.message.id)
    assert read is not None and read.query is planned[0] and read.seconds > 0
    assert read.rows == await store.load_context(planned[0])  # what the turn would have read itself
    assert [m.content for m in read.rows.conversation] == ["tea with lemon", "noted: lemon"]
    assert [m.content for m in read.rows.cross_surface] == ["about tea"]
    assert store.ingested_context(turn.message.id) is None, "handed over once"
    # SQLite: the write and the read are one transaction in one hop to the worker; Postgres: two round trips
    # (+ the load_context above)
    assert counters["transactions"] - before["transactions"] == (2 if backend.name == "sqlite" else 3)
    assert counters["round_trips"] - before["round_trips"] == (2 if backend.name == "sqlite" else 3)


async def test_ingest_reads_no_context_for_a_turn_that_must_wait(store: Store) -> None:
    first = await put(store, msg("telegram", "8", "w1", "first"))
    asked: list[int] = []

    def plan(turn: Ingested) -> ContextQuery:
        asked.append(turn.message.id)
        return query(turn)

    async with store.turn_lock(first.conversation_id, first.message.id):  # the first turn runs
        queued = await store.ingest(msg("telegram", "8", "w2", "second"), 1, context=plan)
        assert queued is not None and queued.conversation_id == first.conversation_id
        assert asked == [] and store.ingested_context(queued.message.id) is None
    await store.ingest(msg("telegram", "8", "w2", "second"), 1, context=plan)  # a redelivery takes no lease
    assert asked == [] and store.ingested_context(queued.message.id) is None


async def test_a_context_that_cannot_be_read_leaves_the_message_stored(store: Store) -> None:
    def plan(turn: Ingested) -> ContextQuery:
        raise StoreError("the read failed")

    turn = await store.ingest(msg("telegram", "9", "f1", "keep me"), 2, context=plan)
    assert turn is not None and store.ingested_context(turn.message.id) is None
    assert [m.content for m in await store.messages(turn.user_id, turn.conversation_id)] == ["keep me"]


async def test_a_context_read_with_its_message_goes_stale(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import memory.sql_store

    turn = await store.ingest(msg("telegram", "10", "s1", "hello"), 1, context=query)
    assert turn is not None
    monkeypatch.setattr(memory.sql_store, "INGESTED_CONTEXT_FRESH", -1.0)  # older than fresh, whatever the clock
    assert store.ingested_context(turn.message.id) is None


async def test_ingest_counts_its_limits_first_and_stores_nothing_over_them(store: Store, backend: Backend) -> None:
    limits = [("ip:z", 100, 60), ("visitor:z", 3, 60)]
    await put(store, msg("web", "z", "l0", "known already"))  # a first contact costs Postgres a round trip more
    counters = store.counters  # type: ignore[attr-defined]
    before = dict(counters)
    first = await store.ingest(msg("web", "z", "l1", "one"), 1, limits=limits)
    assert first is not None
    # SQLite: the hits and the message in one transaction, one hop; Postgres: a round trip each
    assert counters["round_trips"] - before["round_trips"] == (1 if backend.name == "sqlite" else 2)
    assert counters["transactions"] - before["transactions"] == (1 if backend.name == "sqlite" else 2)
    with pytest.raises(NotFound):  # refused for its conversation: its hits are counted all the same
        await store.ingest(msg("web", "z", "l2", "two", ref="999999"), 1, limits=limits)
    await store.ingest(msg("web", "z", "l1", "one"), 1, limits=limits)  # a redelivery counts them too
    with pytest.raises(RateLimited) as limited:
        await store.ingest(msg("web", "z", "l3", "three"), 1, limits=limits)
    assert limited.value.wait >= 1
    stored = backend.select("SELECT content FROM messages WHERE surface = 'web' ORDER BY id")
    assert [r[0] for r in stored if r[0] in ("one", "two", "three")] == ["one"]


async def test_deliveries_are_recorded_updated_and_forgotten(store: Any) -> None:
    from memory.store import Delivery

    turn = await store.ingest(InboundMessage(surface="whatsapp", sender="+34600", external_id="SMd1", text="hi"), 1)
    reply = await store.finish_turn(turn, "hello", 1, [])
    sent = await store.record_delivery(Delivery(turn.user_id, reply.id, "whatsapp", "+34600", "sent",
                                                part=1, parts=2, provider_ref="SMout1"))
    await store.record_delivery(Delivery(turn.user_id, reply.id, "whatsapp", "+34600", "failed", part=2, parts=2,
                                         error="63016", attempts=3))
    assert await store.update_delivery("whatsapp", "SMout1", "delivered") is True
    assert await store.update_delivery("whatsapp", "SMunknown", "delivered") is False
    assert await store.update_delivery("telegram", "SMout1", "read") is False  # refs are per surface
    rows = await store.deliveries(turn.user_id)
    assert [(r["id"], r["status"], r["part"], r["error"]) for r in rows] == [
        (sent, "delivered", 1, None), (rows[1]["id"], "failed", 2, "63016")]
    assert await store.identity_user("whatsapp", "+34600") == turn.user_id
    assert await store.identity_user("whatsapp", "+34999") is None
    other = await store.ingest(InboundMessage(surface="whatsapp", sender="+34999", external_id="SMd2", text="x"), 1)
    assert await store.deliveries(other.user_id) == []
    inspected = await store.inspect(turn.handle)
    assert len(inspected["deliveries"]) == 2
    assert await store.forget(turn.handle)
    assert await store.deliveries(turn.user_id) == []


async def test_opt_out_is_per_identity_and_survives_until_opt_in(store: Any) -> None:
    assert await store.is_opted_out("whatsapp", "+34611") is False
    uid = await store.set_opt_out("whatsapp", "+34611", True)  # first contact may be "STOP"
    assert await store.is_opted_out("whatsapp", "+34611") is True
    assert await store.is_opted_out("whatsapp", "+34612") is False
    turn = await store.ingest(InboundMessage(surface="whatsapp", sender="+34611", external_id="SMo1", text="x"), 1)
    assert turn.user_id == uid  # the same person
    assert await store.set_opt_out("whatsapp", "+34611", False) == uid
    assert await store.is_opted_out("whatsapp", "+34611") is False


async def test_a_named_place_on_a_singleton_surface_is_its_own_conversation(store: Any) -> None:
    def m(ext: str, ref: str | None) -> InboundMessage:
        return InboundMessage(surface="telegram", sender="77", external_id=ext, text="hi", conversation_ref=ref)

    private = await store.ingest(m("g1", None), 1)
    group = await store.ingest(m("g2", "group:-100"), 1)
    group_again = await store.ingest(m("g3", "group:-100"), 1)
    other_group = await store.ingest(m("g4", "group:-200"), 1)
    assert private.conversation_id != group.conversation_id == group_again.conversation_id
    assert other_group.conversation_id not in (private.conversation_id, group.conversation_id)
    assert private.user_id == group.user_id == other_group.user_id


async def test_a_redelivery_of_a_turn_that_never_ran_comes_back_to_be_answered(store: Store) -> None:
    first = await put(store, msg("telegram", "42", "r1", "hello", utcnow_()))
    again = await store.ingest(msg("telegram", "42", "r1", "hello", utcnow_()), 1)
    assert again is not None and again.resumed and again.message.id == first.message.id
    assert again.user_id == first.user_id and again.conversation_id == first.conversation_id
    await store.finish_turn(first, "hi!", 1, [call()])
    assert await store.ingest(msg("telegram", "42", "r1", "hello", utcnow_()), 1) is None
    failed = await put(store, msg("telegram", "42", "r2", "anyone?", utcnow_()))
    await store.finish_turn(failed, None, 0, [call("server_error")])  # every model failed: the turn ran
    assert await store.ingest(msg("telegram", "42", "r2", "anyone?", utcnow_()), 1) is None


def utcnow_() -> datetime:
    return datetime.now(UTC)


async def test_a_colliding_message_id_never_resumes_another_persons_turn(store: Store) -> None:
    await put(store, msg("web", "alice", "same-id", "my diagnosis is confidential", utcnow_()))
    assert await store.ingest(msg("web", "mallory", "same-id", "hi", utcnow_()), 1) is None
    assert await store.identity_user("web", "mallory") is None  # and nothing of mallory's was kept


async def test_a_delivery_status_never_moves_backwards(store: Store) -> None:
    from memory.store import Delivery

    turn = await put(store, msg("whatsapp", "+34", "SMx", "hi", utcnow_()))
    await store.record_delivery(Delivery(turn.user_id, turn.message.id, "whatsapp", "+34", "sent", provider_ref="SMo"))
    for status in ("delivered", "sent", "read", "delivered"):  # Twilio's callbacks, out of order
        assert await store.update_delivery("whatsapp", "SMo", status) is True
    assert [d["status"] for d in await store.deliveries(turn.user_id)] == ["read"]


# -- identity linking -----------------------------------------------------------------------------------

async def test_a_crowd_of_wrong_codes_never_refuses_a_valid_code(store: Store) -> None:
    from bot.linking import Linker, LinkPolicy
    from tests.test_linking import join

    linker = Linker(store, LinkPolicy(max_failures=4, global_max_failures=16, pressure_max_failures=2))
    code = await linker.request("telegram", "owner")
    for address in range(4):  # four addresses, a fresh visitor per guess, each until locked out
        assert [(await linker.redeem("web", f"v{address}-{i}", f"ZZZZ-{i:04d}", client_ip=f"192.0.2.{address}"))
                .status for i in range(4)] == ["invalid"] * 3 + ["locked"]
    # under pressure: a guessing key locks after 2 wrong codes, not 4
    assert [(await linker.redeem("whatsapp", "+9", f"ZZZZ-{i:04d}")).status for i in range(2)] == [
        "invalid", "locked"]
    assert (await linker.redeem("whatsapp", "+9", code)).status == "locked"
    # a person with no wrong code of their own links with the code they were given
    assert (await join(linker, "web", "honest", code, client_ip="198.51.100.1")).status == "linked"
    assert await store.identity_user("web", "honest") == await store.identity_user("telegram", "owner")


async def test_a_code_joins_only_on_a_confirm_from_the_identity_shown_the_prompt(store: Store) -> None:
    from bot.linking import LinkPolicy

    policy = LinkPolicy()
    owner = await store.issue_link_code("telegram", "42", "h1", LATER, owner_name="Ana (@ana)", language="es",
                                        conversation_ref=None)
    blind = await store.redeem_link_code("whatsapp", "+34", "h1", policy, confirm=True)
    assert blind.status == "prompt" and blind.owner is not None and blind.user_id is None
    assert (blind.owner.user_id, blind.owner.surface, blind.owner.external_user_id, blind.owner.name,
            blind.owner.language) == (owner, "telegram", "42", "Ana (@ana)", "es")
    assert await store.identity_user("whatsapp", "+34") is None
    assert (await store.redeem_link_code("web", "v", "h1", policy)).status == "prompt"
    assert (await store.redeem_link_code("whatsapp", "+34", "h1", policy, confirm=True)).status == "prompt"
    assert (await store.redeem_link_code("web", "v", "h1", policy, confirm=True)).status == "prompt"  # not v's now
    done = await store.redeem_link_code("web", "v", "h1", policy, confirm=True)
    assert done.status == "linked" and done.user_id == owner == await store.identity_user("web", "v")
    assert (await store.redeem_link_code("whatsapp", "+34", "h1", policy, confirm=True)).status == "invalid"
    audit = [a["action"] for a in (await store.inspect("telegram:42"))["identity_audit"]]  # type: ignore[index]
    assert audit == ["code_issued"] + ["link_prompted"] * 4 + ["linked"]


async def test_a_prompt_uses_one_of_the_codes_attempts(store: Store) -> None:
    from bot.linking import LinkPolicy

    policy = LinkPolicy(max_code_attempts=2)
    await store.issue_link_code("telegram", "42", "h2", LATER)
    assert [(await store.redeem_link_code("web", f"v{i}", "h2", policy)).status for i in range(2)] == ["prompt"] * 2
    assert (await store.redeem_link_code("web", "v1", "h2", policy, confirm=True)).status == "invalid"


async def test_a_notice_is_kept_in_the_persons_conversation_on_its_surface(store: Store) -> None:
    web = await put(store, msg("web", "visitor", "w1", "hello", handle="ana"))
    other = await put(store, msg("web", "visitor", "w2", "another chat", handle="ana"))
    tg = await put(store, msg("telegram", "42", "t1", "hi", handle="ana"))
    stranger = await put(store, msg("web", "visitor-b", "w3", "mine", handle="bob"))
    uid = web.user_id
    # the conversation named, when it is the person's
    n1 = await store.post_notice(uid, "web", str(web.conversation_id), "note one", 2)
    assert (n1.conversation_id, n1.role, n1.reply_to, n1.metadata) == (web.conversation_id, "assistant", None,
                                                                       {"notice": True})
    # someone else's conversation, or none: the person's latest (which the notice then keeps latest)
    n2 = await store.post_notice(uid, "web", str(stranger.conversation_id), "note two", 2)
    assert n2.conversation_id == web.conversation_id  # n1 made it the latest
    n3 = await store.post_notice(uid, "web", None, "note three", 2)
    assert n3.conversation_id == web.conversation_id != other.conversation_id
    assert (await store.conversations(uid))[0].id == web.conversation_id
    # singleton surfaces: the one conversation there; a person with none on the web gets a new one
    assert (await store.post_notice(uid, "telegram", None, "tg note", 2)).conversation_id == tg.conversation_id
    fresh = await store.user_id("carol", create=True)
    assert fresh is not None
    n4 = await store.post_notice(fresh, "web", "99999999999999999999999", "hello carol", 2)
    assert [m.content for m in await store.messages(fresh, n4.conversation_id)] == ["hello carol"]
    assert [m.content for m in await store.messages(uid, web.conversation_id)] == [
        "hello", "note one", "note two", "note three"]
    assert [m.content for m in await store.messages(stranger.user_id, stranger.conversation_id)] == ["mine"]


async def test_a_transcript_becomes_the_message_found_by_recall_and_its_media_rows_are_the_persons(
    store: Store,
) -> None:
    voice = {"kind": "voice", "ref": "file-1", "duration_s": 4}
    note = await put(store, msg("telegram", "1", "v1", "[voice note: 4 s]", handle="ana", voice=voice))
    other = await put(store, msg("telegram", "2", "b1", "[voice note: 2 s]", handle="bob"))
    current = await put(store, msg("cli", "ana", "c1", "anything", T0 + timedelta(hours=3), handle="ana"))
    probe = {"search_text": "plumber Ramiro", "current_message_id": current.message.id, "conversation_id": None,
             "cross_since": T0 + timedelta(hours=2)}  # the voice note is older than the cross-surface window
    assert (await store.load_context(query(current, **probe))).recalled == []
    row = {"surface": "telegram", "kind": "voice", "mime": "audio/ogg", "bytes": 5120, "duration_s": 4,
           "path": "/data/media/1/1-voice.ogg", "transcriber": "openai:whisper-1", "status": "transcribed"}
    text = "the plumber Ramiro comes on Thursday"
    media_id = await store.keep_transcript(note.user_id, note.message.id, text, 6, row)
    assert media_id is not None
    # another person's message is never rewritten through ids that are not theirs
    assert await store.keep_transcript(note.user_id, other.message.id, "hijacked", 1, row) is None
    recalled = (await store.load_context(query(current, **probe))).recalled
    assert [(m.external_id, m.content, m.token_count) for m in recalled][:1] == [("v1", text, 6)]
    assert recalled[0].metadata["voice"]["ref"] == "file-1"  # the media reference stays with the message
    failed = await store.keep_media(note.user_id, note.message.id, {**row, "status": "failed", "path": None})
    assert failed != media_id
    assert await store.media_paths(note.handle) == ["/data/media/1/1-voice.ogg"]
    assert await store.expired_media(LATER + timedelta(days=1), 10) == [(media_id, "/data/media/1/1-voice.ogg")]
    assert await store.expired_media(T0, 10) == []
    assert await store.drop_media_files([media_id]) == 1
    assert await store.media_paths(note.handle) == [] and await store.expired_media(LATER + timedelta(days=1), 10) == []
    exported = await store.export(note.handle)
    assert exported is not None and len(exported["tables"]["media"]) == 2
    assert await store.forget(note.handle) is True
    assert await store.export(note.handle) is None
    assert (await store.inspect(other.handle)) is not None


def test_a_message_row_is_read_in_the_order_its_columns_are_selected() -> None:
    """rows.to_message builds a StoredMessage from a MSG_COLS row by position: the two orders are one."""
    columns = [c.strip().removeprefix("m.") for c in MSG_COLS.split(",")]
    assert columns == [f.name for f in dataclasses.fields(StoredMessage)]
    row = (7, 3, 2, "web", "user", "hola", 1, "x-1", "2026-11-01T10:00:00.000000Z", '{"a": 1}', 5)
    m = to_message(row)
    assert (m.id, m.conversation_id, m.user_id, m.surface, m.role, m.content, m.token_count, m.external_id,
            m.created_at.isoformat(), m.metadata, m.reply_to) == (
        7, 3, 2, "web", "user", "hola", 1, "x-1", "2026-11-01T10:00:00+00:00", {"a": 1}, 5)
    # built through the slots' setters, it is the message StoredMessage's own constructor makes: equal,
    # still frozen
    made = StoredMessage(7, 3, 2, "web", "user", "hola", 1, "x-1", m.created_at, {"a": 1}, 5)
    assert m == made and repr(m) == repr(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.content = "changed"  # type: ignore[misc]
