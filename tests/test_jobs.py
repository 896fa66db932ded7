"""Background jobs: a run is claimed by ONE process of all that share a database, its lease renewed while it runs,
taken over once a dead process let it expire, run on demand, and drained (or cancelled) at shutdown; on one SQLite
file, on Postgres, and on Postgres behind a real pgbouncer in transaction mode (prepared statements off).

Two stores on one database stand for two `hilo serve` processes (tests/test_jobs_serve.py runs two real ones).
Jobs are held at asyncio events; what another store or task does is waited for (polled rows and counters), never
slept on. Expiry is shown by moving a store's clock (tests/backends.py TestClock), not by waiting for it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot import job_list
from bot.config import Settings
from bot.jobs import JobContext, JobRegistry, Scheduler
from kernel.errors import Draining
from memory.jobs import JobEnd, JobState
from memory.open import open_store
from memory.store import LinkPolicy, MemoryDraft, Store
from tests.backends import TestClock
from tests.fakes.pgbouncer import database_url, pgbouncer_session  # noqa: F401  (autouse fixture)
from tests.fakes.postgres import postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.waiting import wait_until


class Held:
    """A job body that says when it began and waits for `release`; it records each run's id."""

    def __init__(self) -> None:
        self.began = asyncio.Event()
        self.release = asyncio.Event()
        self.runs: list[str] = []
        self.ended: list[str] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.runs.append(ctx.run_id)
        self.began.set()
        await self.release.wait()
        self.ended.append(ctx.run_id)


class Two:
    """Two stores (two pools, two SQLite connections) on one database, and the schedulers made on them."""

    def __init__(self, url: str) -> None:
        #: each store's "now": a test moves one ahead (a machine whose clock is ahead, or time gone by)
        self.clocks = [TestClock(), TestClock()]
        self.stores: list[Store] = [open_store(url, clock=clock) for clock in self.clocks]
        self.schedulers: list[Scheduler] = []

    def scheduler(self, i: int, registry: JobRegistry, **kw: Any) -> Scheduler:
        made = Scheduler(self.stores[i], registry, **kw)
        self.schedulers.append(made)
        return made

    async def state(self, name: str) -> JobState:
        return next(s for s in await self.stores[0].job_states() if s.name == name)


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer"])
async def two(request: Any, tmp_path: Path) -> AsyncIterator[Two]:
    made = Two(database_url(request.param, tmp_path))
    for store in made.stores:
        await store.open()
    yield made
    for scheduler in made.schedulers:
        await scheduler.stop(timeout=5)
    for store in made.stores:
        await store.close()


def registry(name: str, body: Callable[[JobContext], Any], *, every: float | None = 3600.0,
             lease: float = 30.0) -> JobRegistry:
    jobs = JobRegistry()
    jobs.add(name, body, every=every, lease=lease)
    return jobs


async def test_racing_claimers_take_a_due_job_once(two: Two) -> None:
    for store in two.stores:
        await store.register_job("race", True)
    claims = await asyncio.gather(*(store.claim_job("race", f"p{i}-{n}", 30.0)
                                    for n in range(4) for i, store in enumerate(two.stores)))
    assert [c.claimed for c in claims].count(True) == 1, "a due job was claimed by more than one claimer"
    forced = await asyncio.gather(*(store.claim_job("race", f"q{i}-{n}", 30.0, force=True)
                                    for n in range(4) for i, store in enumerate(two.stores)))
    assert not any(c.claimed for c in forced), "a running job was claimed again"
    assert (await two.state("race")).owner in {f"p{i}-{n}" for n in range(4) for i in range(2)}


async def test_two_schedulers_run_a_due_job_once(two: Two) -> None:
    body = Held()
    first = two.scheduler(0, registry("tick", body))
    second = two.scheduler(1, registry("tick", body))
    await first.start()
    await second.start()
    tried = lambda: all(s.counters["claims"] + s.counters["claims_refused"] for s in (first, second))  # noqa: E731
    await wait_until(lambda: body.began.is_set() and tried(), "both schedulers tried the job, one runs it")
    body.release.set()
    await wait_until(lambda: _ran(two, "tick"), "the run was recorded")
    state = await two.state("tick")
    assert state.runs == 1 and state.outcome == "ok" and state.owner is None
    assert len(body.runs) == 1, f"the job ran {len(body.runs)} times for one due time"
    assert first.counters["claims"] + second.counters["claims"] == 1
    assert state.due_at is not None and state.started_at is not None
    assert state.due_at == state.started_at + timedelta(seconds=3600)


