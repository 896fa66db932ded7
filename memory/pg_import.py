"""The bulk import's writes on Postgres, set-based (`WRITES`, for memory/sql_import.py's transaction).

One import batch (memory/importer.py: 10,000 lines) touches about 1,400 conversations and as many episodes: a
statement each was a round trip each, 28,000 for 100,000 lines, 10 of the 25 seconds (cProfile and the time of
each statement, bench/import_bench.py's corpus). Here each kind is written with one statement over arrays
(unnest): the people (a look-up, an insert of the new ones), the conversations (one upsert per kind: singletons,
by key), the new episodes (one insert, their ids drawn from the sequence in the same statement) and the runs that
continue an episode (one update). The rows are those memory/sql_import.py's ONE_BY_ONE writes, statement for
statement (the same upserts, `episodes.ADDED`); rows are locked in key order, as the one-by-one loop did.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memory import episodes
from memory.rows import Db
from memory.sql_import import ConversationKey, ImportWrites, Spans
from memory.sql_turns import ON_REF, ON_SINGLETON

_USERS = "SELECT handle, id FROM users WHERE handle = ANY($1::text[])"
_NEW_USERS = ("INSERT INTO users(handle, created_at) SELECT * FROM unnest($1::text[], $2::timestamptz[]) "
              "ON CONFLICT (handle) DO NOTHING RETURNING handle, id")
_SINGLETONS = (
    "INSERT INTO conversations(user_id, surface, singleton, created_at, updated_at) "
    "SELECT c.u, c.s, true, c.f, c.l FROM unnest($1::bigint[], $2::text[], $3::timestamptz[], $4::timestamptz[]) "
    f"AS c(u, s, f, l) ORDER BY c.u, c.s {ON_SINGLETON} RETURNING id, user_id, surface, NULL"
)
_BY_REF = (
    "INSERT INTO conversations(user_id, surface, singleton, title, external_ref, created_at, updated_at) "
    "SELECT c.u, c.s, false, c.r, c.r, c.f, c.l FROM unnest($1::bigint[], $2::text[], $3::timestamptz[], "
    f"$4::timestamptz[], $5::text[]) AS c(u, s, f, l, r) ORDER BY c.u, c.s, c.r {ON_REF} "
    "RETURNING id, user_id, surface, external_ref"
)
_EPISODE_COLS = "user_id, conversation_id, surface, started_at, ended_at, message_count, token_count, terms"
#: New episodes, their ids in the order of the arrays (drawn in a CTE that the insert and the answer both read).
_NEW_RUNS = (
    f"WITH runs AS MATERIALIZED (SELECT {episodes.NEXT_ID} AS id, r.* FROM unnest($1::bigint[], $2::bigint[], "
    "$3::text[], $4::timestamptz[], $5::timestamptz[], $6::int[], $7::int[], $8::text[]) "
    f"WITH ORDINALITY AS r({_EPISODE_COLS}, n)), "
    f"written AS (INSERT INTO episodes(id, {_EPISODE_COLS}) SELECT id, {_EPISODE_COLS} FROM runs) "
    "SELECT id FROM runs ORDER BY n"
)
_ADD_RUNS = (
    "UPDATE episodes SET "
    f"{episodes.ADDED.format(first='a.first_at', last='a.last_at', count='a.n', tokens='a.tokens', terms='a.words')} "
    "FROM unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[], $4::int[], $5::int[], $6::text[]) "
    "AS a(id, first_at, last_at, n, tokens, words) WHERE episodes.id = a.id"
)


def columns(rows: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """Rows as the columns that `unnest($1::type[], $2::type[], ...)` takes, one array parameter each."""
    return [list(column) for column in zip(*rows, strict=True)]


async def users(db: Db, first: dict[str, Any]) -> dict[str, int]:
    ids = {str(handle): int(uid) for handle, uid in await db.all(_USERS, list(first))}
    new = [handle for handle in first if handle not in ids]  # in the order first seen, as users_each makes them
    if new:
        ids.update((str(h), int(uid)) for h, uid in await db.all(_NEW_USERS, new, [first[h] for h in new]))
        if len(ids) < len(first):  # another transaction created some meanwhile (READ COMMITTED: a new statement sees)
            ids.update((str(h), int(uid)) for h, uid in await db.all(_USERS, [h for h in new if h not in ids]))
    return ids


async def conversations(db: Db, spans: Spans) -> dict[ConversationKey, int]:
    by_row = {(user_id, key[1], key[2]): key for key, (user_id, _, _) in spans.items()}
    singles = sorted((u, s, *spans[key][1:]) for (u, s, ref), key in by_row.items() if ref is None)
    named = sorted((u, s, *spans[key][1:], ref) for (u, s, ref), key in by_row.items() if ref is not None)
    found: dict[ConversationKey, int] = {}
    for sql, rows in ((_SINGLETONS, singles), (_BY_REF, named)):
        if rows:
            for cid, user_id, surface, ref in await db.all(sql, *columns(rows)):
                found[by_row[(int(user_id), str(surface), ref)]] = int(cid)
    return found


async def write_runs(db: Db, runs: list[episodes.Run]) -> list[int]:
    """episodes.RunWriter in two statements: the new episodes, then the runs added to existing ones."""
    ids = [run.episode_id or 0 for run in runs]
    new = [k for k, run in enumerate(runs) if run.episode_id is None]
    if new:
        rows = []
        for k in new:
            head, (first, last, count, tokens, terms) = runs[k].items[0], runs[k].summary()
            rows.append((head.user_id, head.conversation_id, head.surface, db.ts(first), db.ts(last), count, tokens,
                         terms))
        for k, (eid,) in zip(new, await db.all(_NEW_RUNS, *columns(rows)), strict=True):
            ids[k] = int(eid)
    added = []
    for run in runs:
        if run.episode_id is not None:
            first, last, count, tokens, terms = run.summary()
            added.append((run.episode_id, db.ts(first), db.ts(last), count, tokens, terms))
    if added:
        await db.run(_ADD_RUNS, *columns(sorted(added)))
    return ids


WRITES = ImportWrites(users, conversations, write_runs)
