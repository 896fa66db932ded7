"""memory/sqlite_worker.py: the SQLite store's one thread, as the ThreadPoolExecutor of one worker behaved."""

from __future__ import annotations

import asyncio
import threading

import pytest

from memory.sqlite_worker import Worker


class Stop(BaseException):
    """Not an Exception: it must reach the caller all the same."""


async def test_calls_run_in_order_on_the_one_thread_and_their_errors_reach_the_caller() -> None:
    worker = Worker("hilo-sqlite-test")
    try:
        ran: list[tuple[int, str]] = []

        def job(i: int) -> int:
            ran.append((i, threading.current_thread().name))
            return i * 10

        assert await asyncio.gather(*(worker.call(lambda i=i: job(i)) for i in range(20))) == [
            i * 10 for i in range(20)]
        assert ran == [(i, "hilo-sqlite-test") for i in range(20)]

        def fails() -> None:
            raise ValueError("no such table")

        def stops() -> None:
            raise Stop()

        with pytest.raises(ValueError, match="no such table"):
            await worker.call(fails)
        with pytest.raises(Stop):
            await worker.call(stops)
        assert await worker.call(lambda: "still there") == "still there"
    finally:
        worker.close()


async def _busy(worker: Worker, ran: list[str], name: str) -> tuple[asyncio.Future[str], threading.Event]:
    """A call that holds the worker's thread until the returned event is set (then records `name`), once the
    thread is inside it."""
    started, release = threading.Event(), threading.Event()

    def blocking() -> str:
        started.set()
        release.wait(10)
        ran.append(name)
        return name

    call = asyncio.ensure_future(worker.call(blocking))
    await asyncio.to_thread(started.wait, 10)
    return call, release


async def test_a_call_cancelled_before_the_thread_reaches_it_is_not_run() -> None:
    worker = Worker("hilo-sqlite-test")
    try:
        ran: list[str] = []
        first, release = await _busy(worker, ran, "first")  # the thread is busy with the first call
        second = asyncio.ensure_future(worker.call(lambda: ran.append("second")))
        await asyncio.sleep(0)  # the second call is queued
        second.cancel()
        release.set()
        assert await first == "first"
        assert await worker.call(lambda: "third") == "third"  # everything queued before it has been handled
        assert second.cancelled() and ran == ["first"]
    finally:
        worker.close()


async def test_a_call_running_when_its_caller_is_cancelled_runs_to_its_end() -> None:
    worker = Worker("hilo-sqlite-test")
    try:
        ran: list[str] = []
        call, release = await _busy(worker, ran, "committed")
        call.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await worker.call(lambda: list(ran)) == ["committed"]
    finally:
        worker.close()


async def test_close_runs_what_was_put_before_and_stops_the_thread() -> None:
    worker = Worker("hilo-sqlite-test")
    assert await worker.call(lambda: 1) == 1
    thread = next(t for t in threading.enumerate() if t.name == "hilo-sqlite-test")
    worker.close()
    assert not thread.is_alive()
