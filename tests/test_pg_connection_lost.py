"""A Postgres connection the server ends under hilo (a restart, a failover, pg_terminate_backend): the store says
StoreUnavailable, the one error its callers retry on, and the pool never hands the dead connection out again.

asyncpg does not always say "connection lost": a server's goodbye that lands while asyncpg thinks the connection
idle leaves its protocol in a state where the next statement raises InternalClientError ("cannot switch to state
15; another operation (2) is in progress"), and a transaction whose connection closed raises InterfaceError on
exit. Neither is a StoreError: on a CI run an InternalClientError ended the outbox's sender, and no reply of the
outage test was ever sent (tests/test_inbound_faults.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from memory.open import open_store
from memory.store import StoreUnavailable
from tests.fakes.postgres import StoppablePostgres, fresh_store
from tests.waiting import wait_until

MODES = ("write", "read", "lease", "reads")  # every kind of checkout of PostgresStore._tx


@pytest.fixture
async def store() -> AsyncIterator[Any]:
    async with fresh_store() as s:
        yield s


async def _ended(other: asyncpg.Connection, pid: int) -> bool:
    return not await other.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)


@pytest.mark.parametrize("wait_for_the_close", [False, True], ids=["at-once", "after-the-close"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_connection_ended_mid_transaction_is_store_unavailable_and_not_reused(
    store: Any, mode: str, wait_for_the_close: bool,
) -> None:
    other = await asyncpg.connect(store.dsn)
    pids: list[int] = []

    async def ended_then_used(db: Any) -> int:
        pid = await db.conn.fetchval("SELECT pg_backend_pid()")
        pids.append(pid)
        assert await other.fetchval("SELECT pg_terminate_backend($1)", pid)
        if wait_for_the_close:
            await wait_until(lambda: _ended(other, pid), "the server ended the connection")
        return int(await db.conn.fetchval("SELECT 1"))

    async def backend_pid(db: Any) -> int:
        return int(await db.conn.fetchval("SELECT pg_backend_pid()"))

    try:
        with pytest.raises(StoreUnavailable):
            await store._tx(mode, ended_then_used)
        # the next checkout gets a live connection of its own
        assert await store._tx(mode, backend_pid) not in pids
    finally:
        await other.close()


async def test_while_postgres_stops_and_starts_every_failure_is_store_unavailable_and_every_caller_recovers(
) -> None:
    """Callers of the outbox's statements (the sender's claim, what is due next) and a context-free write, side
    by side, while the database shuts down under them and comes back."""
    pg = StoppablePostgres()
    uri = await asyncio.to_thread(pg.start)
    store = open_store(uri)
    await store.open()
    failures: Counter[str] = Counter()
    before: Counter[int] = Counter()
    after: Counter[int] = Counter()
    restarted = asyncio.Event()
    done = asyncio.Event()

    async def caller(n: int) -> None:
        calls = (lambda: store.claim_outbox("telegram", f"owner{n}", 60), lambda: store.outbox_next_due("telegram"),
                 lambda: store.register_job(f"job{n}", False))
        i = 0
        while not done.is_set():
            try:
                await calls[i % len(calls)]()
                (after if restarted.is_set() else before)[n] += 1
            except StoreUnavailable:
                failures["StoreUnavailable"] += 1
                await asyncio.sleep(0.01)  # a caller's retry pace (the outbox waits 2 s)
            except Exception as exc:  # what the store must never raise
                failures[f"{type(exc).__module__}.{type(exc).__name__}"] += 1
                await asyncio.sleep(0.01)
            i += 1

    callers = [asyncio.create_task(caller(n)) for n in range(8)]
    try:
        await wait_until(lambda: all(before[n] >= 3 for n in range(8)), "every caller served")
        await asyncio.to_thread(pg.stop)
        await wait_until(lambda: failures["StoreUnavailable"] >= 8, "the outage seen")
        await asyncio.to_thread(pg.start)
        restarted.set()
        await wait_until(lambda: all(after[n] >= 3 for n in range(8)), "every caller served again", seconds=60)
    finally:
        done.set()
        await asyncio.gather(*callers)
        await store.close()
        await asyncio.to_thread(pg.remove)
    assert set(failures) == {"StoreUnavailable"}, failures
