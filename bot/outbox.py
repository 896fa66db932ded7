"""The outbox sender: what hilo says to people on Telegram and WhatsApp goes out from stored parts, through the
surfaces' transports (bot/ports.py Transport), in order per recipient, retried, resumed after a restart.

Parts are stored first (memory/sql_outbox.py: `deliveries` rows of status 'pending', a turn's inside its
finish_turn transaction), then `wake()` starts the sender. One loop per process claims, for each registered
transport, the due first undelivered part of each recipient (a lease, so one sender of all processes sends it)
and sends each claimed part in a task of its own: recipients are served side by side, a recipient's parts one
at a time, a part only after the one before it was sent or finally failed. Each outcome is recorded:
- sent: 'sent' with the provider's id (Twilio's status callbacks update that row later);
- transient (429, 5xx, timeouts, no answer: `SendError.transient`): 'pending' again, due after the provider's
  Retry-After or bot/retry.py's backoff (the one policy: attempts, backoff, the cap on a pause); a pause longer
  than the cap, or the last attempt, fails the part;
- permanent (a blocked bot, WhatsApp's 63016 window): 'failed' with the transport's explanation.
Nothing waits in memory: a retry is a due time in the row, so a restart resumes it, and a part whose process
died while sending it is claimed again once its lease (HILO_OUTBOX_LEASE) lapsed and sent again (Telegram and
Twilio take no idempotency key: a possible duplicate part is judged better than a lost one). A live sender keeps
its lease while the send is in flight (renewed every third of it, and once more before a send that starts late),
so a slow provider or a loaded machine never hands a part to a second sender.
The loop and its sends are tracked tasks of the daemon's TaskSet; `flush(surface)` lets a surface send what is
due before it closes its client, `stop()` drains the sends in flight within the stop budget (bot/shutdown.py).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from contextlib import suppress
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bot import metrics
from bot.ports import Transport
from bot.retry import RetryPolicy
from bot.tasks import TaskSet
from kernel import log
from kernel.errors import Draining, SendError, StoreError
from kernel.text_split import split_text, utf16_len
from kernel.types import InboundMessage, OutboxItem, Outgoing
from memory.store import Store

if TYPE_CHECKING:
    from bot.alerts import Alerts

logger = log.get("hilo.outbox")

#: Where a message's reply goes, kept in its metadata by the surface that took it in (so that a turn run later,
#: by recovery, knows it): {"to": recipient, "reply_to": provider message id or None}.
ROUTE = "reply_route"
#: The longest the loop sleeps without a wake-up: parts queued by another process are found within this.
IDLE_S = 2.0
#: Outbox numbers for bot/retry.py's policy: a failed part is tried again later, not while a turn waits.
POLICY = RetryPolicy(attempts=5, backoff_base=1.0, backoff_max=60.0, retry_after_cap=300.0)


def with_route(msg: InboundMessage, recipient: str, reply_to: str | int | None = None) -> InboundMessage:
    """`msg` carrying where its reply is to be sent (kept with the stored message)."""
    route: dict[str, Any] = {"to": recipient, "reply_to": None if reply_to is None else str(reply_to)}
    if msg.language:  # the person's language, for what a later turn (recovery) says from the catalogue
        route["lang"] = msg.language
    return replace(msg, metadata={**msg.metadata, ROUTE: route})


def route_language(metadata: dict[str, Any]) -> str | None:
    """The language the person's client or platform gave with a routed message (with_route), if any."""
    route = metadata.get(ROUTE)
    lang = route.get("lang") if isinstance(route, dict) else None
    return str(lang) if lang else None


def route_of(metadata: dict[str, Any]) -> tuple[str, str | None] | None:
    route = metadata.get(ROUTE)
    if not isinstance(route, dict) or not route.get("to"):
        return None
    reply_to = route.get("reply_to")
    return str(route["to"]), None if reply_to is None else str(reply_to)


