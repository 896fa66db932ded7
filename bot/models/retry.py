"""Model calls, retried: the models' use of bot.retry (the one retry module), with a record per attempt.

Providers classify their errors (bot.models.base) and never retry; SDK retries are off. Here:
- only TransientError is retried (429/529, 5xx, timeouts, connection failures), up to the policy's `attempts`;
- the wait is the server's `retry_after` when it gave one; if that is longer than `retry_after_cap`, this model
  is given up at once (the chain moves on to the next one) instead of holding the turn;
- otherwise bot.retry's exponential backoff with jitter;
- asyncio.CancelledError (and GeneratorExit) always propagate: they are never retried;
- every attempt appends one ModelCallRecord (label, provider, tokens, latency, outcome, fallback_from, error
  class/status/retry_after: never message text; its cost from the meter's price table);
- with a `meter` (bot/spend.py), every attempt first reserves its worst case against the spend caps (OverCap: no
  call is made, nothing is retried) and settles the reservation to its real cost when it ends.
The policy's `sleep` is injectable so tests record the waits instead of sleeping them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from bot.config import ModelSpec
from bot.models.base import (
    Completion,
    ConnectionFailed,
    ModelError,
    ModelProvider,
    Reset,
    ToolOffer,
    ToolProvider,
    TransientError,
)
from bot.models.structured import OutputSchema, StructuredProvider
from bot.retry import RetryPolicy
from bot.spend import Meter, Ticket
from kernel import log
from kernel.types import ChatMessage, ModelCallRecord

logger = log.get(__name__)


def transient(error: BaseException) -> bool:
    """What bot.retry retries of the ModelError tree (chat models and embeddings alike): TransientError."""
    return isinstance(error, TransientError)


def pause(error: BaseException) -> float | None:
    """The pause a ModelError's server asked for (its `retry_after`), or None."""
    return error.retry_after if isinstance(error, ModelError) else None


def _log_retry(attempt: int, error: BaseException, wait: float) -> None:
    logger.warning("model.retry", attempt=attempt, error=type(error).__name__,
                   status=getattr(error, "status", None), wait_s=round(wait, 3))


def describe(error: BaseException) -> str:
    """What a call record keeps of an error: class, status, retry_after (never the message)."""
    parts = [type(error).__name__]
    status = getattr(error, "status", None)
    if status is not None:
        parts.append(f"status={status}")
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        parts.append(f"retry_after={retry_after:g}")
    return " ".join(parts)


def _record(
    spec: ModelSpec, started: float, *, completion: Completion | None = None, error: ModelError | None = None,
    fallback_from: str | None, meter: Meter | None = None, route: str | None = None,
) -> ModelCallRecord:
    latency_ms = int((time.perf_counter() - started) * 1000)
    if completion is not None:
        record = ModelCallRecord(spec.label, spec.provider, completion.tokens_in, completion.tokens_out, latency_ms,
                                 completion.outcome, fallback_from, tokens_cached=completion.tokens_cached,
                                 route=route)
        return meter.priced(spec, record) if meter is not None else record
    assert error is not None
    logger.warning("model.call_failed", model=spec.label, outcome=error.outcome, error=describe(error),
                   latency_ms=latency_ms)
    return ModelCallRecord(spec.label, spec.provider, 0, 0, latency_ms, error.outcome, fallback_from,
                           describe(error), route=route)


async def complete_with_retry(
    provider: ModelProvider, spec: ModelSpec, messages: Sequence[ChatMessage], *, policy: RetryPolicy,
    timeout: float, calls: list[ModelCallRecord], fallback_from: str | None = None,
    schema: OutputSchema | None = None, meter: Meter | None = None, route: str | None = None,
    tools: ToolOffer | None = None,
) -> Completion:
    """One model's completion, retried per `policy`. Appends a record per attempt to `calls`; raises the last
    ModelError when the model is given up (OverCap when the meter refused an attempt). With `schema`, a
    structured answer (the provider must be a StructuredProvider: bot/models/structured.py). `tools` are offered
    when the provider can call them (a ToolProvider), else left out."""
    async def attempt() -> Completion:
        ticket = await _reserve(meter, provider, spec, messages)
        started = time.perf_counter()
        record: ModelCallRecord | None = None
        try:
            if tools is not None and isinstance(provider, ToolProvider):
                completion = await provider.complete(spec.model, messages, timeout=timeout, tools=tools)
            elif schema is None:
                completion = await provider.complete(spec.model, messages, timeout=timeout)
            else:
                assert isinstance(provider, StructuredProvider), "the chain asks structured providers only"
                completion = await provider.complete_json(spec.model, messages, schema, timeout=timeout)
        except ModelError as exc:
            calls.append(_record(spec, started, error=exc, fallback_from=fallback_from, route=route))
            raise
        else:
            record = _record(spec, started, completion=completion, fallback_from=fallback_from, meter=meter,
                             route=route)
            calls.append(record)
            return completion
        finally:
            await _settle(meter, ticket, record)

    return await policy.call(attempt, transient=transient, retry_after=pause, on_retry=_log_retry)


def stream_with_retry(
    provider: ModelProvider, spec: ModelSpec, messages: Sequence[ChatMessage], *, policy: RetryPolicy,
    timeout: float, calls: list[ModelCallRecord], fallback_from: str | None = None, meter: Meter | None = None,
    route: str | None = None, tools: ToolOffer | None = None,
) -> AsyncGenerator[str | Reset | Completion, None]:
    """One model's streamed answer, retried per `policy`: text deltas, `Reset()` when an attempt failed after
    yielding text (what was shown is void), and finally the Completion. Raises the last ModelError when the
    model is given up (after its Reset, if text had been shown). Retried by `policy.stream` (bot/retry.py: the first
    attempt outside tenacity's loop, as a completion's)."""
    async def attempt() -> AsyncGenerator[str | Reset | Completion, None]:
        ticket = await _reserve(meter, provider, spec, messages)
        started = time.perf_counter()
        shown = False
        record: ModelCallRecord | None = None
        deltas = (provider.stream(spec.model, messages, timeout=timeout, tools=tools)
                  if tools is not None and isinstance(provider, ToolProvider)
                  else provider.stream(spec.model, messages, timeout=timeout))
        try:
            async for item in deltas:
                if isinstance(item, Completion):
                    record = _record(spec, started, completion=item, fallback_from=fallback_from, meter=meter,
                                     route=route)
                    calls.append(record)
                    yield item
                    return
                if item:
                    shown = True
                    yield item
            raise ConnectionFailed(f"{spec.label}: stream ended without a final completion")
        except ModelError as exc:
            calls.append(_record(spec, started, error=exc, fallback_from=fallback_from, route=route))
            if shown:
                yield Reset()
            raise
        finally:
            await _aclose(deltas)
            await _settle(meter, ticket, record)

    return policy.stream(attempt, transient=transient, retry_after=pause, on_retry=_log_retry)


async def _reserve(meter: Meter | None, provider: ModelProvider, spec: ModelSpec,
                   messages: Sequence[ChatMessage]) -> Ticket | None:
    """The attempt's reservation (OverCap: over a cap, the attempt is not made); None without caps."""
    if meter is None:
        return None
    return await meter.reserve(spec, messages, getattr(provider, "max_tokens", None))


async def _settle(meter: Meter | None, ticket: Ticket | None, record: ModelCallRecord | None) -> None:
    if meter is not None and ticket is not None:
        await meter.settle(ticket, record)


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
