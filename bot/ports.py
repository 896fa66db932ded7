"""The narrow seams a surface reaches the store through (surfaces import no memory module: docs/architecture.md,
"Layers"). The pipeline owns them: `pipeline.history` reads, `pipeline.deliveries` records what was sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bot.erasures import Erasures, forget_memory
from kernel.types import Delivery, Memory, StoredMessage
from memory.store import ConversationInfo, Store
from memory.tool_rows import is_tool_message


class Deliveries(Protocol):
    """What a sender needs: record each part it sent (or finally failed), and take a provider's later word."""

    async def record_delivery(self, delivery: Delivery) -> int:
        """Record one sent (or finally failed) part of a reply; returns the delivery id."""

    async def update_delivery(self, surface: str, provider_ref: str, status: str, error: str | None = None) -> bool:
        """A provider's later word on a sent part (delivered, read, undelivered...). False if unknown."""


class RateLimits(Protocol):
    """Hit counters shared by every process on the database (memory/sql_limits.py): the web's rate limits."""

    async def hit_rate(self, key: str, limit: int, window_s: int) -> float:
        """Count one hit of `key`: 0.0 within `limit` per `window_s` s, else the seconds to wait."""

    async def hit_rates(self, hits: Sequence[tuple[str, int, int]]) -> float:
        """hit_rate of each (key, limit, window_s) in order, in one transaction, up to the first that must wait
        (its wait), else 0.0."""


class History:
    """What a surface may read of a person's history: always of one user, who must be known first."""

    def __init__(self, store: Store, erasures: Erasures | None = None) -> None:
        self._store = store
        self._erasures = erasures

    async def identity_user(self, surface: str, external_user_id: str) -> int | None:
        """The user an identity (surface, id on that surface) belongs to, or None."""
        return await self._store.identity_user(surface, external_user_id)

    async def conversations(self, user_id: int) -> list[ConversationInfo]:
        """The user's conversations, most recently updated first."""
        return await self._store.conversations(user_id)

    async def messages(self, user_id: int, conversation_id: int) -> list[StoredMessage]:
        """Messages of one of the user's conversations, oldest first (NotFound if not the user's): what the person
        and hilo said, without the model's tool calls and results (memory/tool_rows.py: kept for the model)."""
        return [m for m in await self._store.messages(user_id, conversation_id) if not is_tool_message(m)]

    async def memories(self, user_id: int) -> list[Memory]:
        """The user's current memories, newest first."""
        return await self._store.memories(user_id)

    async def forget_memory(self, user_id: int, memory_id: int) -> bool:
        """Delete one of the user's memories, noted first (bot/erasures.py); False when it is not theirs (or
        gone)."""
        return await forget_memory(self._store, self._erasures, user_id, memory_id)

    async def latest_conversation(self, handle: str, surface: str) -> int | None:
        """The conversation of the user with `handle` on `surface` (on the web: their latest), or None."""
        user_id = await self._store.user_id(handle)
        return None if user_id is None else await self._store.find_conversation(user_id, surface)


class Transport(Protocol):
    """What the outbox (bot/outbox.py) sends through: a surface that only sends. `send` delivers one part and
    returns the provider's id for it, or raises kernel.errors.SendError (transient or not, with the provider's
    code and Retry-After). It never retries: the outbox does, with bot/retry.py's policy."""

    name: str
    max_part_chars: int

    async def send(self, recipient: str, text: str, reply_to: str | None) -> str:
        """Send `text` (at most `max_part_chars` UTF-16 units) to `recipient`; the provider's message id.
        A transport that sends approved templates (WhatsApp) also has `send_template(recipient, template, text)`
        (the outbox calls it for a part queued with a template; `text` fills its variable)."""
