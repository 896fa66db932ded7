"""The person's nearest vectors (SQLite: numpy over the cached matrix, memory/vectors.top; Postgres: HNSW) are
the ones a plain computation finds: the same ids in the same order and the same cosines to float16 precision,
with ties at the limit going to the newer message and excluded messages left out, whatever the search's own
shortcuts (bisection for the excluded, a partition for the limit). Checked on every backend, and `top` alone
against a sort of every pair."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memory.store import Store
from memory.vectors import top
from tests.test_vectors import DIM, say


def plain(ids: list[int], rows: np.ndarray, q: np.ndarray, limit: int, excluded: set[int]) -> list[tuple[int, float]]:
    """Every (id, cosine) of the float16-stored rows, sorted best first, ties to the higher id: the reference."""
    cos = rows.astype(np.float16).astype(np.float64) @ q
    pairs = sorted(((i, float(c)) for i, c in zip(ids, cos, strict=True) if i not in excluded),
                   key=lambda p: (-p[1], -p[0]))
    return pairs[:limit]


def fan(cosines: list[float]) -> np.ndarray:
    """Unit vectors in the plane of axes 0 and 1 with these cosines to axis 0."""
    rows = np.zeros((len(cosines), DIM))
    rows[:, 0] = cosines
    rows[:, 1] = [math.sqrt(1 - c * c) for c in cosines]
    return rows


@pytest.mark.parametrize("limit", [1, 3, 4, 9, 40])
async def test_the_search_finds_what_a_plain_computation_finds(store: Store, limit: int) -> None:
    # 30 distinct cosines 0.06 apart (float16 keeps them apart), then pairs of equal vectors whose ties a limit
    # can cut through: the newer message comes first. (Pairs: Postgres orders ties among the 2 x limit nearest
    # its HNSW scan gives, so a larger group cut by the limit is Postgres' to choose from; `top` below takes any.)
    cosines = [0.97 - 0.06 * k for k in range(30)] + [0.91, 0.5, 0.97, 0.5]
    turns = [await say(store, "ana", f"a{i}", f"message {i}") for i in range(len(cosines))]
    other = await say(store, "bob", "b0", "bob's")
    ids = [t.message.id for t in turns]
    rows = fan(cosines)
    assert await store.write_vectors("e1", [(i, r.tolist()) for i, r in zip(ids, rows, strict=True)]) == len(ids)
    await store.write_vectors("e1", [(other.message.id, [1.0] + [0.0] * (DIM - 1))])
    q = np.eye(DIM)[0]
    for excluded in (set(), {ids[0], ids[30], ids[12], other.message.id}):
        found = await store.search_vectors(turns[0].user_id, q.tolist(), "e1", limit=limit, excluded=sorted(excluded))
        expected = plain(ids, rows, q, limit, excluded)
        assert list(found) == [i for i, _ in expected]
        for i, cosine in expected:
            assert abs(found[i] - cosine) < 2e-3  # float16 keeps three decimals


def test_top_is_a_sort_of_every_pair() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 50, 300):
        ids = np.sort(rng.choice(10 * n, size=n, replace=False)).astype(np.int64)
        scores = rng.integers(0, 6, size=n).astype(np.float32) / 5  # few values: many ties
        for limit in (0, 1, 3, n // 2, n, n + 2):
            for excluded in ([], [int(ids[0])], [int(x) for x in ids[::3]] + [10 * n + 1, -1, int(ids[-1])]):
                expected = sorted(((int(i), float(s)) for i, s in zip(ids, scores, strict=True)
                                   if int(i) not in excluded), key=lambda p: (-p[1], -p[0]))[:max(limit, 0)]
                assert top(ids, scores, limit, excluded) == expected, (n, limit, excluded)
