"""The least-recently-used bound the SQLite store's in-process caches share: the people's vector matrices
(memory/vectors.py) and the conversations' windows (memory/windows.py). One thread uses each (the store's worker),
so it takes no lock."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class SizedLRU(Generic[K, V]):
    """key -> value, the least recently used out first while the values' sizes (`size_of`, fixed while a value is
    held) together pass `limit`; the newest one always stays. `held` is their sum, kept as they come and go."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: OrderedDict[K, V] = OrderedDict()
        self.held = 0

    def size_of(self, value: V) -> int:
        raise NotImplementedError

    def get(self, key: K) -> V | None:
        found = self.entries.get(key)
        if found is not None:
            self.entries.move_to_end(key)
        return found

    def put(self, key: K, value: V) -> None:
        self.drop(key)
        self.entries[key] = value
        self.held += self.size_of(value)
        while len(self.entries) > 1 and self.held > self.limit:
            _, out = self.entries.popitem(last=False)
            self.held -= self.size_of(out)

    def drop(self, key: K) -> None:
        out = self.entries.pop(key, None)
        if out is not None:
            self.held -= self.size_of(out)

    def clear(self) -> None:
        self.entries.clear()
        self.held = 0
