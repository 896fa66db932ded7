"""kernel/heap.py: what start built leaves the collections; garbage from before is collected first."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from kernel import heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def thawed() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()  # the rest of the test session collects as before
    gc.set_threshold(*threshold)


def test_settle_freezes_what_lives_and_collects_what_does_not(thawed: None) -> None:
    kept = Node()
    garbage = Node()
    garbage.other = garbage  # a cycle: only the collector frees it
    gone = weakref.ref(garbage)
    del garbage
    frozen = heap.settle()
    assert gone() is None  # collected before the freeze, not kept forever in the permanent generation
    # (not compared with gc.get_freeze_count() later: the suite's other threads free and freeze objects meanwhile,
    # the count moved both ways between two reads in CI)
    assert frozen >= 1
    # gc.get_objects() lists the three generations, not the permanent one
    assert not any(o is kept for o in gc.get_objects())
    after = Node()
    assert any(o is after for o in gc.get_objects())  # made after: collected as usual


def test_after_settle_a_turns_temporaries_set_off_no_young_collection(thawed: None) -> None:
    # CPython collects the young generation every 700 allocations by default: 5,000 containers would have set off
    # several collections, each resetting the young generation's count
    heap.settle()
    made = [[i] for i in range(5_000)]
    assert gc.get_count()[0] >= len(made)
