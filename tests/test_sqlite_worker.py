"""memory/sqlite_worker.py: the SQLite store's one thread, as the ThreadPoolExecutor of one worker behaved."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from memory.sqlite_worker import Outcome, Worker, outcome
from tests.waiting import wait_until


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


def _grouping(groups: list[list[str]]) -> Callable[[list[Callable[[], Any]]], list[Outcome]]:
    """A group runner that records the names its calls return (or raise) and hands each outcome back."""
    def group(fns: list[Callable[[], Any]]) -> list[Outcome]:
        outcomes: list[Outcome] = [outcome(fn) for fn in fns]
        groups.append([str(result if error is None else error) for result, error in outcomes])
        return outcomes
    return group


async def test_grouped_calls_queued_behind_one_another_run_in_one_group() -> None:
    """What the SQLite store commits once for several writes (memory/dialect_sqlite.py `_group_sync`): the grouped
    calls queued right behind a grouped call join its group, up to the first call that is not grouped; a grouped
    call with none behind it runs alone, as any call; each outcome reaches its own caller."""
    groups: list[list[str]] = []
    worker = Worker("hilo-sqlite-test", group=_grouping(groups))
    try:
        ran: list[str] = []
        first, release = await _busy(worker, ran, "first")

        def fails() -> str:
            raise ValueError("g2 failed")

        calls = [asyncio.ensure_future(worker.call(lambda: "g1", grouped=True)),
                 asyncio.ensure_future(worker.call(fails, grouped=True)),
                 asyncio.ensure_future(worker.call(lambda: "g3", grouped=True)),
                 asyncio.ensure_future(worker.call(lambda: "alone")),
                 asyncio.ensure_future(worker.call(lambda: "g4", grouped=True))]
        await asyncio.sleep(0)  # all queued behind the busy call
        release.set()
        assert await first == "first"
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert outcomes[0] == "g1" and outcomes[2] == "g3" and outcomes[3] == "alone" and outcomes[4] == "g4"
        assert isinstance(outcomes[1], ValueError) and str(outcomes[1]) == "g2 failed"
        assert groups == [["g1", "g2 failed", "g3"]]  # "alone" split the queue; g4 had nothing behind it
    finally:
        worker.close()


async def test_a_grouped_call_cancelled_before_the_thread_reaches_it_is_not_run() -> None:
    groups: list[list[str]] = []
    worker = Worker("hilo-sqlite-test", group=_grouping(groups))
    try:
        ran: list[str] = []
        first, release = await _busy(worker, ran, "first")
        calls = [asyncio.ensure_future(worker.call(lambda name=name: ran.append(name) or name, grouped=True))
                 for name in ("a", "b", "c")]
        await asyncio.sleep(0)
        calls[1].cancel()
        release.set()
        await first
        assert await calls[0] == "a" and await calls[2] == "c"
        assert ran == ["first", "a", "c"] and groups == [["a", "c"]]
    finally:
        worker.close()


async def test_close_behind_a_group_stops_the_thread_after_it() -> None:
    groups: list[list[str]] = []
    worker = Worker("hilo-sqlite-test", group=_grouping(groups))
    ran: list[str] = []
    first, release = await _busy(worker, ran, "first")
    calls = [asyncio.ensure_future(worker.call(lambda name=name: name, grouped=True)) for name in ("a", "b")]
    await asyncio.sleep(0)
    thread = next(t for t in threading.enumerate() if t.name == "hilo-sqlite-test")
    closing = asyncio.ensure_future(asyncio.to_thread(worker.close))
    # the stop is queued behind the group's two calls before the thread goes on
    await wait_until(lambda: worker._jobs.qsize() >= 3, "the stop queued behind the group")
    release.set()
    assert await first == "first" and await asyncio.gather(*calls) == ["a", "b"]
    await closing
    assert not thread.is_alive() and groups == [["a", "b"]]
