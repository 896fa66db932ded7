"""Watermarks of automatic memory extraction (bot/extract_job.py runs it): who is due, their next batch, and the
answer kept together with the watermark's advance, in one transaction.

One row of `extraction_marks` (migration 0017) per person:
- due: new messages are counted first. The scan reads the people's messages (role 'user') above the highest
  `seen_id` of all rows, grouped by person (one statement; the first run after an upgrade reads the whole
  history once), and adds each person's count to their `pending`. A message whose id a concurrent transaction
  committed below a scan already made is not counted: `pending` is a trigger, never what is sent.
  Then the people with `pending` >= `every`, not waiting for a retry, those extracted longest ago first.
- batch: the person's own messages (role 'user') above `done_id`, oldest first: exactly what was not sent yet.
- keep: the memories and the new `done_id` in one transaction: a crash before it sends the same batch again, a
  crash after it sends the next one. `pending` drops by the batch's size, failures are cleared.
- fail: the batch stays; the person waits until `retry_at`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory import sql_memories
from memory.rows import MSG_COLS, Db, Rollback, as_dt, to_message
from memory.store import Memory, MemoryAdded, MemoryDraft, StoredMessage


@dataclass(frozen=True, slots=True)
class ExtractionDue:
    """A person whose new messages are due for extraction: after `done_id`; `failures` in a row so far."""

    user_id: int
    done_id: int
    failures: int


@dataclass(frozen=True, slots=True)
class ExtractionMark:
    """A person's row, for tests and `inspect`-like read-outs."""

    user_id: int
    seen_id: int
    pending: int
    done_id: int
    failures: int
    retry_at: datetime | None
    extracted_at: datetime | None


#: "Every counted message" for `keep`.
_ALL = 2**62
_CURSOR = "SELECT coalesce(max(seen_id), 0) FROM extraction_marks"
_SCAN = ("SELECT user_id, count(*), max(id) FROM messages WHERE id > $1 AND role = 'user' GROUP BY user_id")
_COUNT = ("INSERT INTO extraction_marks(user_id, seen_id, pending) VALUES ($1, $2, $3) "
          "ON CONFLICT (user_id) DO UPDATE SET seen_id = excluded.seen_id, "
          "pending = extraction_marks.pending + excluded.pending")
_DUE = ("SELECT user_id, done_id, failures FROM extraction_marks "
        "WHERE pending >= $1 AND (retry_at IS NULL OR retry_at <= $2) "
        "ORDER BY extracted_at IS NOT NULL, extracted_at, user_id LIMIT $3")
_BATCH = (f"SELECT {MSG_COLS} FROM messages m WHERE m.user_id = $1 AND m.role = 'user' AND m.id > $2 "
          "ORDER BY m.id LIMIT $3")
_KEEP = ("UPDATE extraction_marks SET done_id = $2, failures = 0, retry_at = NULL, extracted_at = $4, "
         "pending = CASE WHEN pending > $3 THEN pending - $3 ELSE 0 END WHERE user_id = $1 AND done_id <= $2")
_FAIL = "UPDATE extraction_marks SET failures = failures + 1, retry_at = $2 WHERE user_id = $1"
_MARKS = ("SELECT user_id, seen_id, pending, done_id, failures, retry_at, extracted_at FROM extraction_marks "
          "ORDER BY user_id")


async def due(db: Db, every: int, limit: int) -> list[ExtractionDue]:
    """Count the messages stored since the last scan, then the people due (see the module docstring)."""
    cursor = int(await db.value(_CURSOR))
    counted = await db.all(_SCAN, cursor)
    if counted:
        await db.many(_COUNT, [(r[0], r[2], r[1]) for r in counted])
    rows = await db.all(_DUE, every, db.ts(db.clock()), limit)
    return [ExtractionDue(int(r[0]), int(r[1]), int(r[2])) for r in rows]


async def batch(db: Db, user_id: int, after_id: int, limit: int,
                remembered: int) -> tuple[list[StoredMessage], list[Memory]]:
    """The person's messages after `after_id`, oldest first, at most `limit`; and their newest `remembered`
    current memories (what the extractor is shown as known already)."""
    messages = [to_message(r) for r in await db.all(_BATCH, user_id, after_id, limit)]
    return messages, (await sql_memories.listed(db, user_id, False, remembered) if messages else [])


async def keep_memories(db: Db, user_id: int, done_id: int, taken: int | None,
                        drafts: Sequence[MemoryDraft]) -> list[MemoryAdded]:
    """The extracted memories added (sql_memories.add: merge, supersede) and the watermark advanced, together;
    nothing written when the watermark is past `done_id` already."""
    added = [await sql_memories.add(db, user_id, draft, None, "") for draft in drafts]
    if not await keep(db, user_id, done_id, taken):
        raise Rollback([])
    return added


async def keep(db: Db, user_id: int, done_id: int, taken: int | None) -> bool:
    """Advance the watermark to `done_id`, `taken` messages sent (None: all counted ones are gone, `pending`
    drops to 0); False when it is past `done_id` already (another run kept a later batch: the caller's writes
    must roll back)."""
    return bool(await db.run(_KEEP, user_id, done_id, _ALL if taken is None else taken, db.ts(db.clock())))


async def fail(db: Db, user_id: int, retry_at: datetime) -> None:
    """One more failure for the person's batch; not again before `retry_at`."""
    await db.run(_FAIL, user_id, db.ts(retry_at))


def _when(value: Any) -> datetime | None:
    return None if value is None else as_dt(value)


async def marks(db: Db) -> list[ExtractionMark]:
    """Every person's row, by user id."""
    return [ExtractionMark(int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), _when(r[5]), _when(r[6]))
            for r in await db.all(_MARKS)]
