"""The `none` embedder: no vectors, so retrieval is lexical only (HILO_EMBEDDER=none, or no local model installed)."""

from __future__ import annotations

from collections.abc import Sequence

from bot.embedders.base import Kind, Vector


class NoEmbedder:
    """Gives an empty vector per text (dim 0): a caller checks `dim` and skips vector search."""

    name = "none"
    dim = 0

    async def start(self) -> None:
        return None

    async def embed(self, texts: Sequence[str], *, kind: Kind) -> list[Vector]:
        return [[] for _ in texts]

    async def aclose(self) -> None:
        return None
