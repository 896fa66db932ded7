"""Builds the model chain from Settings, constructing only the providers the chain uses.

Provider modules (and through them the openai / anthropic SDKs, which take seconds to import) are imported here
inside the function, for the providers actually named in HILO_MODEL / HILO_FALLBACK_MODELS / HILO_MODEL_ROUTES: an
echo-only chain imports no SDK.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from bot import vision
from bot.config import Settings
from bot.models.base import ModelProvider
from bot.models.chain import ModelChain
from bot.retry import RetryPolicy
from bot.spend import Meter
from kernel.errors import ConfigError


def build_provider(name: str, settings: Settings, *, anthropic_max_tokens: int | None = None) -> ModelProvider:
    """One provider by name ("echo", "openai", "anthropic"), configured from settings."""
    if name == "echo":
        from bot.models.echo import EchoProvider

        return EchoProvider()
    if name == "openai":
        from bot.models.openai_provider import OpenAIProvider

        return OpenAIProvider(api_key=settings.openai_api_key, base_url=settings.openai_base_url,
                              timeout=settings.model_timeout)
    if name == "anthropic":
        from bot.models.anthropic_provider import DEFAULT_MAX_TOKENS, AnthropicProvider

        return AnthropicProvider(api_key=settings.anthropic_api_key, base_url=settings.anthropic_base_url,
                                 timeout=settings.model_timeout, max_tokens=anthropic_max_tokens or DEFAULT_MAX_TOKENS)
    raise ConfigError(f"unknown model provider {name!r}: use echo, openai or anthropic")


def build_chain(
    settings: Settings, *, providers: Mapping[str, ModelProvider] | None = None, policy: RetryPolicy | None = None,
    timeout: float | None = None, failure_threshold: int = 5, cooldown: float = 30.0,
    clock: Callable[[], float] = time.monotonic, anthropic_max_tokens: int | None = None,
) -> ModelChain:
    """The chain for `settings.models`, with the routes' (`settings.model_routes`). `providers` overrides (e.g. a
    test's own provider) win over built ones; `policy` defaults to RetryPolicy(attempts=settings.model_attempts);
    `timeout` to settings.model_timeout."""
    given = dict(providers or {})
    built: dict[str, ModelProvider] = {}
    for spec in settings.every_model:
        if spec.provider not in given and spec.provider not in built:
            built[spec.provider] = build_provider(spec.provider, settings, anthropic_max_tokens=anthropic_max_tokens)
    return ModelChain(
        settings.models, {**built, **given},
        policy=policy or RetryPolicy(attempts=settings.model_attempts),
        timeout=settings.model_timeout if timeout is None else timeout,
        failure_threshold=failure_threshold, cooldown=cooldown, clock=clock,
        meter=Meter(settings.prices),  # priced by HILO_PRICES; the pipeline adds the caps (bot/spend.py)
        routes=settings.model_routes,
        sent_to=vision.sent_to(settings),  # a fallback that reads text only gets no photo (bot/vision.py)
    )
