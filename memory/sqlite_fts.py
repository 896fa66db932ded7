"""The messages' FTS5 index written behind the turns, in batches, on the store's thread when it is idle.

Until migration 0046 a trigger indexed each message in the transaction that stored it. FTS5 flushes what a
transaction indexed as a segment of its own when it commits (a new row in its %_data and %_idx tables, its
structure and averages records rewritten), so every turn paid that twice, for one message each time: 480k of a
web turn's 4,835k instructions (bench/turn_instructions.py; the trigger dropped) and ~8 of its ~44 WAL frames.

Now `fts_progress.upto` is the newest message id the index holds, and the index holds exactly the messages up to
it: `messages_fts_source`, its external content, shows those only (so FTS5's 'integrity-check' and 'rebuild'
agree with it), and the delete and update triggers touch the index only for them. `index_tail` moves `upto` past
the next messages (at most `limit`) and indexes them as that view shows them (the one spelling of an indexed
message outside the triggers), in the caller's write transaction: message ids only grow (AUTOINCREMENT, one writer
at a time), so a message stored later is always in the tail. `catch_up` is the same in a transaction of its own.

Who calls it: the SQLite store's worker when its queue is empty and BATCH writes have come since (not between a
turn's two hops: HOLD), or once it has been idle IDLE_S (memory/dialect_sqlite.py); a bulk import, for its own rows,
in its batch's transaction; and the store's close, for what is left. Recall reads the tail too
(memory/sqlite_terms.py: the person's messages after `upto` join the FTS5 candidates, scored over their stored terms
like the rest), so a message is recalled from the moment it is stored, as before. What lags is only the term
statistics (fts5vocab's document frequencies), which recall caches for minutes anyway.
"""

from __future__ import annotations

import sqlite3

#: Writes after which an idle worker indexes the tail at once (one segment of ~16 messages, not 16 segments).
BATCH = 16
#: ... except right after a turn's first hop (its message stored, its model call next): the worker is idle then
#: only until the turn's second hop, which would wait for the batch (at one turn at a time, ~0.8 ms in 2 of 3
#: batches); the batch runs after that hop instead, or at once when HOLD times BATCH writes are waiting.
HOLD = 4
#: Seconds of an idle worker after which a smaller tail is indexed.
IDLE_S = 0.25
#: The most messages one idle run indexes (a tail left by another process may be long: the worker takes it in
#: slices, a turn waiting at most one slice).
SLICE = 512

#: The newest id the index holds.
UPTO = "SELECT upto FROM fts_progress"
#: The id of the `?2`-th message after `?1` (or of the last one, when fewer): where this run stops.
_END = "SELECT max(id) FROM (SELECT id FROM messages WHERE id > ?1 ORDER BY id LIMIT ?2)"
_MOVE = "UPDATE fts_progress SET upto = ?1"
#: The messages after ?1 up to the moved `upto` into the index, as the external content shows them (migration
#: 0046's view: the owner token, then each index term scoped to the owner, 'u<id>x<term>').
_INDEX = "INSERT INTO messages_fts(rowid, terms) SELECT id, terms FROM messages_fts_source WHERE id > ?1"


def index_tail(conn: sqlite3.Connection, limit: int | None = None) -> int:
    """Index the messages after `upto` (the first `limit` of them, or all) inside the caller's write transaction;
    how many it indexed (0: none was waiting; `limit`: more may be)."""
    (upto,) = conn.execute(UPTO).fetchone()
    (end,) = conn.execute(_END, (upto, -1 if limit is None else limit)).fetchone()
    if end is None:
        return 0
    conn.execute(_MOVE, (end,))
    return int(conn.execute(_INDEX, (upto,)).rowcount)


def catch_up(conn: sqlite3.Connection, limit: int | None = None) -> int:
    """`index_tail` in a write transaction of its own (rolled back on any error); how many it indexed."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        indexed = index_tail(conn, limit)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return indexed
