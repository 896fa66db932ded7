"""The turn's writes as the store makes them on every backend: on Postgres one statement each for a known person
(memory/pg_turn.py), SQLite's transaction otherwise. What must hold whichever path wrote them: the message, its
conversation and episode as the transaction would write them; a redelivery stored once and answered once; the
turn lease taken with the message held by that turn alone; nothing written for a conversation forgotten while
its turn ran."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kernel.types import InboundMessage, ModelCallRecord, Outgoing
from memory import turn_lease
from memory.dialect_sqlite import SqliteStore
from memory.store import ImportRow, Store
from tests.backends import Backend, TestClock


def _msg(ext: str, text: str = "my parrot Kiwi sings at dawn", **kw: object) -> InboundMessage:
    fields: dict[str, object] = {"surface": "telegram", "sender": "ana", "handle": "ana"}
    fields.update(kw)
    return InboundMessage(external_id=ext, text=text, **fields)  # type: ignore[arg-type]


async def test_a_known_persons_turn_writes_what_the_transaction_wrote(store: Store, backend: Backend) -> None:
    first = await store.ingest(_msg("t1"), 6)
    assert first is not None and first.created_user
    async with store.turn_lock(first.conversation_id, first.message.id) as answered:
        assert not answered
        await store.finish_turn(first, "noted", 1, [])
    turn = await store.ingest(_msg("t2", "and Kiwi eats mango"), 5)  # a known person: Postgres's one statement
    assert turn is not None and not turn.created_user and not turn.resumed
    assert turn.conversation_id == first.conversation_id and turn.user_id == first.user_id
    async with store.turn_lock(turn.conversation_id, turn.message.id) as answered:
        assert not answered
        calls = [ModelCallRecord("m1", "openai", 40, 3, 12, "ok", cost_usd=0.5),
                 ModelCallRecord("m0", "anthropic", 0, 0, 5, "timeout", error="slow")]
        reply = await store.finish_turn(turn, "Kiwi likes mango", 4, calls,
                                        outgoing=Outgoing(surface="telegram", recipient="ana",
                                                          parts=("Kiwi likes", "mango"), reply_to="77"))
    assert reply is not None and reply.reply_to == turn.message.id
    rows = backend.select(f"SELECT role, content, token_count, reply_to, episode_id FROM messages "
                          f"WHERE conversation_id = {turn.conversation_id} ORDER BY id")
    assert [r[:4] for r in rows] == [("user", "my parrot Kiwi sings at dawn", 6, None),
                                     ("assistant", "noted", 1, first.message.id),
                                     ("user", "and Kiwi eats mango", 5, None),
                                     ("assistant", "Kiwi likes mango", 4, turn.message.id)]
    assert len({r[4] for r in rows}) == 1  # one run of messages, one episode
    episode = backend.select(f"SELECT message_count, token_count FROM episodes WHERE id = {rows[0][4]}")
    assert episode == [(4, 16)]
    calls_rows = backend.select(f"SELECT model, outcome, error, cost_usd, purpose FROM model_calls "
                                f"WHERE message_id = {turn.message.id} ORDER BY id")
    assert calls_rows == [("m1", "ok", None, 0.5, "turn"), ("m0", "timeout", "slow", 0.0, "turn")]
    parts = backend.select(f"SELECT part, parts, body, reply_to, status FROM deliveries WHERE message_id = {reply.id} "
                           "ORDER BY part")
    assert parts == [(1, 2, "Kiwi likes", "77", "pending"), (2, 2, "mango", None, "pending")]
    assert sorted(backend.fts_hits("mango")) == [turn.message.id, reply.id]


async def test_a_redelivery_is_stored_once_and_answered_once(store: Store, backend: Backend) -> None:
    first = await store.ingest(_msg("r1"), 6)
    assert first is not None
    async with store.turn_lock(first.conversation_id, first.message.id):
        await store.finish_turn(first, "ok", 1, [ModelCallRecord("m", "p", 1, 1, 1, "ok")])
    assert await store.ingest(_msg("r1"), 6) is None  # answered: dropped
    second = await store.ingest(_msg("r2", "Kiwi again"), 2)  # its process dies before the turn runs
    assert second is not None
    resumed = await store.ingest(_msg("r2", "Kiwi again"), 2)
    assert resumed is not None and resumed.resumed and resumed.message.id == second.message.id
    async with store.turn_lock(resumed.conversation_id, resumed.message.id) as answered:
        assert not answered
        await store.finish_turn(resumed, "ok again", 2, [ModelCallRecord("m", "p", 1, 1, 1, "ok")])
    assert await store.ingest(_msg("r2", "Kiwi again"), 2) is None
    assert backend.select("SELECT role, content FROM messages ORDER BY id") == [
        ("user", "my parrot Kiwi sings at dawn"), ("assistant", "ok"), ("user", "Kiwi again"),
        ("assistant", "ok again")]


async def test_the_lease_taken_with_the_message_holds_off_a_second_process(store: Store, backend: Backend) -> None:
    known = await store.ingest(_msg("l0"), 6)  # a first contact (Postgres: the transaction, no lease yet)
    assert known is not None
    async with store.turn_lock(known.conversation_id, known.message.id):
        await store.finish_turn(known, "ok", 1, [])
    turn = await store.ingest(_msg("l1"), 6)
    assert turn is not None
    taken_with_message = backend.select(f"SELECT turn_owner FROM conversations WHERE id = {turn.conversation_id}")
    # taken with the message: Postgres in the statement that stores it, SQLite in its transaction
    assert taken_with_message[0][0] is not None
    other = backend.make()  # another process on the same database
    await other.open()
    try:
        later = await other.ingest(_msg("l2", "Kiwi again"), 2)
        assert later is not None
        async with store.turn_lock(turn.conversation_id, turn.message.id) as answered:
            assert not answered
            owner = backend.select(f"SELECT turn_owner FROM conversations WHERE id = {turn.conversation_id}")[0][0]
            assert owner is not None
            await store.finish_turn(turn, "ok", 1, [])
        # released at the end of the first turn: the second takes it, the owner changes
        async with other.turn_lock(later.conversation_id, later.message.id) as answered:
            assert not answered
            now = backend.select(f"SELECT turn_owner FROM conversations WHERE id = {turn.conversation_id}")[0][0]
            assert now is not None and now != owner
            await other.finish_turn(later, "ok", 1, [])
    finally:
        await other.close()
    assert backend.select(f"SELECT turn_owner FROM conversations WHERE id = {turn.conversation_id}") == [(None,)]


async def test_a_web_redelivery_makes_no_empty_conversation(store: Store, backend: Backend) -> None:
    web = {"surface": "web", "sender": "v1", "handle": "ana"}
    turn = await store.ingest(_msg("w1", **web), 6)
    assert turn is not None
    async with store.turn_lock(turn.conversation_id, turn.message.id):
        await store.finish_turn(turn, "ok", 1, [ModelCallRecord("m", "p", 1, 1, 1, "ok")])
    assert await store.ingest(_msg("w1", **web), 6) is None
    assert backend.select("SELECT count(*) FROM conversations WHERE surface = 'web'") == [(1,)]


async def test_a_reply_to_a_forgotten_person_writes_nothing(store: Store, backend: Backend) -> None:
    turn = await store.ingest(_msg("f1"), 6)
    assert turn is not None
    async with store.turn_lock(turn.conversation_id, turn.message.id):
        assert await store.forget("ana")
        stored = await store.finish_turn(turn, "too late", 2, [ModelCallRecord("m", "p", 1, 1, 1, "ok")],
                                         outgoing=Outgoing(surface="telegram", recipient="ana", parts=("x",)))
        assert stored is None
    for table in ("messages", "model_calls", "deliveries", "episodes"):
        assert backend.count(table) == 0, table


async def test_a_lease_kept_for_a_turn_that_never_ran_is_released_at_close(backend: Backend) -> None:
    store = backend.make()
    await store.open()
    known = await store.ingest(_msg("c0"), 6)
    assert known is not None
    async with store.turn_lock(known.conversation_id, known.message.id):
        await store.finish_turn(known, "ok", 1, [])
    turn = await store.ingest(_msg("c1"), 6)  # the daemon stops before this turn runs
    assert turn is not None
    await store.close()
    assert backend.select(f"SELECT turn_owner FROM conversations WHERE id = {turn.conversation_id}") == [(None,)]
    other = backend.make()  # another process answers it at once, not a lease's ttl later
    await other.open()
    try:
        async with other.turn_lock(turn.conversation_id, turn.message.id) as answered:
            assert not answered
            assert await other.finish_turn(turn, "answered", 1, []) is not None
    finally:
        await other.close()


async def test_the_reply_releases_the_lease_in_its_own_transaction(store: Store, backend: Backend) -> None:
    known = await store.ingest(_msg("f0"), 6)  # a first contact; then a known person's turn
    assert known is not None
    async with store.turn_lock(known.conversation_id, known.message.id):
        await store.finish_turn(known, "ok", 1, [])
    turn = await store.ingest(_msg("f1", "Kiwi again"), 2)
    assert turn is not None
    counters = store.counters  # type: ignore[attr-defined]
    async with store.turn_lock(turn.conversation_id, turn.message.id) as answered:
        assert not answered
        before = counters["transactions"]
        await store.finish_turn(turn, "ok again", 2, [])
        # the lease is free as soon as the reply is stored: the next turn of the conversation need not wait
        assert backend.select(f"SELECT turn_owner, turn_expires_at FROM conversations "
                              f"WHERE id = {turn.conversation_id}") == [(None, None)]
    assert counters["transactions"] - before == 1, "no transaction of its own to release the lease"
    # the next message's turn takes it at once (its ingest, with the message)
    later = await store.ingest(_msg("f2", "and mango"), 2)
    assert later is not None
    assert backend.select(f"SELECT turn_owner FROM conversations WHERE id = {later.conversation_id}")[0][0] is not None


async def test_an_earlier_unanswered_message_holds_the_next_turn_whatever_the_history(
        backend: Backend, clock: TestClock) -> None:
    """The lease's check for an earlier message still waiting (turn_lease.free_sql) looks at the person's recent
    messages; a long conversation's history older than that changes nothing."""
    store = backend.make()
    await store.open()
    old = clock() - timedelta(days=30)
    await store.import_rows([ImportRow("ana", "telegram", "user" if i % 2 == 0 else "assistant", f"old line {i}",
                                       old + timedelta(minutes=i), 3, f"old-{i}") for i in range(400)])
    waiting = await store.ingest(_msg("h1"), 6)  # the daemon stops before this turn runs
    assert waiting is not None
    await store.close()
    other = backend.make()
    await other.open()
    try:
        later = await other.ingest(_msg("h2", "Kiwi again"), 2)
        assert later is not None and later.conversation_id == waiting.conversation_id
        assert backend.count("messages") == 402
        # h1 is earlier, recent and unanswered: h2's ingest takes no lease, h2 waits for h1's turn
        assert backend.select(f"SELECT turn_owner FROM conversations WHERE id = {later.conversation_id}") == [(None,)]
        async with other.turn_lock(waiting.conversation_id, waiting.message.id) as answered:
            assert not answered
            await other.finish_turn(waiting, "answered", 1, [])
        async with other.turn_lock(later.conversation_id, later.message.id) as answered:  # h1 answered: free
            assert not answered
            assert backend.select(f"SELECT turn_owner FROM conversations "
                                  f"WHERE id = {later.conversation_id}")[0][0] is not None
    finally:
        await other.close()