async def test_a_lease_left_by_a_dead_process_is_taken_over_once_expired(two: Two) -> None:
    dead, alive = two.stores
    await dead.register_job("sweep", True)
    taken = await dead.claim_job("sweep", "a-dead-process", 30.0)
    assert taken.claimed  # then never renewed nor released: that process died
    two.clocks[1].advance(29)
    refused = await alive.claim_job("sweep", "alive", 30.0)
    assert not refused.claimed, "a lease was taken over before it expired"
    assert refused.next_try == taken.at + timedelta(seconds=30), "a refused claim is told when the lease expires"
    two.clocks[1].advance(2)
    assert (await alive.claim_job("sweep", "alive", 30.0)).claimed, "an expired lease was not taken over"
    assert not await dead.renew_job("sweep", "a-dead-process", 30.0)
    late = JobEnd("ok", None, taken.at, 5, 60.0)
    assert not await dead.finish_job("sweep", "a-dead-process", late), "a run that lost its lease recorded itself"
    state = await two.state("sweep")
    assert state.owner == "alive" and state.runs == 0


async def test_a_running_job_renews_its_lease_and_keeps_it(two: Two) -> None:
    """A run that outlasts its lease keeps it: three renewals (every lease/3) mean a whole lease went by, and the
    other store is still refused."""
    body = Held()
    owner = two.scheduler(0, registry("long", body, lease=0.6))
    await owner.start()
    await body.began.wait()
    start = owner.counters["renewals"]
    await wait_until(lambda: owner.counters["renewals"] >= start + 3, "the running job renewed its lease 3 times")
    other = await two.stores[1].claim_job("long", "thief", 0.6, force=False)
    assert not other.claimed, "a lease that was being renewed was taken over"
    assert (await two.state("long")).owner == body.runs[0]
    body.release.set()
    await wait_until(lambda: _ran(two, "long"), "the run was recorded")
    state = await two.state("long")
    assert state.owner is None and state.expires_at is None, "the lease was not released"
    assert state.outcome == "ok" and state.runs == 1


async def test_a_run_whose_lease_was_taken_over_is_cancelled(two: Two, capsys: pytest.CaptureFixture[str]) -> None:
    """A process that stalled past its lease (here: the other store's clock is a minute ahead) finds it taken
    over at its next renewal, and stops its run: one process runs the job."""
    body = Held()
    stalled = two.scheduler(0, registry("lease", body, lease=0.6))
    await stalled.start()
    await body.began.wait()
    two.clocks[1].advance(60)
    assert (await two.stores[1].claim_job("lease", "taker", 30.0)).claimed
    logged: list[str] = []
    await wait_until(lambda: "job.lost" in "".join(logged.extend(capsys.readouterr()) or logged),
                     "the first run learnt it lost its lease")
    assert body.ended == [], "the run that lost its lease went on"
    state = await two.state("lease")
    assert (state.owner, state.runs) == ("taker", 0), "the run that lost its lease recorded itself"


async def test_a_job_runs_on_demand_and_again_when_asked_while_it_runs(two: Two) -> None:
    body = Held()
    body.release.set()  # runs end at once
    first = two.scheduler(0, registry("manual", body, every=None))
    await first.start()
    with pytest.raises(KeyError):
        await first.run_now("no-such-job")
    assert await first.run_now("manual") == "ok"
    state = await two.state("manual")
    assert (state.runs, state.outcome, state.due_at) == (1, "ok", None), "an on-demand job got a due time"
    # held by another process: asked for meanwhile, it runs again once that run ends
    other = await two.stores[1].claim_job("manual", "elsewhere", 30.0, force=True)
    assert other.claimed
    assert await first.run_now("manual") is None
    assert (await two.state("manual")).requested_at is not None
    assert await two.stores[1].finish_job("manual", "elsewhere", JobEnd("ok", None, other.at, 1, None))
    again = await two.state("manual")
    assert again.due_at == again.finished_at, "a request made while it ran did not make the job due"
    # due now: the scheduler's loop may claim it before this run_now does; either way one run here, its outcome
    body.began.clear()
    body.release.clear()
    final = asyncio.create_task(first.run_now("manual"))
    await body.began.wait()
    body.release.set()
    assert await final == "ok"
    assert len(body.runs) == 2 and (await two.state("manual")).runs == 3


async def test_a_request_while_it_runs_here_runs_it_again_after(two: Two) -> None:
    body = Held()
    scheduler = two.scheduler(0, registry("outbox", body, every=None))
    await scheduler.start()
    running = asyncio.ensure_future(scheduler.run_now("outbox"))
    await body.began.wait()
    assert await two.scheduler(1, registry("outbox", body, every=None)).run_now("outbox") is None
    body.release.set()
    assert await running == "ok"
    await wait_until(lambda: _runs(two, "outbox", 2), "the run asked for while it ran")
    assert len(body.runs) == 2


