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

from bot.outbox import Outbox
from kernel import log, tokens
from memory.store import Store, StoredMessage

logger = log.get("hilo.notices")

#: (recipient on the surface, text, user id, id of the stored notice) -> None, returning once the delivery
#: is under way (it must not wait for the provider).
Sender = Callable[[str, str, int, int], Awaitable[None]]


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
