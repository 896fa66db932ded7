"""What the admin page (surfaces/admin.py) reaches of the store: surfaces import no memory module, so this is its
small facade, as bot/export.py's Exports is the export's. Every read of a person's rows names that person's id;
page sizes are bounded here, whatever the caller asks.

Editing a memory keeps the memories' rules (memory/sql_memories.py): the new wording is ADDED as a draft that
supersedes the old one, so the old row stays, ended and pointing at its successor (the audit trail `hilo memory
--all` and `hilo inspect` show), and a wording that nearly repeats another current memory merges into it as any
new memory would. Only current memories can be edited; deleting is `forget_memory` (the row goes).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any

from bot.erasures import Erasures, forget_memory
from bot.memory_commands import memory_json
from kernel.errors import HiloError
from kernel.types import MemoryDraft, StoredMessage

if TYPE_CHECKING:
    from memory.store import Store

#: Page sizes: people and messages are paged; at most this many per page, whatever is asked.
MAX_PAGE = 100
DEFAULT_PAGE = 25
#: A person's memories shown (newest first), current and ended.
MEMORIES_SHOWN = 200


def page_size(asked: int | None) -> int:
    return DEFAULT_PAGE if asked is None else max(1, min(MAX_PAGE, asked))


@dataclass(frozen=True, slots=True)
class Edited:
    """What an edit did: `memory` the current memory now (new, or the one it merged into), `outcome` as
    `Store.add_memory` says ("superseded" or "merged"), `previous` the edited memory's id (now ended)."""

    memory: dict[str, Any]
    outcome: str
    previous: int


class MemoryEnded(HiloError):
    """The memory is not current (superseded, merged or expired): edit its successor instead."""


class Admin:
    """The admin page's reads and writes, over the store."""

    def __init__(self, store: Store, erasures: Erasures | None = None) -> None:
        self._store = store
        self._erasures = erasures  # a memory deleted here is noted first (bot/erasures.py)

    async def people(self, offset: int, limit: int | None) -> dict[str, Any]:
        size = page_size(limit)
        total, people = await self._store.admin_people(max(0, offset), size)
        return {"total": total, "offset": max(0, offset), "limit": size, "people": people}

    async def person(self, user_id: int) -> dict[str, Any] | None:
        """The person, their conversations and their costs; None when there is no such person."""
        person = await self._store.admin_person(user_id)
        if person is None:
            return None
        conversations = [{"id": c.id, "surface": c.surface, "title": c.title, "created_at": c.created_at.isoformat(),
                          "updated_at": c.updated_at.isoformat(), "message_count": c.message_count}
                         for c in await self._store.conversations(user_id)]
        return {"person": person, "conversations": conversations, "costs": await self.costs(user_id)}

    async def messages(self, user_id: int, conversation_id: int, before: int | None,
                       limit: int | None) -> dict[str, Any]:
        """A page of the conversation's messages (NotFound when it is not the person's); `before` for the next
        (older) page, None when there is none."""
        size = page_size(limit)
        found = await self._store.admin_messages(user_id, conversation_id, before, size)
        return {"conversation_id": conversation_id, "messages": [_message(m) for m in found],
                "before": found[0].id if len(found) == size else None}

    async def memories(self, user_id: int) -> list[dict[str, Any]]:
        return [memory_json(m) for m in await self._store.memories(user_id, include_ended=True, limit=MEMORIES_SHOWN)]

    async def edit_memory(self, user_id: int, memory_id: int, content: str) -> Edited | None:
        """The memory's new wording (see the module docstring); None when it is not the person's. MemoryEnded
        when it is no longer current; InputError (`memory_invalid`) for empty content."""
        old = await self._store.memory(user_id, memory_id)
        if old is None:
            return None
        if old.ended_at is not None:
            raise MemoryEnded(memory_id)
        added = await self._store.add_memory(user_id, MemoryDraft(
            content, old.kind, old.key, old.importance, old.source, old.confidence, old.source_message_ids,
            expires_at=old.expires_at, supersedes=old.id))
        return Edited(memory_json(added.memory), added.outcome, old.id)

    async def forget_memory(self, user_id: int, memory_id: int) -> bool:
        return await forget_memory(self._store, self._erasures, user_id, memory_id)

    async def costs(self, user_id: int | None) -> dict[str, Any]:
        """Today's (UTC), this month's and all model calls' count, cost and tokens, of the person or (None) of
        everyone, with the caps' newest spend windows."""
        day = self._store.clock().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        return await self._store.admin_costs(user_id, day, day.replace(day=1))

    async def top_spenders(self, offset: int, limit: int | None) -> list[dict[str, Any]]:
        return await self._store.admin_top_spenders(max(0, offset), page_size(limit))


def _message(m: StoredMessage) -> dict[str, Any]:
    return {"id": m.id, "role": m.role, "content": m.content, "surface": m.surface,
            "created_at": m.created_at.isoformat(), "reply_to": m.reply_to}
