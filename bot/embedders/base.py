"""The embedder contract and its error.

An embedder turns texts into vectors of `dim` floats, one per text, in the order given. `kind` says what a text
is: "query" (a question retrieval searches with) or "passage" (a stored message); models trained with
asymmetric prefixes (e5) embed them differently, the others ignore it. Vectors are unit length (cosine is a dot
product), so memory/ can compare vectors of one embedder without knowing which it is. `name` identifies the
model ("local:use-multilingual-v3", "openai:text-embedding-3-small"): vectors of different names are not
comparable, so a store keeps the name beside them.

EmbeddingError                    an embedding call failed for good (after bot.retry's attempts, or at once for a
                                  request the server refused); `status` is the HTTP status when there was one
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from kernel.errors import HiloError

Kind = Literal["query", "passage"]
Vector = list[float]


class EmbeddingError(HiloError):
    """Embedding failed. The message names the embedder and what to check: never the texts."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@runtime_checkable
class Embedder(Protocol):
    """What retrieval and the jobs seam ask of an embedder. The app's lifespan owns it (start, then aclose)."""

    name: str
    #: Floats per vector; 0 for the `none` embedder (it gives no vectors).
    dim: int

    async def start(self) -> None:
        """Get ready (a local model loads here, on its worker thread); embedding before start works too, it only
        waits for the load. Never blocks the event loop."""

    async def embed(self, texts: Sequence[str], *, kind: Kind) -> list[Vector]:
        """One unit vector of `dim` floats per text, in order. Raises EmbeddingError."""

    async def aclose(self) -> None:
        """Release the model or the HTTP client."""


def unit(vector: Sequence[float]) -> Vector:
    """`vector` scaled to length 1 (a zero vector stays zero)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else [0.0 for _ in vector]
