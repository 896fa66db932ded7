"""Rate limits and link lockouts hold across processes (issue 12 item 7's part): both are kept in the database,
so two `hilo serve` processes on one database (one SQLite file, or one Postgres) count the same hits and the same
wrong codes. Before migration 0026 the web's limits were token buckets in each process's memory: a visitor
alternating between two processes got twice the limit. Link lockouts were in the database already
(link_failures, memory/sql_linking.py): the test proves it across processes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from kernel import catalog
from memory import sql_limits
from memory.store import Store
from tests.backends import Backend, TestClock
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.fakes.serve_process import ServeProcess, serving

LIMIT = 3


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'hilo.db'}" if request.param == "sqlite" else SERVER.create_database()


@pytest.fixture
def limit() -> int:
    """HILO_RATE_LIMIT_VISITOR of the daemons (a test parametrizes it to override)."""
    return LIMIT


@pytest.fixture
def two_daemons(tmp_path: Path, database_url: str, limit: int) -> Iterator[tuple[ServeProcess, ServeProcess]]:
    env = {"HILO_DATABASE_URL": database_url, "HILO_SECRET_KEY": "k" * 43, "HILO_RATE_LIMIT_VISITOR": str(limit)}
    with ExitStack() as stack:
        first = stack.enter_context(serving(tmp_path, env))  # migrates first: the second finds it done
        second = stack.enter_context(serving(tmp_path, env))
        yield first, second


async def alternate(daemons: tuple[ServeProcess, ServeProcess], texts: list[str]) -> list[httpx.Response]:
    """One visitor's messages, each to the other process in turn (the first to the first)."""
    async with httpx.AsyncClient(timeout=30) as client:
        token = (await client.post(daemons[0].url + "/api/session")).json()["session"]
        auth = {"Authorization": f"Bearer {token}"}
        return [await client.post(daemons[i % 2].url + "/api/messages", json={"text": text}, headers=auth)
                for i, text in enumerate(texts)]


async def test_a_visitor_alternating_between_two_processes_gets_the_limit_once(
    two_daemons: tuple[ServeProcess, ServeProcess],
) -> None:
    one, two = two_daemons
    answers = await alternate(two_daemons, [f"hi {i}" for i in range(2 * LIMIT)])
    statuses = [r.status_code for r in answers]
    for r in answers[LIMIT:]:
        assert r.headers["retry-after"].isdigit() and r.json()["error"] == "rate_limited", r.text
    async with httpx.AsyncClient(timeout=30) as client:  # another visitor is not held back, on either process
        other = (await client.post(two.url + "/api/session")).json()["session"]
        fresh = await client.post(one.url + "/api/messages", json={"text": "hello"},
                                  headers={"Authorization": f"Bearer {other}"})
    assert statuses == [200] * LIMIT + [429] * LIMIT, statuses
    assert fresh.status_code == 200


@pytest.mark.parametrize("limit", [100])
async def test_wrong_link_codes_sent_to_two_processes_lock_the_sender_out_on_both(
    two_daemons: tuple[ServeProcess, ServeProcess],
) -> None:
    # the policy locks at the 10th wrong code within 15 minutes (memory/link_policy.py)
    answers = await alternate(two_daemons, [f"/link ZZZZ-{i:04d}" for i in range(12)])
    assert [r.status_code for r in answers] == [200] * 12
    replies = [r.json()["reply"] for r in answers]
    invalid, locked = catalog.t("link_invalid", "en"), catalog.t("link_locked", "en").split("{")[0]
    assert replies[:9] == [invalid] * 9, replies
    assert all(reply.startswith(locked) for reply in replies[9:]), replies[9:]


async def test_two_stores_on_one_database_count_the_same_hits(backend: Backend, clock: TestClock) -> None:
    first, second = backend.make(), backend.make()
    await first.open()
    await second.open()
    try:
        waits = [await (first, second)[i % 2].hit_rate("visitor:a", LIMIT, 60) for i in range(LIMIT + 2)]
        assert waits[:LIMIT] == [0.0] * LIMIT and all(w >= 1.0 for w in waits[LIMIT:]), waits
        assert await second.hit_rate("visitor:b", LIMIT, 60) == 0.0  # another key
        clock.advance(120)  # two windows later nothing of them counts
        assert await first.hit_rate("visitor:a", LIMIT, 60) == 0.0
        clock.advance(7200)
        assert await second.purge_counters(3600) == 2 and await first.hit_rate("visitor:a", LIMIT, 60) == 0.0
    finally:
        await first.close()
        await second.close()