async def _lease_steps(path: Path, history: int) -> int:
    """SQLite's virtual machine steps (in tens) to take the lease of a conversation with `history` older messages."""
    store = SqliteStore(str(path))
    await store.open()
    try:
        old = datetime.now(UTC) - timedelta(days=30)
        await store.import_rows([ImportRow("ana", "telegram", "user" if i % 2 == 0 else "assistant", f"old line {i}",
                                           old + timedelta(minutes=i), 3, f"old-{i}") for i in range(history)])
        turn = await store.ingest(_msg("s1"), 6)
        assert turn is not None
        async with store.turn_lock(turn.conversation_id, turn.message.id):
            await store.finish_turn(turn, "ok", 1, [])
        count = [0]

        def counted() -> int:
            count[0] += 1
            return 0

        conn = store._conn
        assert conn is not None
        await store._call(lambda: conn.set_progress_handler(counted, 10))
        taken = await store._tx("lease", turn_lease.take, turn.conversation_id, turn.message.id, "o", 60.0)
        await store._call(lambda: conn.set_progress_handler(None, 0))
        assert taken == (True, True)  # free, and the message was answered
        return count[0]
    finally:
        await store.close()


async def test_the_lease_check_reads_as_much_for_a_long_conversation_as_for_a_short_one(tmp_path: Path) -> None:
    """SQLite's work to take a turn's lease with 20 and with 2,000 messages of older history in the conversation:
    the check reads the person's messages of the last ORDER_WAIT ttls, not the conversation's rows one by one
    (it did: 21 and 1,209 tens of steps; 0.18 ms at 700 messages, 0.4 ms a turn in context_bench's turns)."""
    short, long = await _lease_steps(tmp_path / "short.db", 20), await _lease_steps(tmp_path / "long.db", 2000)
    assert long <= 2 * short + 5, (short, long)


