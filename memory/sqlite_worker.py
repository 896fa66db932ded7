"""The SQLite store's one thread: it owns the connection and runs each hop's function, in order.

What `loop.run_in_executor` on a ThreadPoolExecutor of one worker did, without the pool's machinery around each
call: a concurrent Future chained to an asyncio one (`wrap_future`), the pool's idle-semaphore and shutdown lock,
the state copied back through two callbacks. Here a call puts (function, asyncio future, loop) on a SimpleQueue;
the thread runs the function and hands its result or error to the caller's loop with one `call_soon_threadsafe`.
A web turn makes two hops. A hop of a function that does nothing (20,000 in a row, CPU of both threads, on the
2-vCPU machine of docs/benchmarks.md): 84-89 us through the pool, 60-72 us here; a web turn, 175k instructions
fewer (bench/turn_instructions.py; docs/architecture.md, stop 44).

As with the pool: a call whose caller was cancelled before the thread reached it is not run (a write that nobody
waits for is not made), one that runs is run to its end (its result is dropped), and every error, BaseException
included, is raised in the caller.

`group`, when given, runs several calls at once: a call made `grouped` takes the grouped calls queued right behind
it (up to GROUP_MAX, up to the first call that is not grouped) and the thread hands them to `group`, which returns
each one's outcome; each goes to its caller as a call's would. The SQLite store groups its write transactions so:
one COMMIT for the writes queued meanwhile (memory/dialect_sqlite.py `_group_sync`). A grouped call with nothing
grouped behind it runs alone, as any call.

`idle`, when given, is work the thread does between calls (the store's FTS5 index written behind,
memory/sqlite_fts.py): `idle(False)` each time a call ends and none is waiting; when it returns True (work is
left that it chose not to do yet) the thread calls `idle(True)` once it has had no call for `idle_after` seconds,
and again while that returns True and no call has come. A call that comes meanwhile waits for the one run of
`idle` in progress. An error of `idle` is logged (`store.idle_failed`) and taken as nothing left: the thread goes
on serving calls (a thread that died would leave every later call waiting forever).
"""

from __future__ import annotations

import asyncio
import enum
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kernel import log

T = TypeVar("T")
logger = log.get("hilo.store")
#: (function, its caller's future, the caller's loop, whether it may run in a group)
_Job = tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop, bool]
#: What a group runner returns for each function it was given: (result, None) or (None, the error).
Outcome = tuple[Any, BaseException | None]
#: The most calls one group takes.
GROUP_MAX = 16


class _Taken(enum.Enum):
    NOTHING = 0  # what `_run_jobs` returns when it took nothing from the queue beyond its group


def outcome(fn: Callable[[], T]) -> tuple[T | None, BaseException | None]:
    """fn()'s outcome: (its result, None) or (None, what it raised, BaseException included)."""
    try:
        return fn(), None
    except BaseException as exc:
        return None, exc


class Worker:
    """One thread named `name`, started at once; `close()` stops it after the calls put before."""

    def __init__(self, name: str, idle: Callable[[bool], bool] | None = None, idle_after: float = 0.25,
                 group: Callable[[list[Callable[[], Any]]], list[Outcome]] | None = None) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle, self._idle_after, self._group = idle, idle_after, group
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    async def call(self, fn: Callable[[], T], *, grouped: bool = False) -> T:
        """fn() on the thread, after every call put before; `grouped`: it may run in one `group` call with the
        grouped calls queued right behind it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((fn, future, loop, grouped))
        return await future

    def close(self) -> None:
        """Stop the thread once the calls before have run, and wait for it (at once when it is idle)."""
        self._jobs.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        waiting = False  # the idle work asked to be called again once the thread has been idle `idle_after`
        job: _Job | _Taken | None
        while True:
            if waiting:
                try:
                    job = self._jobs.get(timeout=self._idle_after)
                except queue.Empty:
                    waiting = self._idle_now()
                    continue
            else:
                job = self._jobs.get()
            while job is not _Taken.NOTHING:  # a group's call that could not join it runs next
                if job is None:
                    return
                job = self._run_jobs(job)
            if self._idle is not None and self._jobs.empty():
                waiting = self._idle_once(False)

    def _run_jobs(self, job: _Job) -> _Job | _Taken | None:
        """Run `job`, in a group with the grouped calls queued right behind it when it is grouped; what it took from
        the queue and could not join the group (a call, or None: the stop), else _Taken.NOTHING."""
        jobs: list[_Job] = [job]
        after: _Job | _Taken | None = _Taken.NOTHING
        if job[3] and self._group is not None:
            while len(jobs) < GROUP_MAX and not self._jobs.empty():  # this thread alone takes from the queue
                queued = self._jobs.get_nowait()
                if queued is None or not queued[3]:
                    after = queued
                    break
                jobs.append(queued)
        live = [j for j in jobs if not j[1].cancelled()]  # a caller gone: nothing waits for it, it is not run
        if len(live) == 1:
            fn, future, loop, _ = live[0]
            _post(loop, future, *outcome(fn))  # an error is raised in the caller, as the pool did
        elif live:
            assert self._group is not None
            try:
                outcomes = self._group([j[0] for j in live])
            except BaseException as exc:  # the runner's own bug: every caller hears of it, the thread lives on
                outcomes = [(None, exc)] * len(live)
            for (_, future, loop, _), (result, error) in zip(live, outcomes, strict=True):
                _post(loop, future, result, error)
        return after

    def _idle_now(self) -> bool:
        """The idle work, forced, again and again while it says more is left and no call is waiting."""
        while (more := self._idle_once(True)) and self._jobs.empty():
            pass
        return more

    def _idle_once(self, force: bool) -> bool:
        assert self._idle is not None
        try:
            return self._idle(force)
        except Exception as exc:  # the thread must outlive its idle work's bugs
            logger.error("store.idle_failed", error=type(exc).__name__)
            return False


def _post(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], result: Any,
          error: BaseException | None) -> None:
    try:
        loop.call_soon_threadsafe(_settle, future, result, error)
    except RuntimeError:  # the loop closed meanwhile: nobody is left to tell
        pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
