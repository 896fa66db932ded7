"""Inbound-delivery records (memory/sql_inbound.py) on every backend: the first delivery of a (surface,
external_id) is recorded, a redelivery is not (also from a second store: another process, or after a
restart), and the cleanup job's purge deletes only records older than the retention."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from memory.store import Store
from tests.backends import Backend, TestClock


async def test_a_delivery_is_recorded_once_also_by_another_store(store: Store, backend: Backend) -> None:
    assert await store.record_inbound("telegram", "7:1", "command") is True
    assert await store.record_inbound("telegram", "7:1", "command") is False
    assert await store.record_inbound("whatsapp", "7:1", "refused") is True, "the surface is part of the key"
    other = backend.make()  # a restarted daemon, or a second process on the same database
    await other.open()
    try:
        assert await other.record_inbound("telegram", "7:1", "command") is False
        assert await other.record_inbound("telegram", "7:2", "opt") is True
    finally:
        await other.close()


async def test_concurrent_redeliveries_record_one(store: Store) -> None:
    firsts = await asyncio.gather(*(store.record_inbound("whatsapp", "SM1", "opt") for _ in range(8)))
    assert sorted(firsts) == [False] * 7 + [True]


async def test_purge_deletes_only_records_older_than_the_retention(store: Store, clock: TestClock) -> None:
    await store.record_inbound("telegram", "old", "command")
    clock.advance(3 * 86400)
    await store.record_inbound("telegram", "new", "command")
    assert await store.purge_inbound(timedelta(days=2)) == 1
    assert await store.record_inbound("telegram", "old", "command") is True, "purged: a late copy is new again"
    assert await store.record_inbound("telegram", "new", "command") is False
