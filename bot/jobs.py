"""Background jobs: named async functions run every N seconds or on demand, by ONE process of all that share
the database, owned by the app's lifespan.

    registry = JobRegistry()
    registry.add("cleanup", purge, every=3600)          # async def purge(ctx: JobContext) -> None
    scheduler = Scheduler(store, registry); await scheduler.start()
    await scheduler.run_now("cleanup")                  # "ok" | "failed" | "cancelled" | "lost" | None (busy)
    await scheduler.stop()                              # at shutdown: no new runs, running ones drained

Each run is claimed with a lease on the job's row (memory/jobs.py: SELECT ... FOR UPDATE SKIP LOCKED on Postgres,
BEGIN IMMEDIATE on SQLite), renewed every lease/3 while it runs and released when it ends, with the outcome
and the next due time (`every` s after the run started, never before it ended). A process that died leaves a
lease that another process takes over once it expired, and runs the job again (at least once, so a job must be
safe to repeat). A run whose lease was taken over (this process stalled past the lease) is cancelled: ONE
process runs it. Runs are tasks of the scheduler's own TaskSet; `stop` drains them within DRAIN_SECONDS and
cancels what overruns. Logs carry the job's name, the run's id, outcomes and durations, never data.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from bot.tasks import TaskSet
from kernel import log
from kernel.errors import Draining
from memory.jobs import JobClaim, JobEnd
from memory.store import Store
from memory.turn_lease import new_owner

logger = log.get("hilo.jobs")

#: Seconds a run's lease lasts unless renewed: how long a job stays blocked after its process died.
LEASE_SECONDS = 30.0
#: Seconds shutdown waits for running jobs before cancelling them. PM2 (kill_timeout, deploy/ecosystem.config.js)
#: and systemd (TimeoutStopSec, deploy/hilo.service) kill hilo 40 s after SIGTERM; uvicorn first gives requests
#: in flight up to bot.daemon.GRACEFUL_SECONDS (30); the jobs drain first in what is left, with a margin.
DRAIN_SECONDS = 5.0
#: The scheduler never waits less than this between two claims of one job (a claimer that lost a race to a
#: claim still in progress sees the job due), nor more than MAX_WAIT (another process's on-demand request).
MIN_WAIT, MAX_WAIT = 0.05, 60.0
#: After the database failed a claim: try that job again in this many seconds.
RETRY_SECONDS = 5.0

_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a run is told: the job's name and the run's id (the lease owner: host, process, counter)."""

    name: str
    run_id: str


@dataclass(frozen=True, slots=True)
class Job:
    """A named async function. every: seconds from one run's start to the next (None: on demand only);
    lease: seconds its lease lasts unless renewed (renewed every lease/3 while it runs). A run that returns False
    did nothing: its job.finished line is at debug (a frequent job that finds nothing to do is not news)."""

    name: str
    run: Callable[[JobContext], Awaitable[bool | None]]
    every: float | None = None
    lease: float = LEASE_SECONDS


