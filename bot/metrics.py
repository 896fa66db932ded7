"""Prometheus metrics: the one module that knows prometheus-client (docs/architecture.md, "Health and metrics").

Each app has a `Metrics` of its own (its own CollectorRegistry, never the client's global one, so several apps in
one process never collide); its lifespan makes it the process's active one (`activate`), and the functions below
record into the active one (nothing happens while none is: `hilo chat`, a test's bare pipeline). The code where
each event happens calls them: the pipeline (turns, model calls, context, retrieval), the background jobs' model
calls, the outbox (final delivery failures), the surfaces (webhook refusals), the cost of a call
(`observe_cost`, fed by the price table). The outbox backlog is read from the database when scraped (cached).

Labels are bounded: surface, outcome, provider, model, block, kind, direction, stage, reason: names from code
or from the configured model chain, never a person, chat, conversation or message id, nor any text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from kernel.errors import StoreError
from kernel.types import ModelCallRecord

if TYPE_CHECKING:
    from memory.context import AssembledContext

__all__ = ["Metrics", "active", "observe_calls", "observe_context", "observe_cost",
           "observe_delivery_failure", "observe_retrieval", "observe_turn", "refused"]

#: Seconds: a turn is milliseconds before the model and seconds with it.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS = (0, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072)
#: How long a scrape's outbox backlog read is kept.
BACKLOG_CACHE_S = 5.0
#: A scrape waits at most this for it (a locked database): the last values are given instead.
BACKLOG_TIMEOUT_S = 2.0
Backlog = Callable[[], Awaitable[tuple[int, float]]]


class Metrics:
    """Every series of one app, in a registry of its own."""

    def __init__(self) -> None:
        # prometheus-client loads here, not at import: an app with metrics off never builds a Metrics (bot/app.py)
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        self.turns = Counter("hilo_turns", "Turns answered, by surface and outcome (failed: every model failed)",
                             ("surface", "outcome"), registry=r)
        self.turn_seconds = Histogram("hilo_turn_seconds", "A turn from its message stored to its reply stored",
                                      ("surface",), buckets=LATENCY_BUCKETS, registry=r)
        self.pre_model_seconds = Histogram("hilo_turn_pre_model_seconds", "A turn's work before the model call",
                                           ("surface",), buckets=LATENCY_BUCKETS, registry=r)
        self.model_calls = Counter("hilo_model_calls", "Model calls (attempts), by provider, model, outcome and "
                                   "kind (turn, extract, summary)", ("provider", "model", "outcome", "kind"),
                                   registry=r)
        self.fallbacks = Counter("hilo_fallbacks", "Answers given by a fallback model, by the model that answered",
                                 ("provider", "model", "kind"), registry=r)
        self.tokens = Counter("hilo_model_tokens", "Model tokens, by direction (in, out)",
                              ("provider", "model", "direction", "kind"), registry=r)
        self.cost = Counter("hilo_model_cost_usd", "Estimated model cost in US dollars (the price table)",
                            ("provider", "model"), registry=r)
        self.context_tokens = Histogram("hilo_context_tokens", "Context tokens of a turn per block",
                                        ("block",), buckets=TOKEN_BUCKETS, registry=r)
        self.retrieval_seconds = Histogram("hilo_retrieval_seconds", "A turn's retrieval: the question's embedding "
                                           "(embed) and the context read with recall (load)", ("stage",),
                                           buckets=LATENCY_BUCKETS, registry=r)
        self.delivery_failures = Counter("hilo_delivery_failures", "Outbox parts that finally failed to go out",
                                         ("surface",), registry=r)
        self.refusals = Counter("hilo_webhook_refusals", "Requests refused before they were read: bad_signature, "
                                "rate_limited, too_large", ("surface", "reason"), registry=r)
        self.backlog = Gauge("hilo_outbox_backlog", "Outbox parts not delivered yet (pending or being sent)",
                             registry=r)
        self.backlog_age = Gauge("hilo_outbox_oldest_seconds", "Age of the oldest undelivered outbox part",
                                 registry=r)
        self._backlog_read: Backlog | None = None
        self._backlog_at = 0.0

    # -- the process's active metrics ------------------------------------------------------------------------

    def activate(self, backlog: Backlog | None = None) -> None:
        """Make these the process's metrics; `backlog` reads (parts, oldest age in s) when scraped."""
        global _active
        _started.append(self)
        _active = self
        self._backlog_read = backlog

    def deactivate(self) -> None:
        """This app stopped: the one started before it that still runs (a test's) is the active one again."""
        global _active
        while self in _started:
            _started.remove(self)
        _active = _started[-1] if _started else None
        self._backlog_read = None

    async def exposition(self) -> bytes:
        """The text a scrape gets (the backlog read first, at most every BACKLOG_CACHE_S; a database that cannot
        answer leaves the last values)."""
        now = time.monotonic()
        if self._backlog_read is not None and now - self._backlog_at >= BACKLOG_CACHE_S:
            try:
                parts, age = await asyncio.wait_for(self._backlog_read(), BACKLOG_TIMEOUT_S)
            except (StoreError, TimeoutError):
                pass
            else:
                self.backlog.set(parts)
                self.backlog_age.set(age)
                self._backlog_at = now
        from prometheus_client.exposition import generate_latest

        return generate_latest(self.registry)


