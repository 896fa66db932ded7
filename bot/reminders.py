"""Delivering reminders (issue 15 item 5): the `reminders` job (bot/job_list.py, every HILO_REMINDER_SECONDS)
sends each reminder whose time came exactly once, on the person's last-active surface, through the outbox.

For each due reminder (memory/sql_reminders.py), the person's latest message from a private chat on each surface
says where they were last active and how to reach them (its reply route, bot/outbox.py; never a group's, where
others would read it). The surfaces are tried latest first:
- Telegram: the chat of their latest message;
- WhatsApp: their number, inside the 24-hour customer-care window of their latest message; past it, only as the
  approved template HILO_WHATSAPP_REMINDER_TEMPLATE (the reminder's text as its variable), else the next surface;
- the web: the widget has no push, so the reminder is stored in their latest web conversation and shown when the
  widget loads it (nothing is queued).
A surface this process runs no transport for is passed over. The first that can take it gets it, in one
transaction (Store.deliver_reminder: marked sent, stored as hilo's message there, its parts queued), then the
outbox is woken; when none can, the reminder is marked failed with the reasons (ids and surfaces only: never its
text). The job runs in ONE process of all that share the database (bot/jobs.py's lease), and the conditional
update makes a repeated run (a crash after the commit) deliver nothing twice. Logs carry ids, never the text.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from bot import assembly
from bot.outbox import Outbox, route_language, route_of
from kernel import catalog, log
from kernel.errors import StoreError
from kernel.types import Outgoing, StoredMessage
from memory.store import Store

if TYPE_CHECKING:
    from bot.config import Settings
    from memory.sql_reminders import Reminder

logger = log.get("hilo.reminders")

#: The surfaces a reminder can reach a person on, and WhatsApp's customer-care window.
SURFACES = ("telegram", "whatsapp", "web")
WINDOW = timedelta(hours=24)
#: At most this many reminders per run (the next run takes the rest).
BATCH = 50
#: A template variable's longest text (Twilio's Content API caps a variable's value).
TEMPLATE_CHARS = 1000


async def deliver_due(store: Store, outbox: Outbox, settings: Settings) -> int:
    """One run: every due reminder delivered or failed; how many were due."""
    due = await store.due_reminders(BATCH)
    queued = 0
    for reminder in due:
        try:
            queued += await _deliver(store, outbox, settings, reminder)
        except StoreError as exc:  # left pending: the next run tries it again
            logger.error("reminders.deliver_failed", reminder_id=reminder.id, user_id=reminder.user_id,
                         error=type(exc).__name__)
    if queued:
        outbox.wake()
    return len(due)


async def _deliver(store: Store, outbox: Outbox, settings: Settings, reminder: Reminder) -> int:
    """Deliver `reminder` on the first surface that can take it (1 when parts were queued), else fail it."""
    reasons: list[str] = []
    for last in await store.last_messages(reminder.user_id, SURFACES):
        lang = catalog.language(route_language(last.metadata), settings.language)
        text = catalog.t("reminder", lang, text=reminder.text)
        outgoing, why = _outgoing(store, outbox, settings, last, reminder, text)
        if why is not None:
            reasons.append(f"{last.surface}: {why}")
            continue
        ref = str(last.conversation_id) if last.surface == "web" else None
        stored = await store.deliver_reminder(reminder, last.surface, ref, text, await assembly.count_tokens(text),
                                              outgoing)
        logger.info("reminders.delivered", reminder_id=reminder.id, user_id=reminder.user_id, surface=last.surface,
                    message_id=stored.id if stored else None, template=bool(outgoing and outgoing.template),
                    late_s=round((store.clock() - reminder.due_at).total_seconds(), 1), done=stored is not None)
        return int(stored is not None and outgoing is not None)
    error = "; ".join(reasons) or "the person has no conversation to deliver it to"
    await store.fail_reminder(reminder, error)
    logger.warning("reminders.undeliverable", reminder_id=reminder.id, user_id=reminder.user_id, error=error)
    return 0


def _outgoing(store: Store, outbox: Outbox, settings: Settings, last: StoredMessage, reminder: Reminder,
              text: str) -> tuple[Outgoing | None, str | None]:
    """(the parts to queue, None) for the surface of the person's message `last`; (None, None) for the web (stored
    only); (None, why not) when this surface cannot take it."""
    if last.surface == "web":
        return None, None
    route = route_of(last.metadata)
    if route is None:
        return None, "no reply route"
    outgoing = outbox.outgoing(last.surface, route[0], text)
    if outgoing is None:
        return None, "not served by this process"
    if last.surface == "whatsapp" and store.clock() - last.created_at > WINDOW:
        if not settings.whatsapp_reminder_template:
            return None, "outside the 24-hour window, and no HILO_WHATSAPP_REMINDER_TEMPLATE"
        return replace(outgoing, parts=(reminder.text[:TEMPLATE_CHARS],),
                       template=settings.whatsapp_reminder_template), None
    return outgoing, None