async def test_a_message_stored_with_its_lease_is_not_checked_for_an_answer(store: Store, backend: Backend) -> None:
    # the lease is taken in the transaction that stores the message: nothing can have answered a message that did
    # not exist (a reply or a model call names its id; ids are never used twice), so no statement asks
    first = await store.ingest(_msg("n1"), 6)
    assert first is not None
    async with store.turn_lock(first.conversation_id, first.message.id):
        await store.finish_turn(first, "noted", 1, [])
    counters = store.counters  # type: ignore[attr-defined]
    before = counters["statements"]
    turn = await store.ingest(_msg("n2", "and Kiwi eats mango"), 5)
    assert turn is not None
    # SQLite: the person, the conversation, the episode, the message, the lease; Postgres: one statement
    assert counters["statements"] - before == (5 if backend.name == "sqlite" else 1)
    async with store.turn_lock(turn.conversation_id, turn.message.id) as answered:
        assert not answered  # and its turn runs


async def test_a_turn_shorter_than_a_third_of_its_lease_starts_no_task_to_renew_it(store: Store) -> None:
    turn = await store.ingest(_msg("r1"), 6)
    assert turn is not None
    before = asyncio.all_tasks()
    async with store.turn_lock(turn.conversation_id, turn.message.id) as answered:
        assert not answered
        assert asyncio.all_tasks() == before, "a timer until a third of the ttl went by, not a task"
        await store.finish_turn(turn, "noted", 1, [])
    assert asyncio.all_tasks() == before
