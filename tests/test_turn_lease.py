"""One turn per message and one turn per conversation at a time, across processes: on one SQLite file, on Postgres,
and on Postgres behind a real pgbouncer in transaction mode (prepared statements off).

Two stores (two connection pools, or two SQLite connections, as two `hilo serve` processes would have) and two
pipelines share one database. The first pipeline's model call is held at a gate (an asyncio.Event) until the
second pipeline has stored the redelivery; nothing here sleeps to order events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bot.config import Settings
from bot.models.base import ChainResult, Reset, ToolOffer
from bot.models.factory import build_chain
from bot.pipeline import Pipeline
from bot.retry import RetryPolicy
from kernel.types import ChatMessage, InboundMessage
from memory import turn_lease
from memory.open import open_store
from memory.store import Ingested, Store
from tests.fakes.model_server import FakeModelServer
from tests.fakes.pgbouncer import BOUNCER, database_url, pgbouncer_session  # noqa: F401  (autouse fixture)
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.waiting import no_sleep, wait_until

T = TypeVar("T")


class HeldChain:
    """The real chain, but each call waits at a gate first: `arrived` is set when a call comes in, the call
    goes on (to the fake provider) once `release` is set."""

    def __init__(self, chain: Any) -> None:
        self.chain = chain
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(self, messages: Sequence[ChatMessage], *, tools: ToolOffer | None = None) -> ChainResult:
        self.arrived.set()
        await self.release.wait()
        result: ChainResult = await self.chain.complete(messages, tools=tools)
        return result

    async def stream(self, messages: Sequence[ChatMessage], *,
                     tools: ToolOffer | None = None) -> AsyncIterator[str | Reset | ChainResult]:
        self.arrived.set()
        await self.release.wait()
        async for event in self.chain.stream(messages, tools=tools):
            yield event

    async def aclose(self) -> None:
        await self.chain.aclose()


class Processes:
    """Two pipelines on one database, each with its own store; the first one's model is held."""

    def __init__(self, url: str, model_server: FakeModelServer) -> None:
        self.settings = Settings.from_mapping({
            "HILO_MODEL": "openai:m1", "OPENAI_BASE_URL": model_server.base_url + "/v1", "HILO_DATABASE_URL": url})
        self.stores: list[Store] = [open_store(url), open_store(url)]
        self.held = HeldChain(self._chain())
        self.free = self._chain()
        self.first = Pipeline(self.settings, self.stores[0], self.held)
        self.second = Pipeline(self.settings, self.stores[1], self.free)
        self.tasks: list[asyncio.Future[Any]] = []

    def start(self, turn: Awaitable[T]) -> asyncio.Task[T]:
        """A turn running as a task of its own, drained at the end of the test even when an assertion failed."""
        task = asyncio.ensure_future(turn)
        self.tasks.append(task)
        return task

    def _chain(self) -> Any:
        return build_chain(self.settings, policy=RetryPolicy(attempts=1, sleep=no_sleep), timeout=10)

    async def open(self) -> None:
        for store in self.stores:
            await store.open()

    async def close(self) -> None:
        self.held.release.set()
        if self.tasks:
            _, pending = await asyncio.wait(self.tasks, timeout=30)
            for task in pending:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.held.aclose()
        await self.free.aclose()
        for store in self.stores:
            await store.close()


def lease_waits(store: Store) -> int:
    return int(getattr(store, "counters", {}).get("turn_lease_waits", 0))


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
async def processes(request: Any, tmp_path: Path, model_server: FakeModelServer) -> AsyncIterator[Processes]:
    procs = Processes(database_url(request.param, tmp_path), model_server)
    await procs.open()
    yield procs
    await procs.close()


async def redelivered_while_running(procs: Processes) -> tuple[Any, Any]:
    """Process 1 runs the turn of "r1" (held at the model); "r1" is delivered again to process 2, which stores
    it (a resumed turn: no model call, no reply yet); then process 1's model answers. Both outcomes."""
    msg = InboundMessage(surface="telegram", sender="7", external_id="r1", text="what time is it")
    first = procs.start(procs.first.handle(msg))
    await procs.held.arrived.wait()
    ingested = asyncio.Event()

    async def on_ingested(_: Ingested) -> None:
        ingested.set()

    second = procs.start(procs.second.handle(msg, on_ingested=on_ingested))
    stored = asyncio.create_task(ingested.wait())
    await asyncio.wait({second, stored}, return_when=asyncio.FIRST_COMPLETED)  # stored, or dropped at ingest
    stored.cancel()
    procs.held.release.set()
    return await first, await second


async def test_a_redelivery_on_a_second_process_is_answered_once(
    processes: Processes, model_server: FakeModelServer,
) -> None:
    """One model call, one stored reply; the redelivery's turn, which waited for the lease while process 1
    answered, hands back the reply stored there (the web answers a request with it: a person whose request
    waited while recovery or another process answered gets the answer, not an empty "duplicate"), marked
    queued so that a messaging surface sends nothing (the outbox has it)."""
    out1, out2 = await redelivered_while_running(processes)
    assert out1.status == "ok"
    assert len(model_server.requests_for("m1")) == 1, "the redelivery made a second model call"
    assert (out2.status, out2.text, out2.reply_id, out2.metadata.get("queued")) == (
        "ok", out1.text, out1.reply_id, True)
    store = processes.stores[0]
    assert out1.user_id is not None and out1.conversation_id is not None
    replies = [m for m in await store.messages(out1.user_id, out1.conversation_id) if m.role == "assistant"]
    assert [r.reply_to for r in replies] == [out1.message_id]


