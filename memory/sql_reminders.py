"""Reminders, written once (migration 0040): what the `remind` tool schedules (bot/tools/builtin.py), listed and
cancelled by the person, and delivered exactly once by the `reminders` job (bot/reminders.py).

Delivery is one transaction: the reminder leaves 'pending' (a conditional UPDATE: of two processes, or of a run
repeated after a crash, one wins), it becomes hilo's message in the person's conversation on the chosen surface
(memory/sql_linking.post_notice, as a notice is), and that message's outbox parts are queued. So a crash before
the commit leaves it pending (the next run delivers it), and after the commit its parts are in the outbox (which
sends them after a restart). Every statement names the person's user_id: nobody reaches another's reminders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kernel.types import Outgoing, StoredMessage
from memory import sql_linking
from memory.rows import MSG_COLS, Db, as_dt, to_message

#: The metadata key of the message that delivered a reminder (its id).
KEY = "reminder"
_COLS = "id, user_id, text, due_at, status, surface, error, created_at"


@dataclass(frozen=True, slots=True)
class Reminder:
    """One reminder: `short_id` ("r12") is how the model and the person name it."""

    id: int
    user_id: int
    text: str
    due_at: datetime
    status: str = "pending"
    surface: str | None = None
    error: str | None = None
    created_at: datetime | None = None

    @property
    def short_id(self) -> str:
        return f"r{self.id}"


def _reminder(row: Sequence[Any]) -> Reminder:
    return Reminder(int(row[0]), int(row[1]), str(row[2]), as_dt(row[3]), str(row[4]), row[5], row[6],
                    as_dt(row[7]) if row[7] is not None else None)


async def add(db: Db, user_id: int, message_id: int | None, text: str, due_at: datetime, limit: int,
              ) -> Reminder | None:
    """A pending reminder of the person's; None when they have `limit` pending already."""
    pending = await db.value("SELECT count(*) FROM reminders WHERE user_id = $1 AND status = 'pending'", user_id)
    if int(pending) >= limit:
        return None
    at = db.ts(db.clock())
    if message_id is not None:  # the turn's message, if it is still the person's (else no link)
        message_id = await db.value("SELECT id FROM messages WHERE id = $1 AND user_id = $2", message_id, user_id)
    row = await db.one(f"INSERT INTO reminders(user_id, message_id, text, due_at, status, created_at, updated_at) "
                       f"VALUES ($1, $2, $3, $4, 'pending', $5, $5) RETURNING {_COLS}",
                       user_id, message_id, text, db.ts(due_at), at)
    assert row is not None
    return _reminder(row)


async def pending(db: Db, user_id: int) -> list[Reminder]:
    """The person's pending reminders, soonest first."""
    rows = await db.all(f"SELECT {_COLS} FROM reminders WHERE user_id = $1 AND status = 'pending' "
                        "ORDER BY due_at, id", user_id)
    return [_reminder(r) for r in rows]


async def cancel(db: Db, user_id: int, reminder_id: int) -> Reminder | None:
    """The person's pending reminder, cancelled; None when they have no such pending one."""
    row = await db.one(f"UPDATE reminders SET status = 'cancelled', updated_at = $3 "
                       f"WHERE id = $1 AND user_id = $2 AND status = 'pending' RETURNING {_COLS}",
                       reminder_id, user_id, db.ts(db.clock()))
    return None if row is None else _reminder(row)


async def due(db: Db, limit: int) -> list[Reminder]:
    """Everyone's pending reminders whose time came, oldest first."""
    rows = await db.all(f"SELECT {_COLS} FROM reminders WHERE status = 'pending' AND due_at <= $1 "
                        "ORDER BY due_at, id LIMIT $2", db.ts(db.clock()), limit)
    return [_reminder(r) for r in rows]


#: How many of the person's latest messages on a surface are looked through for one from a private chat.
PRIVATE_LOOKBACK = 20


async def last_messages(db: Db, user_id: int, surfaces: Sequence[str]) -> list[StoredMessage]:
    """The person's latest message from a private chat on each of `surfaces` (where they were last active, and
    how to reach them: its reply route; never a group's, where others would read what is said), latest first."""
    found = []
    for surface in surfaces:
        rows = await db.all(f"SELECT {MSG_COLS} FROM messages m WHERE m.user_id = $1 AND m.surface = $2 "
                            "AND m.role = 'user' ORDER BY m.created_at DESC, m.id DESC LIMIT $3", user_id, surface,
                            PRIVATE_LOOKBACK)
        private = next((m for m in map(to_message, rows) if m.metadata.get("audience") != "group"), None)
        if private is not None:
            found.append(private)
    return sorted(found, key=lambda m: (m.created_at, m.id), reverse=True)


async def deliver(db: Db, reminder: Reminder, surface: str, ref: str | None, text: str, token_count: int,
                  outgoing: Outgoing | None) -> StoredMessage | None:
    """The reminder delivered on `surface`: marked sent, stored as hilo's message there (`ref`: the web
    conversation; metadata {"reminder": id}) with its outbox parts. None when it was not pending any more (another
    run delivered or the person cancelled it): nothing written."""
    at = db.ts(db.clock())
    if not await db.run("UPDATE reminders SET status = 'sent', surface = $3, updated_at = $4 "
                        "WHERE id = $1 AND user_id = $2 AND status = 'pending'", reminder.id, reminder.user_id,
                        surface, at):
        return None
    stored = await sql_linking.post_notice(db, reminder.user_id, surface, ref, text, token_count, outgoing,
                                           metadata={KEY: reminder.id})
    await db.run("UPDATE reminders SET delivered_id = $3 WHERE id = $1 AND user_id = $2", reminder.id,
                 reminder.user_id, stored.id)
    return stored


async def fail(db: Db, reminder: Reminder, error: str) -> bool:
    """The reminder could not be delivered anywhere (`error`: why, for the operator; never its text)."""
    return bool(await db.run("UPDATE reminders SET status = 'failed', error = $3, updated_at = $4 "
                             "WHERE id = $1 AND user_id = $2 AND status = 'pending'", reminder.id, reminder.user_id,
                             error[:500], db.ts(db.clock())))