class JobRegistry:
    """The jobs the app runs, by name. The app fills it (bot/app.py); the Scheduler runs it."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}

    def add(self, name: str, run: Callable[[JobContext], Awaitable[bool | None]], *, every: float | None = None,
            lease: float = LEASE_SECONDS) -> Job:
        """Register `run` as job `name` (lowercase letters, digits, `_.-`). ValueError for a taken or bad name,
        or a period or lease that is not positive."""
        if not _NAME.match(name):
            raise ValueError(f"job name {name!r}: use lowercase letters, digits, '_', '.', '-' (at most 64)")
        if name in self._jobs:
            raise ValueError(f"job {name!r} is registered twice")
        if (every is not None and every <= 0) or lease <= 0:
            raise ValueError(f"job {name!r}: its period and lease must be positive seconds")
        job = self._jobs[name] = Job(name, run, every, lease)
        return job

    def __getitem__(self, name: str) -> Job:
        return self._jobs[name]

    def __iter__(self) -> Iterator[Job]:
        return iter(self._jobs.values())


class Scheduler:
    """Runs a registry's jobs on one store: scheduled ones when due, any on demand. `counters` counts claims
    taken ("claims"), claims refused ("claims_refused": not due, or held elsewhere) and lease renewals."""

    def __init__(self, store: Store, registry: JobRegistry, *, drain_timeout: float = DRAIN_SECONDS) -> None:
        self.store = store
        self.registry = registry
        self.drain_timeout = drain_timeout
        self.tasks = TaskSet()
        self.counters: dict[str, int] = {"claims": 0, "claims_refused": 0, "renewals": 0}
        self._next: dict[str, float] = {}  # job -> loop time of its next claim (while it does not run here)
        self._running: dict[str, asyncio.Task[str]] = {}
        self._claiming: dict[str, asyncio.Lock] = {}  # job -> one claim at a time in this process
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def stopping(self) -> bool:
        """True once `stop` has begun: no new runs."""
        return self._stopping

    async def start(self) -> None:
        """Give every job its row, then start claiming them as they fall due (an on-demand job falls due when
        it was asked for while it ran: it is looked at every MAX_WAIT s)."""
        for job in self.registry:
            await self.store.register_job(job.name, job.every is not None)
            self._next[job.name] = 0.0
        self._loop = asyncio.create_task(self._schedule(), name="jobs:scheduler")

    async def run_now(self, name: str) -> str | None:
        """Run job `name` now in this process and return its outcome (ok, failed, cancelled, lost). When it is
        running already it runs again once that run ends; meanwhile the outcome is that run's if it runs in this
        process (the scheduler's loop may have claimed it a moment before), None if in another one. KeyError for
        an unknown job, Draining once `stop` has begun."""
        job = self.registry[name]
        if self._stopping:
            raise Draining("the job scheduler is stopping: no new runs")
        task = await self._claim(job, force=True)
        if task is None:
            return None
        await asyncio.wait({task})
        return "cancelled" if task.cancelled() else task.result()

    async def stop(self, timeout: float | None = None) -> None:
        """Take no new runs; wait up to `timeout` s (DRAIN_SECONDS) in all for the loop's claim in progress and
        the running runs, then cancel them (each cancelled run is logged, its lease released)."""
        self._stopping = True
        self._wake.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.drain_timeout if timeout is None else timeout)  # ONE limit for both waits
        if self._loop is not None:  # it ends at once, or after the claim it is making
            _, pending = await asyncio.wait({self._loop}, timeout=deadline - loop.time())
            for task in pending:
                task.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        await self.tasks.drain(timeout=max(0.0, deadline - loop.time()))

    # -- the loop: claim what is due, sleep until the next due time or a wake-up ------------------------------

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            self._wake.clear()
            for name, at in list(self._next.items()):
                if self._stopping:
                    return
                if at <= loop.time() and name not in self._running:
                    await self._claim(self.registry[name], force=False)
            waits = [at for name, at in self._next.items() if name not in self._running]
            delay = min(MAX_WAIT, max(0.0, min(waits, default=loop.time() + MAX_WAIT) - loop.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def _claim(self, job: Job, *, force: bool) -> asyncio.Task[str] | None:
        """Claim a run of `job`: its task when claimed; when refused, the run of it this process was running as
        the claim was made, else None (and when to try again). The loop's claims and run_now's take turns."""
        async with self._claiming.setdefault(job.name, asyncio.Lock()):
            running = self._running.get(job.name)
            return await self._claim_one(job, force=force) or running

    async def _claim_one(self, job: Job, *, force: bool) -> asyncio.Task[str] | None:
        loop = asyncio.get_running_loop()
        owner = f"{new_owner()}:{job.name}"
        try:
            claim = await self.store.claim_job(job.name, owner, job.lease, force=force)
        except Exception as exc:  # the database is away: try again later, the scheduler keeps running
            logger.warning("job.claim_failed", job=job.name, error=type(exc).__name__)
            self._next[job.name] = loop.time() + RETRY_SECONDS
            if force:
                raise
            return None
        if not claim.claimed:
            self.counters["claims_refused"] += 1
            wait = _seconds_until(claim, job.every)
            self._next[job.name] = loop.time() + wait
            logger.debug("job.claim_refused", job=job.name, wait_s=round(wait, 3))
            return None
        self.counters["claims"] += 1
        try:
            task = self.tasks.spawn(self._run(job, owner, claim), name=f"job:{job.name}")
        except Draining:  # `stop` began while this claim was made: give the run back
            await self.store.finish_job(job.name, owner, JobEnd("cancelled", None, claim.at, 0, job.every))
            raise
        self._running[job.name] = task
        return task

    async def _run(self, job: Job, owner: str, claim: JobClaim) -> str:
        started = time.monotonic()
        run = asyncio.current_task()
        assert run is not None
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._renew(job, owner, run, lost), name=f"job:{job.name}:lease")
        outcome, error, idle = "ok", None, False
        try:
            idle = await job.run(JobContext(job.name, owner)) is False
        except asyncio.CancelledError:
            outcome = "lost" if lost.is_set() else "cancelled"
            raise
        except Exception as exc:
            outcome, error = "failed", type(exc).__name__
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            duration_ms = round((time.monotonic() - started) * 1000)
            await self._finish(job, owner, JobEnd(outcome, error, claim.at, duration_ms, job.every), idle)
        return outcome

    async def _finish(self, job: Job, owner: str, end: JobEnd, idle: bool = False) -> None:
        fields = {"job": job.name, "run": owner, "started_at": end.started_at.isoformat(),
                  "duration_ms": end.duration_ms}
        if end.outcome == "ok":
            (logger.debug if idle else logger.info)("job.finished", **fields)
        elif end.outcome == "failed":
            logger.error("job.failed", error=end.error, **fields)
        else:
            logger.warning(f"job.{end.outcome}", **fields)
        try:
            await self.store.finish_job(job.name, owner, end)
        except Exception as exc:  # the lease lapses after its ttl: another claim takes it over then
            logger.warning("job.lease_not_released", job=job.name, run=owner, error=type(exc).__name__)
        finally:
            self._running.pop(job.name, None)
            self._next[job.name] = 0.0  # ask the database when it is due next
            self._wake.set()

    async def _renew(self, job: Job, owner: str, run: asyncio.Task[str], lost: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(job.lease / 3)
            try:
                renewed = await self.store.renew_job(job.name, owner, job.lease)
            except Exception as exc:  # retried at the next tick, well before the lease expires
                logger.warning("job.lease_not_renewed", job=job.name, run=owner, error=type(exc).__name__)
                continue
            if not renewed:  # another process took it over: it runs the job now, so this run stops
                lost.set()
                run.cancel()
                return
            self.counters["renewals"] += 1


def _seconds_until(claim: JobClaim, every: float | None) -> float:
    """Seconds until a refused claim may succeed: its due time, or the lease's expiry while the job runs
    elsewhere, but within one period (a run elsewhere usually ends long before its lease would expire);
    MIN_WAIT at least, MAX_WAIT at most (on demand only: MAX_WAIT)."""
    if claim.next_try is None:
        return MAX_WAIT
    wait = (claim.next_try - claim.at).total_seconds()
    return max(MIN_WAIT, min(wait, MAX_WAIT if every is None else min(every, MAX_WAIT)))
