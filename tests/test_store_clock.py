"""The store's clock (`clock=`, kept as `store.clock`): every "now" the store reads comes from it, on both dialects.

A test moves the clock instead of editing rows by hand: stamps, turn leases and link-code expiry all follow it."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kernel.types import InboundMessage
from memory import turn_lease
from memory.open import open_store
from memory.store import LinkPolicy, Store
from tests.fakes.pgbouncer import database_url, pgbouncer_session  # noqa: F401  (autouse fixture)
from tests.fakes.postgres import postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Store, Clock]]:
    clock = Clock()
    s = open_store(database_url(request.param, tmp_path), clock=clock)
    await s.open()
    try:
        yield s, clock
    finally:
        await s.close()


async def test_stamps_come_from_the_clock(store: tuple[Store, Clock]) -> None:
    s, clock = store
    user_id = await s.user_id("ana", create=True)
    assert user_id is not None
    fact = await s.remember(user_id, "likes tea", 2)
    assert fact.created_at == START
    turn = await s.ingest(InboundMessage(surface="cli", sender="ana", external_id="m1", text="hi",
                                         received_at=START - timedelta(minutes=1), handle="ana"), 1)
    assert turn is not None
    clock.now = START + timedelta(minutes=5)
    reply = await s.finish_turn(turn, "hello", 1, [])
    assert reply is not None and reply.created_at == clock.now
    assert (await s.conversations(user_id))[0].updated_at == clock.now


async def test_a_turn_lease_expires_when_the_clock_passes_its_ttl(store: tuple[Store, Clock]) -> None:
    s, clock = store
    turn = await s.ingest(InboundMessage(surface="cli", sender="ana", external_id="m1", text="hi",
                                         received_at=START, handle="ana"), 1)
    assert turn is not None
    async with s.turn_lock(turn.conversation_id, turn.message.id):
        pass  # the turn's lease (SQLite took it with the message) is released as the turn ends
    take = functools.partial(s._tx, "lease", turn_lease.take)  # type: ignore[attr-defined]
    assert (await take(turn.conversation_id, turn.message.id, "first", 30.0))[0]
    clock.now = START + timedelta(seconds=29)
    assert not (await take(turn.conversation_id, turn.message.id, "second", 30.0))[0], "taken before expiry"
    clock.now = START + timedelta(seconds=31)
    assert (await take(turn.conversation_id, turn.message.id, "second", 30.0))[0], "not taken once expired"


async def test_a_link_code_expires_by_the_clock(store: tuple[Store, Clock]) -> None:
    s, clock = store
    await s.issue_link_code("web", "site:a", "hash-1", START + timedelta(minutes=10))
    policy = LinkPolicy()
    clock.now = START + timedelta(minutes=9)
    assert (await s.redeem_link_code("telegram", "7", "hash-1", policy)).status == "prompt"
    clock.now = START + timedelta(minutes=11)
    assert (await s.redeem_link_code("telegram", "7", "hash-1", policy)).status == "invalid"
