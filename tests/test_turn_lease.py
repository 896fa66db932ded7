"""One turn per message across processes: a redelivery that lands on a second process while the first runs the
turn is a duplicate (one model call, one stored reply), on Postgres and on one SQLite file.

Two stores (two connection pools, or two SQLite connections, as two `hilo serve` processes would have) and two
pipelines share one database. The first pipeline's model call is held at a gate (an asyncio.Event) until the
second pipeline has stored the redelivery; nothing here sleeps to order events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from bot.models.chain import ChainResult
from bot.models.factory import build_chain
from bot.models.retry import RetryPolicy
from bot.pipeline import Pipeline
from bot.types import ChatMessage, InboundMessage
from memory.open import open_store
from memory.store import Ingested, Store
from tests.fakes.model_server import FakeModelServer
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)


async def no_sleep(_: float) -> None:
    return None


class HeldChain:
    """The real chain, but each call waits at a gate first: `arrived` is set when a call comes in, the call
    goes on (to the fake provider) once `release` is set."""

    def __init__(self, chain: Any) -> None:
        self.chain = chain
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(self, messages: Sequence[ChatMessage]) -> ChainResult:
        self.arrived.set()
        await self.release.wait()
        result: ChainResult = await self.chain.complete(messages)
        return result

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

    def _chain(self) -> Any:
        return build_chain(self.settings, policy=RetryPolicy(attempts=1, sleep=no_sleep), timeout=10)

    async def open(self) -> None:
        for store in self.stores:
            await store.open()

    async def close(self) -> None:
        await self.held.aclose()
        await self.free.aclose()
        for store in self.stores:
            await store.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def processes(request: Any, tmp_path: Path, model_server: FakeModelServer) -> AsyncIterator[Processes]:
    url = f"sqlite:///{tmp_path / 'hilo.db'}" if request.param == "sqlite" else SERVER.create_database()
    procs = Processes(url, model_server)
    await procs.open()
    yield procs
    await procs.close()


async def redelivered_while_running(procs: Processes) -> tuple[Any, Any]:
    """Process 1 runs the turn of "r1" (held at the model); "r1" is delivered again to process 2, which stores
    it (a resumed turn: no model call, no reply yet); then process 1's model answers. Both outcomes."""
    msg = InboundMessage(surface="telegram", sender="7", external_id="r1", text="what time is it")
    first = asyncio.create_task(procs.first.handle(msg))
    await procs.held.arrived.wait()
    ingested = asyncio.Event()

    async def on_ingested(_: Ingested) -> None:
        ingested.set()

    second = asyncio.create_task(procs.second.handle(msg, on_ingested=on_ingested))
    stored = asyncio.create_task(ingested.wait())
    await asyncio.wait({second, stored}, return_when=asyncio.FIRST_COMPLETED)  # stored, or dropped at ingest
    stored.cancel()
    procs.held.release.set()
    return await first, await second


async def test_a_redelivery_on_a_second_process_is_answered_once(
    processes: Processes, model_server: FakeModelServer,
) -> None:
    out1, out2 = await redelivered_while_running(processes)
    assert out1.status == "ok"
    assert len(model_server.requests_for("m1")) == 1, "the redelivery made a second model call"
    assert out2.status == "duplicate"
    store = processes.stores[0]
    assert out1.user_id is not None and out1.conversation_id is not None
    replies = [m for m in await store.messages(out1.user_id, out1.conversation_id) if m.role == "assistant"]
    assert [r.reply_to for r in replies] == [out1.message_id]