async def test_several_limits_in_one_transaction_stop_at_the_first_that_must_wait(store: Store) -> None:
    for _ in range(LIMIT):
        assert await store.hit_rates([("ip:x", LIMIT, 60), ("visitor:v", 2 * LIMIT, 60)]) == 0.0
    assert await store.hit_rates([("ip:x", LIMIT, 60), ("visitor:v", 2 * LIMIT, 60)]) >= 1.0  # the IP waits
    # the refused hit stopped at the IP: the visitor counted LIMIT hits, so LIMIT more are allowed
    waits = [await store.hit_rate("visitor:v", 2 * LIMIT, 60) for _ in range(LIMIT + 1)]
    assert waits[:LIMIT] == [0.0] * LIMIT and waits[LIMIT] >= 1.0, waits


async def test_a_limit_that_must_wait_leaves_the_later_ones_uncounted_and_the_earlier_ones_counted(store: Store,
                                                                                                   ) -> None:
    # a message's hits are counted in one statement, and those after the first that must wait taken back
    # (sql_limits.hit_all): the counts end as if counting had stopped there
    hits = [("ip:y", 10 * LIMIT, 60), ("visitor:w", LIMIT, 60), ("ip-messages:y", 10 * LIMIT, 60)]
    waits = [await store.hit_rates(hits) for _ in range(LIMIT + 2)]
    assert waits[:LIMIT] == [0.0] * LIMIT and all(w >= 1.0 for w in waits[LIMIT:]), waits  # the visitor waits
    # the IP's requests counted every hit; its messages only those the visitor's limit let through
    assert [await store.hit_rate("ip:y", 10 * LIMIT, 60) for _ in range(10 * LIMIT - LIMIT - 2)] == [0.0] * (
        10 * LIMIT - LIMIT - 2)
    assert await store.hit_rate("ip:y", 10 * LIMIT, 60) >= 1.0
    allowed = [await store.hit_rate("ip-messages:y", 10 * LIMIT, 60) for _ in range(10 * LIMIT - LIMIT + 1)]
    assert allowed[:-1] == [0.0] * (10 * LIMIT - LIMIT) and allowed[-1] >= 1.0, allowed
    # a key given twice is counted twice (one statement cannot upsert a row twice: hit_each does it)
    assert await store.hit_rates([("visitor:twice", 2, 60), ("visitor:twice", 2, 60)]) == 0.0
    assert await store.hit_rate("visitor:twice", 2, 60) >= 1.0


def test_the_sliding_window_weighs_the_previous_window_by_what_it_still_covers() -> None:
    wait = sql_limits.wait_for
    assert wait(3, 0, 10.0, 3, 60) == 0.0  # within the limit
    assert wait(4, 0, 10.0, 3, 60) == pytest.approx(51.0)  # this window alone is over: until its end
    assert wait(1, 3, 6.0, 3, 60) > 0.0  # 3 x 0.9 + 1 = 3.7: the previous window's hits still count
    assert wait(1, 3, 6.0, 3, 60) == pytest.approx(14.0)  # until 3 x (1 - t/60) + 1 <= 3, t = 20
    assert wait(1, 3, 30.0, 3, 60) == 0.0  # 3 x 0.5 + 1 = 2.5


async def test_a_message_s_hits_count_keys_in_the_window_new_keys_and_a_new_window(store: Store, backend: Backend,
                                                                                   clock: TestClock) -> None:
    # one upsert counts keys in the window, a new key and a new window's (sql_limits.HIT_ALL): the rows say how
    clock.advance(60 - clock().timestamp() % 60 + 1)  # 1 s into a window: the hits below stay in it
    start = int(clock().timestamp()) // 60 * 60
    hits = [("visitor:a", LIMIT, 60), ("ip:b", LIMIT, 60)]

    def rows() -> list[tuple[object, ...]]:
        return [tuple(int(v) if not isinstance(v, str) else v for v in r)
                for r in backend.select("SELECT key, window_start, hits, prev_hits FROM rate_counters ORDER BY key")]

    assert await store.hit_rate("visitor:a", LIMIT, 60) == 0.0
    assert await store.hit_rates(hits) == 0.0  # a in the window, b new
    assert await store.hit_rates(hits) == 0.0  # both in the window
    assert await store.hit_rates(hits) >= 1.0  # a's fourth waits: b's hit is taken back
    assert rows() == [("ip:b", start, 2, 0), ("visitor:a", start, 4, 0)]
    clock.advance(60)  # the next window: the last one's hits weigh in, a still waits
    assert await store.hit_rates(hits) >= 1.0
    assert rows() == [("ip:b", start + 60, 0, 2), ("visitor:a", start + 60, 1, 4)]
    clock.advance(120)  # two windows later nothing of them counts
    assert await store.hit_rates(hits) == 0.0
    assert rows() == [("ip:b", start + 180, 1, 0), ("visitor:a", start + 180, 1, 0)]
