"""The model chain: HILO_MODEL, then each HILO_FALLBACK_MODELS entry, each retried by `bot.models.retry`.

    chain = ModelChain(settings.models, {"openai": OpenAIProvider(...)}, policy=RetryPolicy(attempts=3))
    result = await chain.complete(messages)          # ChainResult(completion, spec, calls)
    async for event in chain.stream(messages):       # str deltas, Reset(), then one ChainResult
        ...

Every attempt is a ModelCallRecord in `calls` (fallback calls carry `fallback_from` = the primary's label).
When every model failed, AllModelsFailed(calls) is raised.

Every attempt goes through the chain's `meter` (bot/spend.py): it prices the call (the record's cost_usd) and,
with spend caps, reserves the attempt's worst case first. A refused reservation ends the chain at once with
CapReached (a "cap_reached" record for the call not made): a cap is no model's failure, so no fallback is tried
and no circuit counts it.

Routes (HILO_MODEL_ROUTES, bot/config_routes.py): when given, the message being answered (the context's
"new_message", else its last user message) picks the chain: the first route whose rules match it, else the
default one (`specs`). A route's chain is tried like the default one; every record carries the route's name.
Structured answers (the background jobs') always use the default chain.

Each model has a circuit breaker (one per model, whichever routes name it): after `failure_threshold` consecutive
failed turns it is skipped for `cooldown` seconds (a "circuit_open" record with 0 latency), then half-open: one
trial turn closes it on success or reopens it on failure. The clock is injectable.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence

from bot.config import ModelSpec
from bot.config_routes import Route, every_model
from bot.models.base import (
    AllModelsFailed,
    CapReached,
    ChainResult,
    Completion,
    ModelError,
    ModelProvider,
    Reset,
    ToolOffer,
)
from bot.models.retry import complete_with_retry, stream_with_retry
from bot.models.structured import OutputSchema, StructuredProvider
from bot.retry import RetryPolicy
from bot.spend import Meter, OverCap
from kernel.errors import ConfigError
from kernel.types import ChatMessage, ModelCallRecord

__all__ = ["AllModelsFailed", "CapReached", "ChainResult", "CircuitBreaker", "ModelChain", "Reset"]


class CircuitBreaker:
    """Consecutive failed turns of one model: closed -> open (skip) -> half-open (one trial) -> closed/open."""

    def __init__(self, threshold: int = 5, cooldown: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self.failures = 0
        self.opened_at: float | None = None
        self._trial = False

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self._trial or self._clock() - self.opened_at >= self.cooldown:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """May this turn call the model? In half-open state only one turn (the trial) may, until it ends."""
        if self.opened_at is None:
            return True
        if self._trial or self._clock() - self.opened_at < self.cooldown:
            return False
        self._trial = True
        return True

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None
        self._trial = False

    def failure(self) -> None:
        self.failures += 1
        if self._trial or self.failures >= self.threshold:
            self.opened_at = self._clock()
        self._trial = False

    def abandon(self) -> None:
        """The turn was cancelled: it proves nothing, so a half-open trial slot is given back."""
        self._trial = False


class ModelChain:
    """Tries each model in order, each through the retry policy, behind its circuit breaker."""

    def __init__(
        self, specs: Sequence[ModelSpec], providers: Mapping[str, ModelProvider], *,
        policy: RetryPolicy | None = None, timeout: float = 60.0, failure_threshold: int = 5,
        cooldown: float = 30.0, clock: Callable[[], float] = time.monotonic, meter: Meter | None = None,
        routes: Sequence[Route] = (),
        sent_to: Callable[[ModelSpec, Sequence[ChatMessage]], Sequence[ChatMessage]] | None = None,
    ) -> None:
        if not specs:
            raise ConfigError("no model configured: set HILO_MODEL (or leave it unset for the offline echo model)")
        self.routes = tuple(routes)
        every = every_model(specs, self.routes)
        missing = sorted({s.provider for s in every} - set(providers))
        if missing:
            raise ConfigError(f"no provider built for {', '.join(missing)}: check HILO_MODEL / HILO_FALLBACK_MODELS "
                              "/ HILO_MODEL_ROUTES")
        self.specs = tuple(specs)
        self.providers = dict(providers)
        self.policy = policy or RetryPolicy()
        self.timeout = timeout
        self._breaker_settings = (failure_threshold, cooldown, clock)
        self.breakers = {s.label: CircuitBreaker(failure_threshold, cooldown, clock) for s in every}
        #: prices each call and keeps the spend caps (bot/spend.py); the pipeline gives it its store and caps
        self.meter = meter or Meter()
        #: what one model is sent of the messages (bot/vision.py `sent_to`: a photo only to a model that sees
        #: images, a note to one that does not); None: the messages as they are
        self.sent_to = sent_to

    @property
    def primary(self) -> ModelSpec:
        return self.specs[0]

    def route(self, messages: Sequence[ChatMessage]) -> tuple[str | None, tuple[ModelSpec, ...]]:
        """(the route's name, its chain) for these messages: the first route that matches the message being
        answered, else (None, the default chain)."""
        if self.routes:
            at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].block == "new_message"), None)
            if at is None:
                at = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
            text = messages[at].content if at is not None else ""
            images = at is not None and bool(messages[at].images)
            tool_ran = at is not None and any(m.role == "tool" for m in messages[at + 1:])
            for route in self.routes:
                if route.matches(text, images, tool_ran=tool_ran):
                    return route.name, route.models
        return None, self.specs

    def _available(
        self, calls: list[ModelCallRecord], specs: Sequence[ModelSpec], route: str | None, structured: bool = False,
    ) -> Iterator[tuple[str | None, ModelSpec, CircuitBreaker]]:
        """The models of `specs` in order (`structured`: only those that can answer with JSON), each with what its
        records' fallback_from is (the chain's first model's label, None for the first) and its breaker; a model
        whose circuit is open is recorded as skipped (0 latency, outcome "circuit_open") and not yielded."""
        for index, spec in enumerate(specs):
            if structured and not isinstance(self.providers[spec.provider], StructuredProvider):
                continue
            fallback_from = specs[0].label if index > 0 else None
            breaker = self.breakers[spec.label]
            if breaker.allow():
                yield fallback_from, spec, breaker
            else:
                calls.append(ModelCallRecord(spec.label, spec.provider, 0, 0, 0, "circuit_open", fallback_from,
                                             "CircuitOpen", route=route))

    async def complete(self, messages: Sequence[ChatMessage], *, tools: ToolOffer | None = None) -> ChainResult:
        """The first answer of the chain (offering `tools` to the models whose provider can call them). Raises
        AllModelsFailed (with every call) when no model answered."""
        return await self._complete(messages, None, tools)

    async def complete_json(self, messages: Sequence[ChatMessage], schema: OutputSchema) -> ChainResult:
        """The first structured answer (bot/models/structured.py) of the chain's models whose provider can give
        one (echo cannot: it is passed over, unrecorded). AllModelsFailed when none answered."""
        return await self._complete(messages, schema)

    def sibling(self) -> ModelChain:
        """A chain of the same models, providers (their HTTP clients: this chain closes them), retry policy and
        timeout, with circuit breakers of its own: a background job's failures never open a turn's circuit."""
        threshold, cooldown, clock = self._breaker_settings
        return ModelChain(self.specs, self.providers, policy=self.policy, timeout=self.timeout,
                          failure_threshold=threshold, cooldown=cooldown, clock=clock, meter=self.meter,
                          routes=self.routes, sent_to=self.sent_to)

    def _for(self, spec: ModelSpec, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        return messages if self.sent_to is None else self.sent_to(spec, messages)

    def structured(self) -> bool:
        """Whether any model of the chain can answer with JSON following a schema."""
        return any(isinstance(self.providers[s.provider], StructuredProvider) for s in self.specs)

    async def _complete(self, messages: Sequence[ChatMessage], schema: OutputSchema | None,
                        tools: ToolOffer | None = None) -> ChainResult:
        calls: list[ModelCallRecord] = []
        last: ModelError | None = None
        route, specs = self.route(messages) if schema is None else (None, self.specs)
        for fallback_from, spec, breaker in self._available(calls, specs, route, structured=schema is not None):
            try:
                completion = await complete_with_retry(
                    self.providers[spec.provider], spec, self._for(spec, messages), policy=self.policy,
                    timeout=self.timeout, calls=calls, fallback_from=fallback_from, schema=schema, meter=self.meter,
                    route=route, tools=tools,
                )
            except OverCap as over:
                breaker.abandon()
                raise self._over_cap(calls, fallback_from, route, spec, over) from None
            except ModelError as exc:
                breaker.failure()
                last = exc
                continue
            except BaseException:
                breaker.abandon()
                raise
            breaker.success()
            return ChainResult(completion, spec, calls)
        raise AllModelsFailed(calls, last)

    async def stream(self, messages: Sequence[ChatMessage], *,
                     tools: ToolOffer | None = None) -> AsyncGenerator[str | Reset | ChainResult, None]:
        """Text deltas as they arrive; `Reset()` when a model failed after partial output (discard what was
        shown; the retry or the next model answers in full); finally one ChainResult. Raises AllModelsFailed."""
        calls: list[ModelCallRecord] = []
        last: ModelError | None = None
        route, specs = self.route(messages)
        for fallback_from, spec, breaker in self._available(calls, specs, route):
            completion: Completion | None = None
            events = stream_with_retry(
                self.providers[spec.provider], spec, self._for(spec, messages), policy=self.policy,
                timeout=self.timeout, calls=calls, fallback_from=fallback_from, meter=self.meter, route=route,
                tools=tools,
            )
            try:
                async for event in events:
                    if isinstance(event, Completion):
                        completion = event
                    else:
                        yield event
            except OverCap as over:
                breaker.abandon()
                raise self._over_cap(calls, fallback_from, route, spec, over) from None
            except ModelError as exc:
                breaker.failure()
                last = exc
                continue
            except BaseException:
                breaker.abandon()
                raise
            finally:
                await events.aclose()
            assert completion is not None, "stream_with_retry ends with a Completion or raises"
            breaker.success()
            yield ChainResult(completion, spec, calls)
            return
        raise AllModelsFailed(calls, last)

    def _over_cap(self, calls: list[ModelCallRecord], fallback_from: str | None, route: str | None, spec: ModelSpec,
                  over: OverCap) -> CapReached:
        """The refused call as a record (no tokens, no latency, no cost), and the chain's end."""
        calls.append(ModelCallRecord(spec.label, spec.provider, 0, 0, 0, "cap_reached", fallback_from,
                                     f"OverCap scope={over.scope}", route=route))
        return CapReached(calls, over.scope, over.period)

    async def aclose(self) -> None:
        """Close every provider's HTTP client."""
        for provider in self.providers.values():
            await provider.aclose()
