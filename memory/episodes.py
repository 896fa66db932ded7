"""Episodes: one conversation's run of messages with no gap over GAP, written once for both dialects.

An episode row (migration 0013) holds its span, its message and token counts and the index terms of all its
messages (memory/stems.py), which lexical recall scores as one document (memory/retrieval.py). A message gets
its episode when it is stored, in the same transaction:
- a live message or reply (`join`): one statement, an upsert on the conversation's latest episode if it ended
  at most GAP before, else a new one;
- a bulk import or the reindex of old rows (`assign`): runs found in Python, each inserted whole as a new
  episode or added to the conversation's latest one (`write_each`: a statement a run; Postgres' import writes
  all the runs of a batch in two statements, memory/pg_import.py); when an import skipped rows already stored,
  `refresh` recomputes the touched episodes from their messages (so those rows count once).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from memory.rows import Db, as_dt

#: The longest silence inside one episode.
GAP = timedelta(hours=1)
#: The most messages one episode holds: a longer run starts a new episode (recall scores an episode as one document,
#: and each message added rewrites the episode's terms, then an FTS5 row (SQLite until migration 0044) or the tsvector
#: (Postgres): a day of chatter as one episode made an import slow down as it went, 7,100 lines/s at 50,000 lines
#: and 3,600 at 1,000,000).
MAX_MESSAGES = 64

#: The conversation's latest episode that ended since a moment and has room: {conversation} and {since} are spelt in.
LATEST_OPEN = ("(SELECT e.id FROM episodes e WHERE e.conversation_id = {conversation} AND e.ended_at >= {since} "
               f"AND e.message_count < {MAX_MESSAGES} ORDER BY e.ended_at DESC, e.id DESC LIMIT 1)")
#: A new episode's id when there is no open one (SQLite spells the nextval NULL: the AUTOINCREMENT key).
NEXT_ID = "nextval(pg_get_serial_sequence('episodes', 'id'))"
#: What merging one message into its episode row sets, but its start.
_MERGED = (
    "ended_at = greatest(episodes.ended_at, excluded.ended_at), "
    "message_count = episodes.message_count + 1, token_count = episodes.token_count + excluded.token_count, "
    "terms = CASE WHEN excluded.terms = '' THEN episodes.terms WHEN episodes.terms = '' THEN excluded.terms "
    "ELSE episodes.terms || ' ' || excluded.terms END"
)
#: An episode row inserted for one message, merged into the row of the same id when there is one: Postgres's turn
#: statements (memory/pg_turn.py, one round trip each), where setting the start costs no index write of its own
#: (the changed end makes the update a new row version, every index written anyway).
MERGE = f"ON CONFLICT (id) DO UPDATE SET started_at = least(episodes.started_at, excluded.started_at), {_MERGED}"
#: $1 conversation, $2 user, $3 surface, $4 the message's time minus GAP, $5 its time, $6 tokens, $7 terms.
#: The id is the conversation's latest episode that ended since $4 (its row updated), else a new one; and the
#: episode's start. The merge leaves the start alone: a message is almost never older than its episode's start
#: (one delivered late), and an UPDATE that sets a column rewrites the indexes that hold it (SQLite does not
#: compare the values: episodes_user_started, 2 of a web turn's 35 WAL pages). `join` moves it back when it is.
JOIN = (
    "INSERT INTO episodes(id, user_id, conversation_id, surface, started_at, ended_at, message_count, token_count, "
    f"terms) VALUES (coalesce({LATEST_OPEN.format(conversation='$1', since='$4')}, {NEXT_ID}), "
    f"$2, $1, $3, $5, $5, 1, $6, $7) ON CONFLICT (id) DO UPDATE SET {_MERGED} RETURNING id, started_at"
)
#: $1 the episode, $2 the time of a message older than its start.
_EARLIER = "UPDATE episodes SET started_at = $2 WHERE id = $1 AND started_at > $2"
_LATEST = ("SELECT e.conversation_id, e.id, e.ended_at, e.message_count FROM episodes e "
           "WHERE e.id IN (SELECT max(x.id) FROM episodes x WHERE x.conversation_id = ANY($1::bigint[]) "
           "GROUP BY x.conversation_id)")
_NEW = ("INSERT INTO episodes(user_id, conversation_id, surface, started_at, ended_at, message_count, token_count, "
        "terms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id")
#: A run added to an existing episode: the SET list, over {first}, {last}, {count}, {tokens} and {terms}.
ADDED = ("started_at = least(started_at, {first}), ended_at = greatest(ended_at, {last}), "
         "message_count = message_count + {count}, token_count = token_count + {tokens}, "
         "terms = CASE WHEN {terms} = '' THEN terms WHEN terms = '' THEN {terms} ELSE terms || ' ' || {terms} END")
#: $1 episode, $2 first, $3 last, $4 messages, $5 tokens, $6 terms: a run added to an existing episode.
_ADD = (f"UPDATE episodes SET {ADDED.format(first='$2', last='$3', count='$4', tokens='$5', terms='$6')} "
        "WHERE id = $1")
_REFRESH = (
    "UPDATE episodes SET message_count = s.n, token_count = s.tokens, started_at = s.first, ended_at = s.last, "
    "terms = s.terms FROM (SELECT m.episode_id, count(*) AS n, sum(m.token_count) AS tokens, "
    "min(m.created_at) AS first, max(m.created_at) AS last, "
    "coalesce(string_agg(nullif(m.terms, ''), ' '), '') AS terms "
    "FROM messages m WHERE m.episode_id = ANY($1::bigint[]) GROUP BY m.episode_id) s WHERE episodes.id = s.episode_id"
)
_ZERO = "UPDATE episodes SET message_count = 0 WHERE id = ANY($1::bigint[])"
_EMPTY = "DELETE FROM episodes WHERE id = ANY($1::bigint[]) AND message_count = 0"


async def join(db: Db, user_id: int, conversation_id: int, surface: str, at: datetime, tokens: int,
               terms: str) -> int:
    """The episode of a message stored now at `at` (one statement, see JOIN; two for a message older than the
    start of the episode it joins)."""
    episode, started = await db.one(JOIN, conversation_id, user_id, surface, db.ts(at - GAP), db.ts(at), tokens,
                                    terms)
    if as_dt(started) > at:
        await db.run(_EARLIER, episode, db.ts(at))
    return int(episode)


@dataclass(frozen=True, slots=True)
class Placed:
    """A message to place in an episode: its conversation, owner, surface, time, tokens and index terms."""

    conversation_id: int
    user_id: int
    surface: str
    at: datetime
    tokens: int = 0
    terms: str = ""


@dataclass(slots=True)
class Run:
    """Messages of one conversation that go into one episode: an existing one it continues, or a new one."""

    episode_id: int | None  # an existing episode this run continues, else None (a new one)
    items: list[Placed]
    room: int = MAX_MESSAGES  # how many messages it may take

    def summary(self) -> tuple[datetime, datetime, int, int, str]:
        """(first, last, messages, tokens, terms) of the run: what its episode gets."""
        return (min(i.at for i in self.items), max(i.at for i in self.items), len(self.items),
                sum(i.tokens for i in self.items), " ".join(i.terms for i in self.items if i.terms))


#: Writes a batch's runs (new ones inserted, the others added to their episode): the episode of each run, in order.
RunWriter = Callable[[Db, list[Run]], Awaitable[list[int]]]


async def write_each(db: Db, runs: list[Run]) -> list[int]:
    """RunWriter, one statement a run (any dialect; Postgres' import writes them all in two: memory/pg_import.py)."""
    ids: list[int] = []
    for run in runs:
        first, last, count, tokens, terms = run.summary()
        if run.episode_id is None:
            head = run.items[0]
            ids.append(int(await db.value(_NEW, head.user_id, head.conversation_id, head.surface, db.ts(first),
                                          db.ts(last), count, tokens, terms)))
        else:
            await db.run(_ADD, run.episode_id, db.ts(first), db.ts(last), count, tokens, terms)
            ids.append(run.episode_id)
    return ids


async def assign(db: Db, items: Sequence[Placed], write: RunWriter = write_each) -> tuple[list[int], set[int]]:
    """(the episode of each item, in order; every episode touched). A run continuing a conversation's latest
    episode is added to it; every other run is a new episode, inserted whole (by `write`). Counts assume every
    item is stored: when some are not (an import's rows already stored), call `refresh` on the touched episodes."""
    conversations = sorted({i.conversation_id for i in items})
    latest: dict[int, tuple[int, datetime, int]] = {}
    if conversations:
        for conv, eid, ended, count in await db.all(_LATEST, db.ids(conversations)):
            latest[int(conv)] = (int(eid), as_dt(ended), int(count))
    order = sorted(range(len(items)), key=lambda k: (items[k].conversation_id, items[k].at, k))
    runs: list[Run] = []
    run_of: list[int] = [0] * len(items)
    current: dict[int, tuple[int, datetime]] = {}  # conversation -> (its run's index, the run's end)
    for k in order:
        item = items[k]
        open_run = current.get(item.conversation_id)
        run = runs[open_run[0]] if open_run is not None else None
        if open_run is not None and run is not None and item.at - open_run[1] <= GAP and len(run.items) < run.room:
            index = open_run[0]
        else:
            prior = latest.pop(item.conversation_id, None) if open_run is None else None
            joins = (prior is not None and prior[1] - GAP <= item.at <= prior[1] + GAP
                     and prior[2] < MAX_MESSAGES)
            if joins and prior is not None:
                runs.append(Run(prior[0], [], MAX_MESSAGES - prior[2]))
            else:
                runs.append(Run(None, []))
            index = len(runs) - 1
        runs[index].items.append(item)
        run_of[k] = index
        end = max(open_run[1], item.at) if open_run is not None and open_run[0] == index else item.at
        current[item.conversation_id] = (index, end)
    ids = await write(db, runs)
    return [ids[run_of[k]] for k in range(len(items))], set(ids)


async def refresh(db: Db, episode_ids: set[int]) -> None:
    """Recompute the episodes' counts, span and terms from their messages; drop those left empty."""
    if episode_ids:
        ids: Any = db.ids(sorted(episode_ids))
        await db.run(_ZERO, ids)  # what no message of theirs holds any more stays 0, and goes
        await db.run(_REFRESH, ids)
        await db.run(_EMPTY, ids)
