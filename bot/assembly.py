"""Context assembly over the store, without side effects: what a turn sends the model (bot/pipeline.py) and what
`hilo context` prints. It lives apart from the pipeline so that the dry run loads only what it runs: none of the
turn's machinery (outbox, commands, alerts, spend, the model chain), a good part of `hilo context`'s start-up
(issue 14)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import datetime, timedelta

from bot import metrics
from bot.config import Settings
from bot.embedders.base import Embedder
from bot.embedding import active, embed_query
from kernel import tokens
from kernel.types import utcnow
from memory.context import AssembledContext, assemble, recall_limit
from memory.store import ContextQuery, ContextRows, Store

#: Texts shorter than this are counted on the loop (tiktoken: ~0.15 ms at 4k characters, the index path before
#: the daemon moves to tiktoken ~1 ms): a thread hop and its wake-up cost more than that.
COUNT_ON_LOOP_CHARS = 4096


async def count_tokens(text: str) -> int:
    # tiktoken releases the GIL while it counts: a long text goes to a thread instead of holding the loop.
    if len(text) < COUNT_ON_LOOP_CHARS:
        return tokens.count(text)
    return await asyncio.to_thread(tokens.count, text)


async def assemble_context(
    settings: Settings, store: Store, embedder: Embedder | None, *, user_id: int | None, surface: str,
    conversation_id: int | None, current_message_id: int | None, text: str, n_tokens: int | None = None,
    at: datetime | None = None, private: bool = True,
) -> AssembledContext:
    """The model's input for `text` from `user_id` on `surface` as of `at` (default now): one read transaction,
    and the question's embedding first when `embedder` is active. `private=False` (a group) leaves the person's
    memory and other surfaces out."""
    at = at or utcnow()
    if n_tokens is None:
        n_tokens = await count_tokens(text)
    rows = None
    if user_id is not None:
        began = time.perf_counter()
        query = context_query(settings, user_id=user_id, surface=surface, conversation_id=conversation_id,
                              current_message_id=current_message_id, text=text, at=at, private=private)
        if private and embedder is not None and active(embedder, store):
            embedding_s = 0.0

            async def embedded() -> tuple[float, ...] | None:
                nonlocal embedding_s
                started = time.perf_counter()
                try:
                    return await embed_query(embedder, text, settings.embed_query_timeout, user_id=user_id)
                finally:
                    embedding_s = time.perf_counter() - started
                    metrics.observe_retrieval("embed", embedding_s)

            # the store reads what needs no vector while the question is embedded (Store.load_context)
            rows = await store.load_context(replace(query, embedder=embedder.name), vector=embedded())
            metrics.observe_retrieval("load", time.perf_counter() - began - embedding_s)
        else:
            rows = await store.load_context(query)
            metrics.observe_retrieval("load", time.perf_counter() - began)
    return assemble_rows(settings, rows, text=text, n_tokens=n_tokens, surface=surface, at=at)


def context_query(
    settings: Settings, *, user_id: int, surface: str, conversation_id: int | None, current_message_id: int | None,
    text: str, at: datetime, private: bool = True,
) -> ContextQuery:
    """What the store gathers for a context (the settings' windows and limits; a group's: no memory, no other
    surfaces)."""
    s = settings
    return ContextQuery(
        user_id=user_id, surface=surface, conversation_id=conversation_id, current_message_id=current_message_id,
        at=at, cross_since=at - timedelta(hours=s.cross_surface_hours),
        cross_limit=s.cross_surface_limit if private else 0,
        search_text=text, search_limit=recall_limit(s.context_budget) if private else 0,
        facts_limit=50 if private else 0,
    )


def assemble_rows(settings: Settings, rows: ContextRows | None, *, text: str, n_tokens: int, surface: str,
                  at: datetime) -> AssembledContext:
    """The model's input from what the store gathered (None: nobody's history, e.g. a dry run for no one)."""
    s = settings
    return assemble(
        rows or ContextRows([], [], [], []), system_prompt=s.system_prompt, new_text=text,
        new_tokens=n_tokens, budget=s.context_budget, surface=surface, now=at, memory_weights=s.memory_weights,
    )