async def test_a_failed_run_is_recorded_by_type_and_the_job_stays_scheduled(
    two: Two, capsys: pytest.CaptureFixture[str],
) -> None:
    async def broken(ctx: JobContext) -> None:
        raise ValueError("the person's words must not reach a log")

    scheduler = two.scheduler(0, registry("broken", broken, every=120.0))
    await scheduler.start()
    await wait_until(lambda: _ran(two, "broken"), "the run ended")
    state = await two.state("broken")
    assert (state.outcome, state.error, state.owner) == ("failed", "ValueError", None)
    assert state.due_at is not None and state.started_at is not None
    assert state.due_at == state.started_at + timedelta(seconds=120)
    logged = capsys.readouterr()
    assert "job.failed" in logged.out + logged.err
    assert "the person's words" not in logged.out + logged.err


async def _ran(two: Two, name: str) -> bool:
    return await _runs(two, name, 1)


async def _runs(two: Two, name: str, count: int) -> bool:
    return (await two.state(name)).runs >= count


async def test_shutdown_waits_for_a_run_that_ends_in_time(two: Two) -> None:
    body = Held()
    scheduler = two.scheduler(0, registry("short", body))
    await scheduler.start()
    await body.began.wait()
    stopping = asyncio.ensure_future(scheduler.stop(timeout=60))
    await wait_until(lambda: scheduler.stopping, "the scheduler stopped taking runs")
    with pytest.raises(Draining):
        await scheduler.run_now("short")
    assert not stopping.done()
    body.release.set()
    await stopping
    state = await two.state("short")
    assert (state.outcome, state.owner, state.runs) == ("ok", None, 1)
    assert body.ended == body.runs


async def test_shutdown_cancels_a_run_that_overruns_and_releases_its_lease(
    two: Two, capsys: pytest.CaptureFixture[str],
) -> None:
    body = Held()  # never released
    scheduler = two.scheduler(0, registry("stuck", body))
    await scheduler.start()
    await body.began.wait()
    await scheduler.stop(timeout=0.2)
    state = await two.state("stuck")
    assert (state.outcome, state.owner, state.expires_at) == ("cancelled", None, None)
    assert body.ended == []
    captured = capsys.readouterr()
    logged = captured.out + captured.err
    line = next(line for line in logged.splitlines() if "job.cancelled" in line)
    assert f"run={body.runs[0]}" in line and re.search(r"duration_ms=\d+", line), line
    assert (await two.stores[1].claim_job("stuck", "next", 30.0, force=True)).claimed, "the lease stayed held"


async def test_the_cleanup_job_deletes_link_codes_that_can_never_be_redeemed(two: Two) -> None:
    store = two.stores[0]
    now = datetime.now(UTC)
    await store.issue_link_code("telegram", "1", "h-replaced", now + timedelta(minutes=10))
    await store.issue_link_code("telegram", "1", "h-live", now + timedelta(minutes=10))  # replaces h-replaced
    await store.issue_link_code("telegram", "2", "h-expired", now - timedelta(minutes=1))
    assert await store.purge_link_codes() == 2
    assert await store.purge_link_codes() == 0
    await store.issue_link_code("telegram", "3", "h-expired-2", now - timedelta(minutes=1))
    scheduler = two.scheduler(0, job_list.registry(Settings.from_mapping({}), store))
    await scheduler.start()  # a new scheduled job is due at once
    await wait_until(lambda: _ran(two, "cleanup"), "the first scheduled cleanup ran")
    assert await store.purge_link_codes() == 0, "the cleanup left a dead code"
    await store.issue_link_code("telegram", "4", "h-expired-3", now - timedelta(minutes=1))
    assert await scheduler.run_now("cleanup") == "ok"
    assert await store.purge_link_codes() == 0, "the cleanup run on demand left a dead code"
    live = await two.stores[1].redeem_link_code("web", "v", "h-live", LinkPolicy())
    assert live.status == "prompt", "the cleanup deleted a live code"



async def test_the_memory_expiry_job_ends_unimportant_memories_unused_for_the_expiry_days(two: Two) -> None:
    store = two.stores[0]
    uid = await store.user_id("ana", create=True)
    assert uid is not None
    trivial = (await store.add_memory(uid, MemoryDraft("wore a blue shirt", importance=0.1))).memory
    await store.add_memory(uid, MemoryDraft("is allergic to peanuts", importance=0.9))
    settings = Settings.from_mapping({"HILO_MEMORY_EXPIRY_DAYS": "30"})
    two.clocks[0].advance(31 * 86400)  # the store's clock: a month gone by
    scheduler = two.scheduler(0, job_list.registry(settings, store))
    await scheduler.start()  # a new scheduled job is due at once
    await wait_until(lambda: _ran(two, "memory_expiry"), "the first memory expiry ran")
    assert [m.content for m in await store.memories(uid)] == ["is allergic to peanuts"]
    ended = await store.memory(uid, trivial.id)
    assert ended is not None and ended.ended_at is not None, "expiry ends a memory, it does not delete it"