async def test_turns_of_one_conversation_wait_for_each_other_across_processes(
    processes: Processes, model_server: FakeModelServer,
) -> None:
    """Process 1 holds the conversation (its model is held); process 2's turn of ANOTHER message waits for the
    lease, without calling the model, then sees process 1's reply in its context."""
    first = processes.start(processes.first.handle(
        InboundMessage(surface="telegram", sender="7", external_id="s1", text="first question")))
    await processes.held.arrived.wait()
    second = processes.start(processes.second.handle(
        InboundMessage(surface="telegram", sender="7", external_id="s2", text="second question")))
    waits = lease_waits(processes.stores[1])
    await wait_until(lambda: bool(model_server.requests) or lease_waits(processes.stores[1]) >= waits + 2,
                     "process 2 waits for the lease, or calls the model")
    assert model_server.requests == [], "process 2 called the model while process 1 held the conversation"
    processes.held.release.set()
    out1, out2 = await first, await second
    assert out1.status == out2.status == "ok"
    contents = [m["content"] for m in model_server.requests_for("m1")[-1].body["messages"]]
    assert contents[-1] == "second question" and out1.text in contents


async def test_a_lease_left_by_a_dead_process_is_taken_over_once_expired(
    processes: Processes, model_server: FakeModelServer,
) -> None:
    out = await processes.second.handle(InboundMessage(surface="telegram", sender="7", external_id="d0", text="hi"))
    assert out.conversation_id is not None and out.message_id is not None
    dead = processes.stores[0]
    taken, _ = await dead._tx(  # type: ignore[attr-defined]
        "lease", turn_lease.take, out.conversation_id, out.message_id, "a-dead-process", 0.0)
    assert taken  # and never renewed nor released: that process died
    processes.held.release.set()
    again = await processes.second.handle(
        InboundMessage(surface="telegram", sender="7", external_id="d1", text="still there?"))
    assert again.status == "ok"
    assert len(model_server.requests_for("m1")) == 2


async def test_a_later_message_answers_the_earlier_one_a_dead_process_left_first(
    processes: Processes, model_server: FakeModelServer,
) -> None:
    """A process died after storing a person's message (older than the recovery grace, its turn's lease lapsed);
    the person's next message reaches another process. Its turn answers the orphaned message first, then its
    own: both answered, in their order, at once (it waited for the order cap, then answered out of order, and
    left the first to the next recovery run)."""
    dead = processes.stores[0]
    dead.turn_lease_ttl = 0.0  # type: ignore[attr-defined]  # a lease its ingest takes lapses at once
    earlier = await dead.ingest(InboundMessage(
        surface="telegram", sender="7", external_id="o1", text="the first question",
        received_at=dead.clock() - timedelta(seconds=40)), 3)  # type: ignore[attr-defined]
    assert earlier is not None
    taken, _ = await dead._tx(  # type: ignore[attr-defined]
        "lease", turn_lease.take, earlier.conversation_id, earlier.message.id, "a-dead-process", 0.0)
    assert taken  # and never renewed nor released: that process died mid-turn
    later = await asyncio.wait_for(processes.second.handle(
        InboundMessage(surface="telegram", sender="7", external_id="o2", text="the second question")), 20)
    assert later.status == "ok"
    replies = [m for m in await dead.messages(earlier.user_id, earlier.conversation_id) if m.role == "assistant"]
    assert [r.reply_to for r in replies] == [earlier.message.id, later.message_id], "both answered, in order"
    asked = [r.body["messages"][-1]["content"] for r in model_server.requests_for("m1")]
    assert asked == ["the first question", "the second question"]


async def test_a_running_turn_renews_its_lease(processes: Processes, model_server: FakeModelServer) -> None:
    """A turn that outlasts the lease's ttl keeps it: process 2 still waits after the first lease would have
    expired (three renewals, every ttl/3, mean a whole ttl went by)."""
    owner_store = processes.stores[0]
    owner_store.turn_lease_ttl = 1.5  # type: ignore[attr-defined]
    first = processes.start(processes.first.handle(
        InboundMessage(surface="telegram", sender="7", external_id="n1", text="a long one")))
    await processes.held.arrived.wait()
    renewed = lambda: int(owner_store.counters.get("turn_lease_renewals", 0))  # type: ignore[attr-defined]  # noqa: E731
    start = renewed()
    second = processes.start(processes.second.handle(
        InboundMessage(surface="telegram", sender="7", external_id="n2", text="and another")))
    await wait_until(lambda: renewed() >= start + 3, "process 1 renewed its lease three times")
    waits = lease_waits(processes.stores[1])
    await wait_until(lambda: bool(model_server.requests) or lease_waits(processes.stores[1]) >= waits + 2,
                     "process 2 tries the lease twice more, or calls the model")
    assert model_server.requests == [], "process 2 took over a lease that was being renewed"
    processes.held.release.set()
    assert (await first).status == (await second).status == "ok"


async def test_session_advisory_locks_do_not_hold_behind_a_transaction_pooler() -> None:
    """Why the lease: the advisory lock that serialized turns before (pg_try_advisory_lock on a connection of its
    own) is taken by two processes at once behind pgbouncer, since both land on one server session."""
    import asyncpg

    url = BOUNCER.url(SERVER.create_database()).split("?", 1)[0]
    one = await asyncpg.connect(url, statement_cache_size=0)
    two = await asyncpg.connect(url, statement_cache_size=0)
    try:
        assert await one.fetchval("SELECT pg_try_advisory_lock(1, 2)")
        assert await two.fetchval("SELECT pg_try_advisory_lock(1, 2)"), "the second process was refused the lock"
    finally:
        await one.close()
        await two.close()
