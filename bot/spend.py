"""What model calls cost, and the spend caps checked before each one (issue 13 item 3; docs/costs.md).

The chain (bot/models/chain.py, through bot/models/retry.py) asks its `Meter` around every attempt:

    ticket = await meter.reserve(spec, messages, max_output)   # OverCap: no call is made
    ... the call ...
    record = meter.priced(spec, record)                          # its cost_usd from the price table
    await meter.settle(ticket, record)                           # the reservation becomes the real cost

The caps (HILO_CAP_PERSON_DAILY_USD, HILO_CAP_PERSON_MONTHLY_USD, HILO_CAP_DAILY_USD, HILO_CAP_MONTHLY_USD; 0: none)
are windows of spend in the database (memory/sql_spend.py): the person's UTC day and calendar month, and
everyone's. A call reserves its worst case (the prompt's tokens at the input price plus the provider's output
bound at the output price) in every capped window at once, or is refused: so the caps hold across processes,
with calls in flight counted. Who pays is the turn's person, set by the pipeline (and the background jobs) with
`paying(user_id)`; a call with no person counts against the global caps only. A refusal sends the operator a
`cap_reached` alert (bot/alerts.py, rate limited).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from bot import metrics
from bot.config import ModelSpec
from bot.prices import PriceTable
from kernel import log, tokens
from kernel.errors import HiloError, StoreError
from kernel.types import ChatMessage, ModelCallRecord, utcnow
from memory.sql_spend import Refused, Window

if TYPE_CHECKING:
    from bot.alerts import Alerts
    from bot.config import Settings
    from memory.store import Store

logger = log.get("hilo.spend")

#: The output bound of a call whose provider sets none (OpenAI-compatible servers): the worst case reserved.
DEFAULT_MAX_OUTPUT = 4096
#: Tokens a chat message costs beyond its content (role and separators), as the providers count them.
PER_MESSAGE = 4
_payer: ContextVar[int | None] = ContextVar("hilo_payer", default=None)


@contextmanager
def paying(user_id: int | None) -> Iterator[None]:
    """Model calls made inside count against `user_id`'s caps (and everyone's)."""
    token = _payer.set(user_id)
    try:
        yield
    finally:
        _payer.reset(token)


class OverCap(HiloError):
    """A spend cap refused a model call before it was made. `scope`: person_daily, person_monthly,
    global_daily or global_monthly; `period`: "day" or "month" (what the person is told)."""

    def __init__(self, refused: Refused) -> None:
        w = refused.window
        self.scope = f"{'global' if w.user_id is None else 'person'}_{'daily' if w.scope == 'day' else 'monthly'}"
        self.period = w.scope
        self.refused = refused
        super().__init__(f"the {self.scope} spend cap of {w.cap_usd:g} USD is reached")


@dataclass(frozen=True, slots=True)
class Ticket:
    """A reservation: the windows it is counted in and how much."""

    windows: tuple[Window, ...]
    reserved: float


class Meter:
    """Prices every call; with caps and a store, reserves and settles. Without a store (a chain built alone) it
    only prices."""

    def __init__(self, prices: PriceTable | None = None, *, settings: Settings | None = None,
                 store: Store | None = None, alerts: Alerts | None = None,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.prices = prices if prices is not None else (settings.prices if settings else PriceTable())
        s = settings
        self.caps = (s.cap_person_daily_usd, s.cap_person_monthly_usd, s.cap_daily_usd, s.cap_monthly_usd) \
            if s is not None else (0.0, 0.0, 0.0, 0.0)
        self.store = store
        self.alerts = alerts
        self.clock = clock

    def cost(self, spec: ModelSpec, tokens_in: int, tokens_out: int, tokens_cached: int = 0) -> float:
        return self.prices.cost(spec.provider, spec.model, tokens_in, tokens_out, tokens_cached)

    def priced(self, spec: ModelSpec, record: ModelCallRecord) -> ModelCallRecord:
        """The record with its cost (0 for a call that failed: no usage came back)."""
        if not (record.tokens_in or record.tokens_out):
            return record
        usd = self.cost(spec, record.tokens_in, record.tokens_out, record.tokens_cached)
        metrics.observe_cost(spec.provider, spec.model, usd)
        return replace(record, cost_usd=usd)

    def windows(self, user_id: int | None) -> tuple[Window, ...]:
        """The capped windows a call of `user_id` counts in, in the order they are locked."""
        now = self.clock()
        day, month = now.strftime("%Y-%m-%d"), now.strftime("%Y-%m-01")
        person_daily, person_monthly, daily, monthly = self.caps
        candidates = []
        if user_id is not None:
            candidates += [Window("day", user_id, day, person_daily), Window("month", user_id, month, person_monthly)]
        candidates += [Window("day", None, day, daily), Window("month", None, month, monthly)]
        return tuple(w for w in candidates if w.cap_usd > 0)

    async def reserve(self, spec: ModelSpec, messages: Sequence[ChatMessage],
                      max_output: int | None) -> Ticket | None:
        """Reserve the call's worst case in every capped window; None when no cap applies. OverCap (and one
        cap_reached alert, rate limited) when a window has no room for it: the call must not be made."""
        if self.store is None or not any(self.caps):
            return None
        user_id = _payer.get()
        windows = self.windows(user_id)
        if not windows:
            return None
        price = self.prices.price_of(spec.provider, spec.model)
        if price is None or not (price.input or price.output):
            return None  # costs nothing as far as the table knows (echo, unpriced: logged once when it answers)
        prompt = await _prompt_tokens(messages)
        worst = price.cost(prompt, max_output or DEFAULT_MAX_OUTPUT)
        try:
            refused = await self.store.reserve_spend(windows, worst)
        except StoreError as exc:  # the database is away: the turn is not refused for it (its answer may still
            # be shown); the call goes unreserved and uncounted, and says so
            logger.error("spend.unreserved", model=spec.label, user_id=user_id, error=type(exc).__name__)
            return None
        if refused is not None:
            over = OverCap(refused)
            w = refused.window
            logger.warning("spend.cap_reached", scope=over.scope, user_id=user_id, model=spec.label,
                           cap_usd=w.cap_usd, spent_usd=round(refused.spent_usd, 6), needed_usd=round(worst, 6))
            if self.alerts is not None:
                self.alerts.send("cap_reached", scope=over.scope, window=w.start, cap_usd=w.cap_usd,
                                 spent_usd=round(refused.spent_usd, 6), needed_usd=round(worst, 6),
                                 user_id=user_id, model=spec.label)
            raise over
        return Ticket(windows, worst)

    async def settle(self, ticket: Ticket | None, record: ModelCallRecord | None) -> None:
        """The reservation becomes what the call cost (0 when it failed or was cancelled before an answer)."""
        if ticket is None or self.store is None:
            return
        spent = record.cost_usd if record is not None else 0.0
        try:
            await self.store.settle_spend(ticket.windows, spent - ticket.reserved)
        except StoreError as exc:  # the worst case stays counted: the caps err on the safe side
            logger.error("spend.unsettled", reserved_usd=round(ticket.reserved, 6), error=type(exc).__name__)


async def _prompt_tokens(messages: Sequence[ChatMessage]) -> int:
    def count() -> int:
        return sum(tokens.count(m.content) + PER_MESSAGE for m in messages)

    # a long context is counted on a thread (tiktoken releases the GIL), as the pipeline counts long texts
    if sum(len(m.content) for m in messages) < 2048:
        return count()
    return await asyncio.to_thread(count)
