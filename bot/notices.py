"""Notices: what hilo tells a person on its own, outside a turn of theirs, e.g. the owner of a link code that
someone joined their account with it (bot/linking.py), while the turn that caused it runs on another surface.

A notice is kept like a reply: an assistant message in the person's conversation on that surface
(`Store.post_notice`), so the web widget shows it when it loads the conversation and `hilo inspect` lists it.
On a surface with a transport in the outbox (Telegram, WhatsApp) its parts are queued there in the same
transaction (bot/outbox.py: sent in order, retried, one `deliveries` row per part), so the turn that caused the
notice never waits for another surface's API. The web and the terminal have none: the stored message is the
delivery. `register` keeps a sender of its own for a surface without a transport (tests).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress

from bot.outbox import Outbox
from kernel import log, tokens
from kernel.errors import StoreError
from memory.store import Store, StoredMessage

logger = log.get("hilo.notices")

#: (recipient on the surface, text, user id, id of the stored notice) -> None, returning once the delivery
#: is under way (it must not wait for the provider).
Sender = Callable[[str, str, int, int], Awaitable[None]]
#: Seconds a direct send waits for what is queued for its recipient (the outbox goes on after: it stays queued).
SETTLE_S = 120.0


class Notices:
    def __init__(self, store: Store, outbox: Outbox | None = None) -> None:
        self.store = store
        self.outbox = outbox
        self._senders: dict[str, Sender] = {}

    def register(self, surface: str, sender: Sender) -> None:
        self._senders[surface] = sender

    def unregister(self, surface: str) -> None:
        self._senders.pop(surface, None)

    async def send(
        self, user_id: int, surface: str, recipient: str, text: str, *, conversation_ref: str | None = None,
    ) -> StoredMessage:
        """Keep `text` in the person's conversation on `surface`, with its parts queued in the outbox when the
        surface sends through it (else handed to a registered sender, if any). Store errors propagate; a
        sender's failure is logged (the notice stays stored)."""
        outgoing = self.outbox.outgoing(surface, recipient, text) if self.outbox is not None else None
        stored = await self.store.post_notice(user_id, surface, conversation_ref, text, tokens.count(text),
                                              outgoing=outgoing)
        sender = None if outgoing is not None else self._senders.get(surface)
        if outgoing is not None and self.outbox is not None:  # queued with the notice: the sender sends it
            self.outbox.wake()
        elif sender is not None:
            try:
                await sender(recipient, text, user_id, stored.id)
            except Exception as exc:  # the caller's own work (a link) is done: this must not undo its answer
                logger.error("notice.send_failed", surface=surface, user_id=user_id, message_id=stored.id,
                             error=type(exc).__name__)
        logger.info("notice.posted", surface=surface, user_id=user_id, message_id=stored.id,
                    pushed=sender is not None or outgoing is not None)
        return stored

    async def say(self, surface: str, recipient: str, text: str, *, user_id: int | None = None,
                  sender: str | None = None, reply_to: str | None = None) -> bool:
        """Queue `text` for `recipient` in the outbox when the person is known to the database (`user_id`, else
        the user of the identity (surface, `sender`)); True when queued. False: no row can be stored (a person the
        database does not know, the database failing, no transport of `surface` here) and the caller sends it
        directly; for an unknown person only once what is queued for `recipient` went out (a group's replies to
        others), so it still comes after them."""
        if self.outbox is None:
            return False
        try:
            if user_id is None and sender is not None:
                user_id = await self.store.identity_user(surface, sender)
            if user_id is not None:
                return bool(await self.outbox.enqueue(surface, recipient, text, user_id=user_id, reply_to=reply_to))
        except StoreError as exc:  # the database is failing: said directly, at once (nothing queued goes out now)
            logger.error("say.not_queued", surface=surface, user_id=user_id, error=type(exc).__name__)
            return False
        await self.after_queued(surface, recipient)
        return False

    async def after_queued(self, surface: str, recipient: str) -> None:
        """Wait (up to SETTLE_S) until what is queued for `recipient` is sent or finally failed: a direct send
        comes after it. The database failing: no wait (nothing queued can go out meanwhile)."""
        if self.outbox is not None:
            with suppress(StoreError):
                await self.outbox.settled(surface, recipient, timeout=SETTLE_S)
