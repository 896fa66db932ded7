"""The long commands, with their progress on stderr (bot/progress.py): `hilo embed` (the backfill of message and
memory vectors, bot/embedding.py) and `hilo import` (memory/importer.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from bot.config import Settings
from kernel.errors import ConfigError
from memory.importer import import_file
from memory.store import ImportResult, Store


def cmd_embed(args: argparse.Namespace, settings: Settings, with_store: Any) -> int:
    """Embed every message and current memory (of --user) lacking a vector of the configured embedder, merging
    the memories the vectors show to be the same; stopped, it resumes."""

    async def run(store: Any) -> int:
        from bot.embedders.factory import build_embedder
        from bot.embedding import embed_pending
        from bot.progress import Progress

        embedder = build_embedder(settings)
        try:
            if embedder.name == "none":
                raise ConfigError("hilo embed needs an embedder: HILO_EMBEDDER is none here (or the local model's "
                                  "package is not installed): set HILO_EMBEDDER=local or openai")
            if store.vector_status is not None:
                print(f"hilo: nothing to embed: {store.vector_status}", file=sys.stderr)
                return 1
            user_id = None
            if args.user:
                user_id = await store.user_id(args.user)
                if user_id is None:
                    print(f"hilo: no person with handle {args.user!r}", file=sys.stderr)
                    return 1
            had, total = await store.embedding_progress(embedder.name, user_id)
            had_memories, memories = await store.memory_embedding_progress(embedder.name, user_id)
            bars = [Progress(f"embed ({embedder.name})", total - had, plain=True)]

            def memory_batch(n: int) -> None:
                if len(bars) == 1:  # the messages are done: their bar ends, the memories' begins
                    bars[0].close()
                    bars.append(Progress(f"embed memories ({embedder.name})", memories - had_memories,
                                         plain=True, unit="memories"))
                bars[1].advance(n)

            try:
                result = await embed_pending(store, embedder, batch=args.batch or settings.embed_batch,
                                             user_id=user_id, on_batch=bars[0].advance, on_memory_batch=memory_batch)
            finally:
                for bar in bars:
                    bar.close()
            print(f"embedded {result.messages} messages with {embedder.name}, {had} had vectors already")
            if memories:  # a second line, only for a person (or a database) with memories
                print(f"embedded {result.memories} memories, {had_memories} had vectors already, "
                      f"{result.merged} merged into a near-duplicate")
            return 0
        finally:
            await embedder.aclose()

    return int(asyncio.run(with_store(settings, run)))


async def import_with_progress(store: Store, path: str) -> ImportResult:
    """import_file with a bar on a terminal (nothing more elsewhere: the output stays one line)."""
    from bot.progress import Progress

    bar: list[Progress] = []

    def advance(rows: int, total: int) -> None:
        if not bar:
            bar.append(Progress("import", total, unit="lines"))
        bar[0].advance(rows)

    try:
        return await import_file(store, path, advance)
    finally:
        if bar:
            bar[0].close()
