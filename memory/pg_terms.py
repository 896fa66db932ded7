"""Postgres recall's BM25, the constants and helpers that outlive its SQL.

Postgres scores recall's candidates with FTS5's BM25 (k1 1.2, b 0.75; each term's frequency in a row taken as 1),
so that it ranks as SQLite's FTS5 does; ts_rank knows no inverse document frequency. The statements themselves
are migration 0032's functions (`hilo_term_weights`: each term's idf from the planner's statistics,
pg_stats.most_common_elems, or a capped count before any ANALYZE; `hilo_recall_hits`: the candidates, rare terms
through the GIN index and common ones among the person's newest rows, scored), called by the one-statement context
read (memory/pg_context.py) and by PgDb.hits: each call is planned with its real values. What stays here: the
constants and `idf` (SQLite's recall uses the same formula: memory/sqlite_terms.py), how long the mean row length
the functions read is trusted, when an import should ANALYZE, and the term statistics the process caches
(`STATS`, `TermStats`, `cached`): since migration 0034 the caller hands hilo_recall_hits each term's idf and rare
flag, so that pg_stats is read once per DF_TTL_S instead of twice per question.
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

K1, B = 1.2, 0.75
#: How long a term's frequency (and the mean row length) is trusted, seconds: it changes slowly, and a stale
#: one only shifts a weight.
DF_TTL_S = 600.0


def idf(df: float, total: float) -> float:
    """FTS5's inverse document frequency (its floor when `df` is most of the rows, or more than there are)."""
    ratio = (total - df + 0.5) / (df + 0.5)
    return max(1e-6, math.log(ratio)) if total > 0 and ratio > 0 else 1e-6


#: Both tables' term statistics as hilo_term_weights reads them with every question it is not handed weights for:
#: the planner's row count, whether ANALYZE has run, the `search` column's most common elements and their
#: frequencies (pg_stats). Read once per DF_TTL_S per process (`cached`), in place of twice per question.
STATS = (
    "SELECT c.relname::text, greatest(c.reltuples, 0)::float8, st.attname IS NOT NULL, "
    "st.most_common_elems::text::text[], st.most_common_elem_freqs "
    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = c.relname AND st.attname = 'search' "
    "WHERE c.oid IN ('messages'::regclass, 'episodes'::regclass)"
)
TABLES = ("messages", "episodes")
#: 0.005 as a `real`: hilo_term_weights' least(real, 0.005) is a real (the floor of an unlisted word)
_FLOOR_SHARE = struct.unpack("f", struct.pack("f", 0.005))[0]


@dataclass(frozen=True, slots=True)
class TermStats:
    """One table's term statistics after ANALYZE: its row count, each listed word's share of the rows, and the
    document frequency of a word the statistics do not list."""

    total: float
    shares: dict[str, float]
    floor_df: float

    @classmethod
    def of(cls, total: float, elems: Sequence[str] | None, freqs: Sequence[float] | None) -> TermStats:
        shares: dict[str, float] = {}
        for term, share in zip(elems or (), freqs or (), strict=False):
            shares.setdefault(term, share)  # array_position: the first one
        # coalesce(freqs[cardinality(elems) + 1], 0): the frequency after the listed ones (their minimum)
        after = freqs[len(elems)] if elems is not None and freqs is not None and len(freqs) > len(elems) else None
        return cls(total, shares, min(after if after is not None else 0.0, _FLOOR_SHARE) * total)

    def weights(self, terms: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Each term's idf and whether it is rare, as hilo_term_weights computes them from the same statistics
        (the same float operations in the same order: equal to the last bit, tests/test_pg_term_stats.py)."""
        idfs, rare = [], []
        for t in terms:
            share = self.shares.get(t)
            df = max(1.0, share * self.total if share is not None else self.floor_df)
            rare.append(share is None or df <= 500)
            idfs.append(idf(df, self.total))
        return idfs, rare


async def cached(db: Any) -> dict[str, TermStats | None]:
    """Each table's statistics (None: no ANALYZE yet, hilo_term_weights counts the matches itself), read with STATS
    when the process has none younger than DF_TTL_S: one statement every ten minutes instead of two pg_stats reads
    inside every question's hilo_recall_hits. An ANALYZE since (autovacuum, an import) is seen when they expire:
    until then a weight is as stale as the planner's own statistics were."""
    cache: dict[str, tuple[TermStats | None, float]] = db.term_stats
    now = time.monotonic()
    if all((hit := cache.get(t)) is not None and hit[1] > now for t in TABLES):
        return {t: cache[t][0] for t in TABLES}
    expiry = now + DF_TTL_S
    for name, total, analyzed, elems, freqs in await db.all(STATS):
        cache[name] = (TermStats.of(total, elems, freqs) if analyzed else None, expiry)
    return {t: cache[t][0] if t in cache else None for t in TABLES}


async def stale(db: Any, imported: int) -> bool:
    """Whether the statistics of messages need an ANALYZE after `imported` new messages: there are none yet, or
    the imports doubled the table since the planner last counted it (a big import: a few ANALYZEs, the last one
    over at least half of what it brought)."""
    row = await db.one(
        "SELECT greatest(c.reltuples, 0), EXISTS (SELECT 1 FROM pg_stats st JOIN pg_namespace n "
        "ON n.nspname = st.schemaname WHERE n.oid = c.relnamespace AND st.tablename = 'messages' "
        "AND st.attname = 'search') FROM pg_class c WHERE c.oid = 'messages'::regclass")
    return not row[1] or imported >= row[0]

