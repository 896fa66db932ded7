"""The conversation windows a SQLite store keeps between turns (issue 14: a turn's context read).

A turn's context holds the newest messages of its conversation (up to ContextQuery.recent_limit, 200 by default).
The turn before in that conversation read almost all of them: only its reply and the new message were written
since. Read again, those rows cost a turn most of its context statement and the building of ~200 StoredMessages
(the web API's turn with the echo model: about a fifth of the store thread's time, bench/web_load.py).

So the SQLite store keeps each conversation's newest messages (of the person: the window's `user_id` filter) as
it read them, and a turn reads only the rows written after the newest one it holds (`id > $n`: SQLite gives a new
row an id above every id stored). A window is kept only as long as nothing could have changed the rows it holds:

- another connection's change or deletion of a message (another process: `hilo forget`, a second daemon on the
  file) moves the count of migration 0045's triggers (`MESSAGE_CHANGES`, whichever connection makes them). The
  store reads `PRAGMA data_version` first in each transaction (its snapshot's), and when another connection
  committed since, reads the count in that snapshot; every window is read anew when it moved. Another connection's new
  rows (a second daemon's turns, `hilo import`, `hilo chat`) are found by the `id > $n` read: SQLite commits one
  writer at a time, and a new row's id is above every id stored. (Until 0045 any commit of another connection
  dropped every window: with two processes on one file, none outlived the other's next message; in bench/run,
  where the baselines write through connections of their own, 36% of hilo's turns found theirs kept.);
- this connection's own UPDATE (of a column a window holds) or DELETE of a message fires a TEMP trigger that calls
  `changed()`: forgetting, retention, linking, a media rewrite, a cascade from a deleted person or conversation;
- a window is filled and used only in read transactions, or in the SQLite ingest's write transaction after every
  write of it (dialect_sqlite.ingest_turn; a COMMIT that fails clears every window): no row it holds can be rolled
  back afterwards.

A new row in a kept window's conversation is found by the `id > $n` read whoever wrote it on this connection.
What the window adds to a turn is the same as the statement gives without it (tests/test_windows.py compares
them): the turn's filters (`at`, the current message, queued turns) apply to the held rows, and when they leave
fewer than the turn wants and the window does not hold the whole conversation, the turn reads with the filters
in SQL instead. Postgres keeps none: N processes share it, it has no data_version, and its ids come from a
sequence that concurrent transactions commit out of order (an `id > $n` read could miss a row for good);
pg_context.py reads the window in its one statement. One thread uses a cache (the store's worker), so it takes no lock.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter

from memory.lru import SizedLRU
from memory.store import StoredMessage

#: Rows a window holds beyond what a turn takes: the current message and queued turns are filtered out of it.
SLACK = 8
#: What every window together holds at most, least recently used out first, in bytes as `weight` estimates
#: them: ~130 windows of a full conversation (200 + SLACK) of short chat lines, fewer of long ones.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: A held message's objects besides its text: the StoredMessage, its timestamp, metadata and ids (bytes).
PER_MESSAGE = 512
#: The messages table's columns a window holds (the trigger on UPDATE watches these: reindex's terms and episode
#: updates leave windows as they are).
WATCHED_COLUMNS = ("id", "conversation_id", "user_id", "surface", "role", "content", "token_count", "external_id",
                   "created_at", "metadata", "reply_to")


#: The count of changes and deletions of messages (their WATCHED_COLUMNS), by any connection (migration 0045).
MESSAGE_CHANGES = "SELECT n FROM message_changes WHERE id = 1"


def triggers(function: str) -> list[str]:
    """The TEMP triggers (this connection's statements only) that call `function` when a message changes or goes."""
    return [
        f"CREATE TEMP TRIGGER IF NOT EXISTS hilo_window_update AFTER UPDATE OF {', '.join(WATCHED_COLUMNS)} "
        f"ON main.messages BEGIN SELECT {function}(); END",
        f"CREATE TEMP TRIGGER IF NOT EXISTS hilo_window_delete AFTER DELETE ON main.messages "
        f"BEGIN SELECT {function}(); END",
    ]


def weight(messages: Sequence[StoredMessage]) -> int:
    """What `messages` hold in memory, about (CPython keeps most chat text at one byte per character)."""
    return sum(len(m.content) + PER_MESSAGE for m in messages)


@dataclass(slots=True)
class Window:
    """A conversation's newest messages of one person, ids ascending; `complete` when it holds all of them."""

    messages: list[StoredMessage]
    complete: bool
    stamp: tuple[int, int]
    #: weight(messages)
    size: int
    #: no message held was created after this (the newest of those read; kept when older ones leave): None when empty
    latest: datetime | None = None

    @property
    def after(self) -> int:
        """The newest id held (-1: none): the next read asks for the rows after it."""
        return self.messages[-1].id if self.messages else -1


class WindowCache(SizedLRU[tuple[int, int], Window]):
    """(conversation_id, user_id) -> Window, least recently used out first past `max_bytes` (memory/lru.py)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(max_bytes)
        #: hits (a window extended by the rows after it), loads (read whole: none kept, or no longer current),
        #: fallbacks (the turn's filters left too few rows: read with them in SQL)
        self.counters = {"hits": 0, "loads": 0, "fallbacks": 0}
        #: MESSAGE_CHANGES as the store last read it (other connections' changes and deletions of messages move it)
        self.version = 0
        #: this connection's changes and deletions of messages (the TEMP triggers)
        self.changes = 0

    def size_of(self, value: Window) -> int:
        return value.size

    def changed(self) -> None:
        self.changes += 1

    def stamp(self) -> tuple[int, int]:
        return (self.version, self.changes)

    def get(self, key: tuple[int, int]) -> Window | None:
        """The window of `key` when nothing that could change its rows happened since it was read."""
        found = super().get(key)
        if found is not None and found.stamp != self.stamp():
            self.drop(key)
            return None
        return found

    def read(self, key: tuple[int, int], kept: Window | None, newest_first: Sequence[StoredMessage],
             cap: int) -> Window:
        """The window of `key` after a read of the rows after `kept.after` (all rows when None; newest first, `cap`
        at most), kept for the next turn."""
        new = list(reversed(newest_first))
        latest = max((m.created_at for m in new), default=None)
        if kept is None or len(new) >= cap:  # none kept, or rows may lie between it and what was read
            self.counters["loads"] += 1
            messages, complete, size = new, kept is None and len(new) < cap, weight(new)
        else:
            self.counters["hits"] += 1
            messages, complete, size = kept.messages + new, kept.complete, kept.size + weight(new)
            if kept.latest is not None and (latest is None or kept.latest > latest):
                latest = kept.latest
            if len(messages) > cap:
                size -= weight(messages[:-cap])
                messages, complete = messages[-cap:], False
        window = Window(messages, complete, self.stamp(), size, latest)
        self.put(key, window)
        return window


_ID = attrgetter("id")


def newest(window: Window, limit: int, at: datetime, current: int | None) -> list[StoredMessage] | None:
    """The window's newest `limit` messages a turn at `at` sees (newest first), as the statement's filters pick
    them: none after `at`, not the current message, no user message stored after it (a queued turn). None when
    the filters leave fewer than `limit` and older rows may exist (the caller reads with the filters in SQL)."""
    held = window.messages
    if window.latest is not None and window.latest <= at:
        # nothing held is after `at` (the usual turn): the filters left are on ids, which ascend. A bisection and
        # slices instead of a comparison of timestamps per message (py-spy of the web API at c=1: this walk over a
        # conversation's ~100 held messages was 2% of the store thread)
        cut = len(held) if current is None else bisect_left(held, current, key=_ID)
        picked = [m for m in reversed(held[cut:]) if m.id != current and m.role != "user"][:limit]
        if len(picked) < limit:
            picked += held[max(0, cut - (limit - len(picked))):cut][::-1]
        return picked if len(picked) == limit or window.complete else None
    picked = []
    for m in reversed(held):
        if m.created_at > at or (current is not None and (m.id == current or (m.role == "user" and m.id > current))):
            continue
        picked.append(m)
        if len(picked) == limit:
            return picked
    return picked if window.complete else None
