"""The retry policy: the ONLY place in hilo that calls a model again after it failed.

Providers classify their errors (bot.models.base) and never retry; SDK retries are off. Here, with tenacity:
- only TransientError is retried (429/529, 5xx, timeouts, connection failures), up to `attempts` attempts;
- the wait is the server's `retry_after` when it gave one; if that is longer than `retry_after_cap`, this model
  is given up at once (the chain moves on to the next one) instead of holding the turn;
- otherwise exponential backoff with jitter from `backoff_base` (small, so tests are quick);
- asyncio.CancelledError (and GeneratorExit) always propagate: they are never retried;
- every attempt appends one ModelCallRecord (label, provider, tokens, latency, outcome, fallback_from, error
  class/status/retry_after: never message text).
`sleep` is injectable so tests record the waits instead of sleeping them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from bot.config import ModelSpec, Settings
from bot.models.base import Completion, ConnectionFailed, ModelError, ModelProvider, Reset, TransientError
from kernel import log
from kernel.types import ChatMessage, ModelCallRecord

logger = log.get(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry one model before the chain falls back to the next."""

    attempts: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    retry_after_cap: float = 30.0
    sleep: Sleep = field(default=asyncio.sleep)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> RetryPolicy:
        return replace(cls(attempts=settings.model_attempts), **overrides)

    def wait_seconds(self, error: BaseException | None, attempt: int) -> float:
        """Seconds before attempt `attempt + 1`: the server's retry_after (capped) or jittered backoff."""
        if isinstance(error, ModelError) and error.retry_after is not None:
            return min(error.retry_after, self.retry_after_cap)
        # Exponential with jitter (as tenacity's wait_exponential_jitter): base, 2*base, 4*base ... + [0, base).
        backoff: float = min(self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1))
        return backoff + random.uniform(0, self.backoff_base)

    def should_stop(self, error: BaseException | None, attempt: int) -> bool:
        if attempt >= self.attempts:
            return True
        # A server asking for a long pause: better to answer with the next model than to make the person wait.
        return isinstance(error, ModelError) and error.retry_after is not None and \
            error.retry_after > self.retry_after_cap

    def retrying(self) -> AsyncRetrying:
        def error_of(state: RetryCallState) -> BaseException | None:
            return state.outcome.exception() if state.outcome is not None else None

        return AsyncRetrying(
            retry=retry_if_exception_type(TransientError),
            stop=lambda s: self.should_stop(error_of(s), s.attempt_number),
            wait=lambda s: self.wait_seconds(error_of(s), s.attempt_number),
            sleep=self.sleep,
            before_sleep=_log_retry,
            reraise=True,
        )


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    wait = state.next_action.sleep if state.next_action is not None else None
    logger.warning("model.retry", attempt=state.attempt_number, error=type(error).__name__,
                   status=getattr(error, "status", None), wait_s=round(wait or 0.0, 3))


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
    fallback_from: str | None,
) -> ModelCallRecord:
    latency_ms = int((time.perf_counter() - started) * 1000)
    if completion is not None:
        return ModelCallRecord(spec.label, spec.provider, completion.tokens_in, completion.tokens_out, latency_ms,
                               completion.outcome, fallback_from)
    assert error is not None
    logger.warning("model.call_failed", model=spec.label, outcome=error.outcome, error=describe(error),
                   latency_ms=latency_ms)
    return ModelCallRecord(spec.label, spec.provider, 0, 0, latency_ms, error.outcome, fallback_from,
                           describe(error))


async def complete_with_retry(
    provider: ModelProvider, spec: ModelSpec, messages: Sequence[ChatMessage], *, policy: RetryPolicy,
    timeout: float, calls: list[ModelCallRecord], fallback_from: str | None = None,
) -> Completion:
    """One model's completion, retried per `policy`. Appends a record per attempt to `calls`; raises the last
    ModelError when the model is given up."""
    async for attempt in policy.retrying():
        with attempt:
            started = time.perf_counter()
            try:
                completion = await provider.complete(spec.model, messages, timeout=timeout)
            except ModelError as exc:
                calls.append(_record(spec, started, error=exc, fallback_from=fallback_from))
                raise
            calls.append(_record(spec, started, completion=completion, fallback_from=fallback_from))
            return completion
    raise AssertionError("unreachable: tenacity either returns, reraises or stops")  # pragma: no cover


async def stream_with_retry(
    provider: ModelProvider, spec: ModelSpec, messages: Sequence[ChatMessage], *, policy: RetryPolicy,
    timeout: float, calls: list[ModelCallRecord], fallback_from: str | None = None,
) -> AsyncGenerator[str | Reset | Completion, None]:
    """One model's streamed answer, retried per `policy`: text deltas, `Reset()` when an attempt failed after
    yielding text (what was shown is void), and finally the Completion. Raises the last ModelError when the
    model is given up (after its Reset, if text had been shown)."""
    async for attempt in policy.retrying():
        with attempt:
            started = time.perf_counter()
            shown = False
            deltas = provider.stream(spec.model, messages, timeout=timeout)
            try:
                async for item in deltas:
                    if isinstance(item, Completion):
                        calls.append(_record(spec, started, completion=item, fallback_from=fallback_from))
                        yield item
                        return
                    if item:
                        shown = True
                        yield item
                raise ConnectionFailed(f"{spec.label}: stream ended without a final completion")
            except ModelError as exc:
                calls.append(_record(spec, started, error=exc, fallback_from=fallback_from))
                if shown:
                    yield Reset()
                raise
            finally:
                await _aclose(deltas)
    raise AssertionError("unreachable: tenacity either returns, reraises or stops")  # pragma: no cover


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