def __getattr__(name: str) -> Any:
    if name == "CONTENT_TYPE_LATEST":  # the scrape's media type, from the client that writes the exposition
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        return CONTENT_TYPE_LATEST
    raise AttributeError(name)


_active: Metrics | None = None
_started: list[Metrics] = []


def active() -> Metrics | None:
    """The metrics of the app that runs now (None outside `hilo serve` and the tests' daemons)."""
    return _active


def _model(record: ModelCallRecord) -> str:
    return record.model.removeprefix(f"{record.provider}:")


def observe_calls(calls: Sequence[ModelCallRecord], *, kind: str = "turn", answered: bool = False) -> None:
    """Every model call of one answer (its attempts, failed ones and circuit skips included): counts and tokens;
    `answered`: the last call gave the answer, so a fallback answered when it names `fallback_from`."""
    m = _active
    if m is None:
        return
    for c in calls:
        model = _model(c)
        m.model_calls.labels(c.provider, model, c.outcome, kind).inc()
        if c.tokens_in:
            m.tokens.labels(c.provider, model, "in", kind).inc(c.tokens_in)
        if c.tokens_out:
            m.tokens.labels(c.provider, model, "out", kind).inc(c.tokens_out)
    if answered and calls and calls[-1].fallback_from is not None:
        m.fallbacks.labels(calls[-1].provider, _model(calls[-1]), kind).inc()


def observe_cost(provider: str, model: str, usd: float) -> None:
    """The estimated cost of one model call (bot's price table), in US dollars."""
    m = _active
    if m is not None and usd > 0:
        m.cost.labels(provider, model.removeprefix(f"{provider}:")).inc(usd)


def observe_turn(surface: str, outcome: str, seconds: float, pre_model_seconds: float,
                 calls: Sequence[ModelCallRecord]) -> None:
    """One turn that ran: its outcome (a Completion's, or "failed"), latency, and its model calls."""
    m = _active
    if m is None:
        return
    m.turns.labels(surface, outcome).inc()
    m.turn_seconds.labels(surface).observe(seconds)
    m.pre_model_seconds.labels(surface).observe(pre_model_seconds)
    observe_calls(calls, kind="turn", answered=outcome != "failed")


def context_blocks(ctx: AssembledContext) -> dict[str, int]:
    """A context's tokens per block, its memory block split into the memories (with the block's header) and the
    recalled messages."""
    recall = ctx.recalled_tokens()
    t = ctx.tokens
    return {"system": t["system"], "memories": t["memory"] - recall, "recall": recall,
            "cross_surface": t["cross_surface"], "conversation": t["conversation"], "new_message": t["new_message"]}


def observe_context(ctx: AssembledContext) -> None:
    """A turn's context tokens per block (context_blocks)."""
    m = _active
    if m is not None:
        for block, n in context_blocks(ctx).items():
            m.context_tokens.labels(block).observe(n)


def observe_retrieval(stage: str, seconds: float) -> None:
    m = _active
    if m is not None:
        m.retrieval_seconds.labels(stage).observe(seconds)


def observe_delivery_failure(surface: str) -> None:
    m = _active
    if m is not None:
        m.delivery_failures.labels(surface).inc()


def refused(surface: str, reason: str) -> None:
    """A request refused before it was read: `reason` bad_signature, rate_limited or too_large."""
    m = _active
    if m is not None:
        m.refusals.labels(surface, reason).inc()
