"""Background tasks are tracked and drained on shutdown, never dropped."""

import asyncio

import pytest

from bot.tasks import TaskSet
from kernel.errors import Draining, HiloError


async def test_drain_waits_for_work_in_flight() -> None:
    tasks = TaskSet()
    done: list[int] = []

    async def work(i: int) -> None:
        await asyncio.sleep(0.05)
        done.append(i)

    for i in range(3):
        tasks.spawn(work(i), name=f"w{i}")
    assert len(tasks) == 3
    await tasks.drain(timeout=5)
    assert sorted(done) == [0, 1, 2]
    assert len(tasks) == 0


async def test_drain_cancels_what_overstays_and_refuses_new_work() -> None:
    tasks = TaskSet()
    cancelled = asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    tasks.spawn(stuck(), name="stuck")
    await asyncio.sleep(0)
    await tasks.drain(timeout=0.05)
    assert cancelled.is_set()

    async def late() -> None:
        return None

    with pytest.raises(Draining, match="draining") as refused:
        tasks.spawn(late(), name="late")
    assert isinstance(refused.value, HiloError)


async def test_a_failed_task_is_discarded_and_does_not_break_others() -> None:
    tasks = TaskSet()

    async def boom() -> None:
        raise ValueError("x")

    t = tasks.spawn(boom(), name="boom")
    await asyncio.gather(t, return_exceptions=True)
    await asyncio.sleep(0)
    assert len(tasks) == 0
