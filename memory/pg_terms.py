"""Postgres recall's BM25, the constants and helpers that outlive its SQL.

Postgres scores recall's candidates with FTS5's BM25 (k1 1.2, b 0.75; each term's frequency in a row taken as 1),
so that it ranks as SQLite's FTS5 does; ts_rank knows no inverse document frequency. The statements themselves
are migration 0032's functions (`hilo_term_weights`: each term's idf from the planner's statistics,
pg_stats.most_common_elems, or a capped count before any ANALYZE; `hilo_recall_hits`: the candidates, rare terms
through the GIN index and common ones among the person's newest rows, scored), called by the one-statement context
read (memory/pg_context.py) and by PgDb.hits: each call is planned with its real values. What stays here: the
constants and `idf` (SQLite's recall uses the same formula: memory/sqlite_terms.py), how long the mean row length
the functions read is trusted, and when an import should ANALYZE.
"""

from __future__ import annotations

import math
from typing import Any

K1, B = 1.2, 0.75
#: How long a term's frequency (and the mean row length) is trusted, seconds: it changes slowly, and a stale
#: one only shifts a weight.
DF_TTL_S = 600.0


def idf(df: float, total: float) -> float:
    """FTS5's inverse document frequency (its floor when `df` is most of the rows, or more than there are)."""
    ratio = (total - df + 0.5) / (df + 0.5)
    return max(1e-6, math.log(ratio)) if total > 0 and ratio > 0 else 1e-6


async def stale(db: Any, imported: int) -> bool:
    """Whether the statistics of messages need an ANALYZE after `imported` new messages: there are none yet, or
    the imports doubled the table since the planner last counted it (a big import: a few ANALYZEs, the last one
    over at least half of what it brought)."""
    row = await db.one(
        "SELECT greatest(c.reltuples, 0), EXISTS (SELECT 1 FROM pg_stats st JOIN pg_namespace n "
        "ON n.nspname = st.schemaname WHERE n.oid = c.relnamespace AND st.tablename = 'messages' "
        "AND st.attname = 'search') FROM pg_class c WHERE c.oid = 'messages'::regclass")
    return not row[1] or imported >= row[0]

