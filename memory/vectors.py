"""Message vectors: what memory/ keeps of an embedder's output, and how one person's vectors are searched.

memory/ never embeds (bot/embedders does): it is handed unit vectors as plain floats with the embedder's `name`,
stores one per message (table message_vectors, migration 0015) and compares only vectors of one name (a changed
embedder's vectors are never compared with the old ones; the backfill re-embeds them). Cosine = dot product.

- SQLite: a blob of `dim` little-endian float16 (`pack` / `unpack`: 1 KB for 512 floats; float16 loses no
  measurable recall against float32, int8 with a scale loses a little: bench/vector_bench.py), searched with numpy
  over the person's matrix, which `MatrixCache` keeps in process as float32 (2 KB per 512-float vector: 100k
  vectors of one person are 205 MB), least recently used first out past `DEFAULT_CACHE_FLOATS` floats (256 MB),
  checked against the table at each search (a count and a max over the person's index) and extended with the new
  rows, or reloaded when rows went (forget) or moved (linking).
- Postgres: pgvector's halfvec with an HNSW index per (embedder, dim), filtered by person (memory/dialect_pg.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memory.lru import SizedLRU

if TYPE_CHECKING:  # numpy loads with the first vector (~15 MB): a store with no embedder never needs it
    import numpy as np

#: At most this many float32 numbers live in one SQLite store's cache (4 bytes each): 256 MB.
DEFAULT_CACHE_FLOATS = 64 * 1024 * 1024
_F16 = "<f2"  # float16, little-endian


def pack(vector: Sequence[float]) -> bytes:
    """The SQLite blob of a vector: little-endian float16."""
    import numpy as np

    return np.asarray(vector, dtype=np.float32).astype(_F16).tobytes()


def unpack(blob: bytes) -> np.ndarray:
    """A blob of `pack` as float32."""
    import numpy as np

    return np.frombuffer(blob, dtype=_F16).astype(np.float32)


def top(ids: np.ndarray, scores: np.ndarray, limit: int, excluded: Sequence[int]) -> list[tuple[int, float]]:
    """The `limit` best (id, cosine) pairs, best first (ties: the newer message, a higher id), outside `excluded`.
    `ids` ascend (a Matrix's), so the excluded are found by bisection: np.isin compared every id with each of
    them (0.5 ms of a search at 100k vectors)."""
    import numpy as np

    if excluded and len(ids):
        wanted = np.asarray(excluded, dtype=np.int64)
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        found = at[ids[at] == wanted]
        if len(found):
            ids, scores = np.delete(ids, found), np.delete(scores, found)
    if limit <= 0 or not len(ids):
        return []
    if limit < len(ids):
        # everything as good as the limit-th best, so a tie at the limit goes to the newer message, not to chance
        # (numpy's selection is twice as fast for a kth near the start: the negated scores)
        kth = np.partition(-scores, limit - 1)[limit - 1]
        best = -scores <= kth
        ids, scores = ids[best], scores[best]
    order = np.lexsort((-ids, -scores))[:limit]
    return [(int(ids[i]), float(scores[i])) for i in order]


@dataclass
class Matrix:
    """One person's vectors of one embedder: ids ascending, rows of `dim` float32."""

    ids: np.ndarray
    rows: np.ndarray
    max_id: int = 0
    #: MatrixCache.stamp() when it was last found to match the table
    stamp: tuple[int, int] | None = None

    @property
    def floats(self) -> int:
        return int(self.rows.size)


class MatrixCache(SizedLRU[tuple[int, str], Matrix]):
    """(user_id, embedder) -> Matrix, least recently used out first past `max_floats` (memory/lru.py): `held` is
    the floats the matrices hold."""

    def __init__(self, max_floats: int = DEFAULT_CACHE_FLOATS) -> None:
        super().__init__(max_floats)
        #: loads (the whole matrix read), extensions (new rows appended), checks (the table counted: unchanged),
        #: hits (nothing committed since the last check: not even counted)
        self.counters = {"loads": 0, "extensions": 0, "checks": 0, "hits": 0}
        #: PRAGMA data_version of the current transaction's snapshot (other connections' commits move it)
        self.version = 0
        #: bumped by each of the store's own write transactions that may change vectors
        self.generation = 0

    def size_of(self, value: Matrix) -> int:
        return value.floats

    def stamp(self) -> tuple[int, int]:
        return (self.version, self.generation)


def matrix_of(rows: Sequence[tuple[int, bytes]], dim: int) -> Matrix:
    """A Matrix of (message_id, blob) rows, ids ascending; rows of another size than `dim` floats are left out
    (one embedder name has one size: only a damaged row could differ)."""
    import numpy as np

    rows = [r for r in rows if len(r[1]) == 2 * dim]
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    data = np.frombuffer(b"".join(r[1] for r in rows), dtype=_F16).astype(np.float32).reshape(len(rows), dim)
    return Matrix(ids, data, int(ids[-1]) if len(ids) else 0)


def extend(matrix: Matrix, more: Matrix) -> Matrix:
    import numpy as np

    return Matrix(np.concatenate([matrix.ids, more.ids]), np.concatenate([matrix.rows, more.rows]),
                  max(matrix.max_id, more.max_id))


def matrix_cosines(matrix: Matrix, vector: Sequence[float], ids: Sequence[int]) -> dict[int, float]:
    """The cosine with `vector` of each of `ids` found in `matrix` (rows found by binary search over its ids)."""
    import numpy as np

    wanted = np.unique(np.asarray(ids, dtype=np.int64))
    if not len(wanted) or not len(matrix.ids):
        return {}
    at = np.minimum(np.searchsorted(matrix.ids, wanted), len(matrix.ids) - 1)
    found = matrix.ids[at] == wanted
    # the same einsum as the search over the whole matrix: a candidate's cosine is the one the search gives it
    scores = np.einsum("ij,j->i", matrix.rows[at[found]], np.asarray(vector, dtype=np.float32))
    return dict(zip(wanted[found].tolist(), scores.tolist(), strict=True))