class Outbox:
    """Queues and sends. `register(transport)` when a surface starts, `start(tasks)` once they are up."""

    def __init__(self, store: Store, *, lease: float = 60.0, policy: RetryPolicy = POLICY,
                 alerts: Alerts | None = None, failures_alert: int = 5) -> None:
        self.store = store
        #: a surface whose parts fail finally `failures_alert` times in a row alerts the operator (bot/alerts.py)
        self.alerts = alerts
        self.failures_alert = failures_alert
        self._failing: dict[str, int] = {}
        self.lease = lease
        self.policy = policy
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.transports: dict[str, Transport] = {}
        self._wake = asyncio.Event()
        self._tasks: TaskSet | None = None
        self._loop: asyncio.Task[Any] | None = None
        self._sending: dict[asyncio.Task[Any], str] = {}
        #: surfaces whose claim runs now (its parts are 'sending' before their tasks are in `_sending`)
        self._claiming: set[str] = set()
        self._stopping = False
        #: (surface, recipient) -> set when one of its parts settled; and how many wait on it
        self._settled: dict[tuple[str, str], asyncio.Event] = {}
        self._waiters: dict[tuple[str, str], int] = {}
        #: surfaces whose stop began: nobody waits for their parts any more (they stay queued)
        self._closing: set[str] = set()

    # -- queueing -------------------------------------------------------------------------------------------

    def register(self, transport: Transport) -> None:
        self.transports[transport.name] = transport
        self._closing.discard(transport.name)
        self.wake()

    def unregister(self, surface: str) -> None:
        self.transports.pop(surface, None)

    def outgoing(self, surface: str, recipient: str, text: str, reply_to: str | None = None) -> Outgoing | None:
        """`text` as the parts the surface's transport takes, or None when no transport of `surface` is here."""
        transport = self.transports.get(surface)
        if transport is None:
            return None
        return Outgoing(surface, recipient, tuple(split_text(text, transport.max_part_chars, length=utf16_len)),
                        reply_to)

    def outgoing_for(self, msg: InboundMessage, text: str) -> Outgoing | None:
        """The reply `text` to `msg` as outbox parts, when the surface sends through the outbox and `msg`
        names where its reply goes (with_route)."""
        route = route_of(msg.metadata)
        return None if route is None else self.outgoing(msg.surface, route[0], text, route[1])

    async def enqueue(self, surface: str, recipient: str, text: str, *, user_id: int, message_id: int | None = None,
                      reply_to: str | None = None) -> list[int]:
        """Store `text`'s parts for `recipient` (status pending) and wake the sender; the parts' ids. A surface
        without a transport here queues nothing ([])."""
        out = self.outgoing(surface, recipient, text, reply_to)
        if out is None or not out.parts:
            return []
        ids = await self.store.enqueue(user_id, message_id, out)
        logger.info("outbox.queued", surface=surface, user_id=user_id, message_id=message_id, parts=len(ids))
        self.wake()
        return ids

    def wake(self) -> None:
        self._wake.set()

    # -- the sender -----------------------------------------------------------------------------------------

    def start(self, tasks: TaskSet) -> None:
        """Run the sender loop as a tracked task (it first resumes whatever an earlier run left undelivered)."""
        self._tasks = tasks
        self._stopping = False
        self._loop = tasks.spawn(self._run(), name="outbox")

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            wait = IDLE_S
            for surface in list(self.transports):
                try:
                    wait = min(wait, await self._claim(surface))
                except StoreError as exc:
                    logger.error("outbox.claim_failed", surface=surface, error=type(exc).__name__)
                except Exception as exc:  # a bug (or a driver's surprise) never ends the one sender of this process
                    logger.error("outbox.claim_crashed", surface=surface, error=type(exc).__name__)
            if self._stopping:
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, wait))

    async def _claim(self, surface: str) -> float:
        """Start sending the due heads of `surface`; seconds until the next is due (at most IDLE_S)."""
        self._claiming.add(surface)
        try:
            items = await self.store.claim_outbox(surface, self.owner, self.lease)
            return await self._start_sends(surface, items)
        finally:
            self._claiming.discard(surface)

    async def _start_sends(self, surface: str, items: list[OutboxItem]) -> float:
        claimed_at = asyncio.get_running_loop().time()
        for item in items:
            assert self._tasks is not None
            try:
                task = self._tasks.spawn(self._send(item, claimed_at), name=f"outbox.send:{item.id}")
            except Draining:
                return IDLE_S  # the lease lapses and the next start sends it
            self._sending[task] = surface
            task.add_done_callback(self._sent)
        if items:
            return IDLE_S
        due = await self.store.outbox_next_due(surface)
        if due is None:
            return IDLE_S
        return min(IDLE_S, max(0.01, (due - self.store.clock()).total_seconds()))

    def _sent(self, task: asyncio.Task[Any]) -> None:
        self._sending.pop(task, None)
        self.wake()  # the recipient's next part is a head now

    async def _send(self, item: OutboxItem, claimed_at: float) -> None:
        transport = self.transports.get(item.surface)
        ids = {"delivery_id": item.id, "surface": item.surface, "user_id": item.user_id, "part": item.part,
               "parts": item.parts, "attempt": item.attempts}
        renewer: asyncio.Task[None] | None = None
        try:
            if transport is None:
                raise SendError(f"no {item.surface} transport in this process", transient=True)
            if asyncio.get_running_loop().time() - claimed_at > self.lease / 3 and not await self._renew(item):
                logger.warning("outbox.lease_lost", **ids, before="send")  # another sender has it: not sent here
                return
            renewer = asyncio.create_task(self._renewing(item), name=f"outbox.lease:{item.id}")
            if item.template is not None:  # an approved template (a reminder outside WhatsApp's 24 hours)
                send_template = getattr(transport, "send_template", None)
                if send_template is None:
                    raise SendError(f"{item.surface} sends no templates", transient=False)
                ref = await send_template(item.recipient, item.template, item.text)
            else:
                ref = await transport.send(item.recipient, item.text, item.reply_to)
        except SendError as exc:
            await self._failed(item, exc, ids)
        except Exception as exc:  # a bug in a transport: recorded, never retried blindly
            logger.error("outbox.send_crashed", **ids, error=type(exc).__name__)
            await self._failed_finally(item, f"{type(exc).__name__}: hilo could not send this part")
        else:
            self._failing[item.surface] = 0
            await self._settle(item, "sent", provider_ref=ref)
            logger.info("outbox.sent", **ids, provider_ref=ref)
        finally:
            if renewer is not None:
                renewer.cancel()
                await asyncio.gather(renewer, return_exceptions=True)
            event = self._settled.get((item.surface, item.recipient))
            if event is not None:
                event.set()

    async def _renew(self, item: OutboxItem) -> bool:
        """Extend this sender's lease on `item` by a whole lease; False when another sender holds it now."""
        try:
            return await self.store.renew_outbox(item.id, self.owner, self.lease)
        except StoreError as exc:  # the send goes on: the lease may lapse, and the part be sent again
            logger.warning("outbox.renew_failed", delivery_id=item.id, error=type(exc).__name__)
            return True

    async def _renewing(self, item: OutboxItem) -> None:
        """While a send is in flight (a slow provider, a loaded machine), renew its lease every third of it, so
        that no other sender takes the part over and sends it a second time."""
        while True:
            await asyncio.sleep(self.lease / 3)
            if not await self._renew(item):
                logger.warning("outbox.lease_lost", delivery_id=item.id, surface=item.surface, during="send")
                return

    async def settled(self, surface: str, recipient: str, timeout: float) -> bool:
        """Wait (up to `timeout` s) until every part queued for `recipient` is sent or finally failed; False
        when some are still undelivered. Awaited only before a direct send (bot/notices.py `after_queued`: a
        person the database does not know), so that it comes after what is queued for the same chat."""
        key = (surface, recipient)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = self._settled.setdefault(key, asyncio.Event())
        self._waiters[key] = self._waiters.get(key, 0) + 1
        try:
            while True:
                event.clear()
                if not await self.store.outbox_undelivered(surface, recipient):
                    return True
                left = deadline - loop.time()
                if left <= 0 or surface in self._closing:
                    return False
                with suppress(TimeoutError):  # another process's sends set no event here: look again anyway
                    await asyncio.wait_for(event.wait(), timeout=min(IDLE_S, left))
        finally:
            self._waiters[key] -= 1
            if not self._waiters[key]:
                del self._waiters[key], self._settled[key]

    async def _failed(self, item: OutboxItem, exc: SendError, ids: dict[str, Any]) -> None:
        pause = exc.retry_after
        if exc.transient and item.attempts < self.policy.attempts and not self.policy.too_long(pause):
            wait = pause if pause is not None else self.policy.backoff(item.attempts)
            logger.warning("outbox.retry", **ids, code=exc.code, wait_s=round(wait, 3))
            await self._settle(item, "pending", error=str(exc)[:500],
                               retry_at=self.store.clock() + timedelta(seconds=wait))
            return
        error = str(exc)
        if exc.transient and self.policy.too_long(pause):
            error += f" (Retry-After {pause:g} s is too long)"
        logger.error("outbox.failed", **ids, code=exc.code, transient=exc.transient)
        await self._failed_finally(item, error[:500])

    async def _failed_finally(self, item: OutboxItem, error: str) -> None:
        """`item` failed for good: recorded as failed, then counted (a scrape that sees the failure finds the part
        settled); every `failures_alert` in a row of its surface, a delivery_failing alert."""
        await self._settle(item, "failed", error=error)
        surface = item.surface
        metrics.observe_delivery_failure(surface)
        failing = self._failing.get(surface, 0) + 1
        self._failing[surface] = failing
        if self.alerts is not None and failing % self.failures_alert == 0:
            self.alerts.send("delivery_failing", surface=surface, failures_in_a_row=failing)

    async def _settle(self, item: OutboxItem, status: str, **fate: Any) -> None:
        try:
            if not await self.store.settle_outbox(item.id, self.owner, status, **fate):
                logger.warning("outbox.lease_lost", delivery_id=item.id, status=status)
        except StoreError as exc:  # stays 'sending' until its lease lapses: then it is sent again
            logger.error("outbox.not_recorded", delivery_id=item.id, status=status, error=type(exc).__name__)

    # -- stopping -------------------------------------------------------------------------------------------

    def closing(self, surface: str) -> None:
        """The surface's stop began: its direct sends stop waiting for queued parts (`settled`), which stay
        queued and go out with `flush` or at the next start, so in-flight work ends within the stop budget."""
        self._closing.add(surface)
        for (name, _), event in self._settled.items():
            if name == surface:
                event.set()

    async def flush(self, surface: str, timeout: float) -> None:
        """Send what is due for `surface` now and wait for its sends in flight, for up to `timeout` s (a surface
        calls it before closing its client; what is left stays queued for the next start)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline and self._loop is not None and not self._loop.done():
            busy = [t for t, s in self._sending.items() if s == surface]
            if busy:
                await asyncio.wait(busy, timeout=max(0.0, deadline - loop.time()))
                continue
            if surface in self._claiming:  # claimed parts whose sends are not started yet
                await asyncio.sleep(0.02)
                continue
            try:
                due = await self.store.outbox_next_due(surface)
            except StoreError:
                return
            if due is None or due > self.store.clock():
                return
            self.wake()
            await asyncio.sleep(0.02)  # the loop claims what is due; a claim is one short transaction

    async def stop(self, timeout: float) -> None:
        """Claim nothing more; let the sends in flight finish for up to `timeout` s, then cancel them (their
        parts stay 'sending' and are sent again by the next start, once the lease lapsed)."""
        self._stopping = True
        self.wake()
        if self._sending:
            _, pending = await asyncio.wait(set(self._sending), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
                logger.warning("outbox.cancelled", count=len(pending))
        if self._loop is not None:
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
