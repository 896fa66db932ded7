"""The record of erasures, kept outside the database: a restored backup does not bring forgotten people (or
memories) back.

A backup holds everyone it held when it was taken; restored, it brings back every person forgotten since (a
`/forget` or `hilo forget` after the backup). So each erasure is noted, before anything is deleted, as one line of
HILO_DATA_DIR/erasures.jsonl (beside the SQLite file by default, ./data with Postgres; 0600, fsynced):

    {"at": "2026-12-07T22:40:00.123456Z", "ids": ["handle:3f2a...", "telegram:9b1c...", "web:07de..."]}

`ids` are digests of the person's handle and of each identity (kernel/digests.py `erased`), not the identifiers:
the file names nobody in the clear. Each start of `hilo serve` reads it before any surface starts and forgets
again every person whose handle or identity it lists and who existed by then (created at or before that line's
`at`): a restore's resurrected people go, with their media files. Someone who came back after their erasure has a
handle and identities created after it, so what they said since stays (a backup taken since holds only that).
One memory forgotten (`forget_memory` below: /forget m12, the `forget` tool, the widget, the admin page, `hilo
forget --memory`) is a line of its own, `{"at": ..., "memory": [user id, memory id]}` (numbers that name nobody),
forgotten again when that memory was stored by then: after a restore the ids start over where the backup's ended,
and a memory stored since under the same id is newer than the line.
The walk over everyone (~0.5 s at 100,000 people on SQLite, bench/erasures_bench.py) runs only when the record
holds an erasure newer than the database's mark of it (migration 0047, `erasure_marks`): after a restore, whose
mark is as old as the backup, or once after erasures made since; otherwise a start reads one row.

What the file cannot hold is said at once: a line that is not one (a write cut by a crash: its erasure never
began, since the line comes first) is skipped and logged (`erasures.line_unreadable`); a file that cannot be read
stops the start (ConfigError), since a start that skipped it would serve the people it lists. A line that cannot be
written fails the erasure before anything is deleted (ErasureNotKept, a StoreError: the web and the admin page
answer 503): the person is told to ask again.
Several processes on one Postgres database each keep their own file (HILO_DATA_DIR is per machine): each start
applies the erasures its own machine made. docs/deploy.md, "Backups"."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bot.config import Settings
from kernel import log
from kernel.digests import erased
from kernel.errors import ConfigError, StoreError
from kernel.types import utcnow
from memory.rows import aware, to_ts
from memory.store import Person, Store

logger = log.get("hilo.erasures")
FILE = "erasures.jsonl"
#: People read per call while a start looks for the ones the record lists.
PAGE = 1000


class ErasureNotKept(StoreError):
    """The erasure could not be noted (a full disk, a directory hilo cannot write): nothing was deleted. A store
    error: the web and the admin page answer 503 (try again), as for a database that cannot write."""


@dataclass(frozen=True, slots=True)
class Erasure:
    """One line: a person (`ids`: the digests of their handle and identities) or one memory (`memory`: the user
    id and memory id; `ids` empty), forgotten at `at`."""

    at: datetime
    ids: frozenset[str]
    memory: tuple[int, int] | None = None


def digests(handle: str, identities: Sequence[tuple[str, str]]) -> list[str]:
    """What a line keeps of the person `handle` with these (surface, external user id) identities."""
    return [erased("handle", handle), *(erased(surface, ext) for surface, ext in identities)]


class Erasures:
    """The record at `path` (HILO_DATA_DIR/erasures.jsonl)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def of(cls, settings: Settings) -> Erasures | None:
        """The record of these settings; None for an in-memory database (nothing of it is ever restored)."""
        if settings.database_url == "sqlite:///:memory:":
            return None
        return cls(Path(settings.data_dir) / FILE)

    async def note(self, handle: str, identities: Sequence[tuple[str, str]], at: datetime | None = None) -> None:
        """One line for the person about to be forgotten, on disk before this returns; ErasureNotKept if not."""
        await self._write({"at": to_ts(at or utcnow()), "ids": digests(handle, identities)})

    async def note_memory(self, user_id: int, memory_id: int, at: datetime | None = None) -> None:
        """One line for the memory about to be forgotten (its ids: numbers that name nobody)."""
        await self._write({"at": to_ts(at or utcnow()), "memory": [user_id, memory_id]})

    async def _write(self, entry: dict[str, object]) -> None:
        try:
            await asyncio.to_thread(self._append, (json.dumps(entry) + "\n").encode())
        except OSError as exc:
            raise ErasureNotKept(f"the record of erasures {self.path} cannot be written ({exc.strerror})") from None

    def _append(self, line: bytes) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        new = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a line cut by a crash: this one starts anew
                line = b"\n" + line
            os.write(fd, line)  # one write of one line: O_APPEND keeps lines of two processes apart
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:  # the file's name lasts too
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def read(self) -> tuple[str, list[Erasure]]:
        """The record's name (a digest of its first line: two machines' records differ) and the erasures it holds
        (none without a file); ConfigError when it cannot be read."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return "", []
        except OSError as exc:
            raise ConfigError(f"cannot read the record of erasures {self.path} ({exc.strerror}): the people it lists "
                              f"would be served again; make it readable for this user") from None
        lines = data.splitlines()
        found: list[Erasure] = []
        for number, raw in enumerate(lines, 1):
            try:
                entry = json.loads(raw)
                memory, ids = entry.get("memory"), entry.get("ids", [])
                if not isinstance(entry["at"], str) or not all(isinstance(i, str) for i in ids):
                    raise TypeError("not a line of this record")
                found.append(Erasure(aware(datetime.fromisoformat(entry["at"])), frozenset(ids),
                                     (int(memory[0]), int(memory[1])) if memory is not None else None))
            except (ValueError, KeyError, TypeError, AttributeError):
                logger.warning("erasures.line_unreadable", path=str(self.path), line=number, bytes=len(raw))
        name = hashlib.blake2b(lines[0], digest_size=12).hexdigest() if lines else ""
        return name, found

    async def reapply(self, store: Store, forget: Callable[[str], Awaitable[object]]) -> int:
        """Forget again, through `forget` (bot/media.py's, not noted again), every person the record lists who
        existed by their line's time, and every memory it lists that was stored by then; how many there were, in
        one `erasures.reapplied` line. Only when the record holds an erasure newer than the database's mark of it
        (Store.erasures_through: after a restore, or after erasures since the last start); then the mark moves up
        to it."""
        name, entries = await asyncio.to_thread(self.read)
        if not entries:
            return 0
        newest = max(entry.at for entry in entries)
        through = await store.erasures_through(name)
        if through is not None and through >= newest:
            return 0
        erased_at: dict[str, datetime] = {}
        for entry in entries:  # forgotten, back, forgotten again: the last time counts
            for digest in entry.ids:
                erased_at[digest] = max(entry.at, erased_at.get(digest, entry.at))
        listed: list[str] = []
        after = 0
        while erased_at and (page := await store.people_page(after, PAGE)):
            listed.extend(p.handle for p in page if _listed(p, erased_at))
            after = page[-1].id
        for handle in listed:
            await forget(handle)
        memories = 0
        for entry in entries:
            if entry.memory is not None:  # a memory stored since has the id again only after a restore: newer
                memory = await store.memory(*entry.memory)
                if memory is not None and memory.created_at <= entry.at and await store.forget_memory(*entry.memory):
                    memories += 1
        await store.mark_erasures(name, newest)
        if listed or memories:
            logger.warning("erasures.reapplied", people=len(listed), memories=memories, entries=len(entries),
                           path=str(self.path))
        return len(listed) + memories


async def forget_memory(store: Store, erasures: Erasures | None, user_id: int, memory_id: int) -> bool:
    """Forget the memory `memory_id` of the person `user_id`: noted in `erasures` first (a restored backup does
    not bring it back), then deleted; False when it is not theirs (or gone). Every way one memory is forgotten
    comes here: `/forget m12` and its words, the `forget` tool, the widget's Forget, the admin page, `hilo forget
    --memory`. ErasureNotKept: nothing was deleted."""
    if erasures is not None:
        if await store.memory(user_id, memory_id) is None:
            return False
        await erasures.note_memory(user_id, memory_id)
    return await store.forget_memory(user_id, memory_id)


def _listed(person: Person, erased_at: dict[str, datetime]) -> bool:
    """The record lists the person's handle or one of their identities, erased after it was created."""
    at = erased_at.get(erased("handle", person.handle))
    if at is not None and person.created_at <= at:
        return True
    for surface, ext, created in person.identities:
        at = erased_at.get(erased(surface, ext))
        if at is not None and created <= at:
            return True
    return False
